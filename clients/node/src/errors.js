// Every error the client throws: a class per cause, mirroring the Python package's.
//
// AioqueueError
// ├── ConfigError           an option, a queue name or a setting is invalid; nothing written
// ├── EnqueueError          nothing was written to Redis
// │   ├── SerializationError  the arguments cannot travel as JSON exactly as given
// │   └── PayloadTooLarge     the encoded job is over maxPayloadBytes
// ├── ServerUnavailable     Redis cannot be reached (nothing was sent), or a connection
// │   │                     failed during a call
// │   └── EnqueueUnconfirmed  Redis failed during an enqueue: the jobs may have landed;
// │                           enqueue them again with their ids (.jobIds)
// └── JobError              about one job (.jobId)
//     ├── JobNotFound
//     ├── JobFailed         failed or dead (.errorType, .errorMessage, .traceback)
//     ├── JobCancelled
//     ├── JobExpired        not started within its expiry: it never ran
//     └── ResultTimeout     result({ timeout }) ran out of time

export class AioqueueError extends Error {
  /** @param {string} message @param {ErrorOptions} [options] */
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }
}

export class ConfigError extends AioqueueError {}

export class EnqueueError extends AioqueueError {}

export class SerializationError extends EnqueueError {}

export class PayloadTooLarge extends EnqueueError {
  /** @param {number} size @param {number} limit */
  constructor(size, limit) {
    super(`encoded job is ${size} bytes, over the limit of ${limit} bytes`);
    this.size = size;
    this.limit = limit;
  }
}

export class ServerUnavailable extends AioqueueError {}

export class EnqueueUnconfirmed extends ServerUnavailable {
  /** @param {string[]} jobIds @param {string} url @param {unknown} cause */
  constructor(jobIds, url, cause) {
    super(
      `Redis failed during the enqueue of ${jobIds.length} job(s) (first id ${jobIds[0]}): ` +
        `they may have landed, enqueue them again with their ids: ${url}: ${cause instanceof Error ? cause.message : String(cause)}`,
      { cause },
    );
    this.jobIds = jobIds;
  }
}

export class JobError extends AioqueueError {
  /** @param {string} jobId @param {string} message */
  constructor(jobId, message) {
    super(`job ${jobId}: ${message}`);
    this.jobId = jobId;
  }
}

export class JobNotFound extends JobError {
  /** @param {string} jobId */
  constructor(jobId) {
    super(jobId, 'not found (never enqueued, or its record expired)');
  }
}

export class JobFailed extends JobError {
  /** @param {string} jobId @param {string} errorType @param {string} errorMessage @param {string} traceback */
  constructor(jobId, errorType, errorMessage, traceback) {
    super(jobId, `failed: ${errorType}: ${errorMessage}`);
    this.errorType = errorType;
    this.errorMessage = errorMessage;
    this.traceback = traceback;
  }
}

export class JobCancelled extends JobError {
  /** @param {string} jobId */
  constructor(jobId) {
    super(jobId, 'cancelled');
  }
}

export class JobExpired extends JobError {
  /** @param {string} jobId */
  constructor(jobId) {
    super(jobId, 'expired: not started within its expiry, it never ran');
  }
}

export class ResultTimeout extends JobError {
  /** @param {string} jobId @param {number} timeout */
  constructor(jobId, timeout) {
    super(jobId, `no result within ${timeout} ms`);
    this.timeout = timeout;
  }
}
