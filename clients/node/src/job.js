// Job: a handle on one job of a queue: its status, its result (waited for without
// polling), cancel.
import { JobCancelled, JobExpired, JobFailed, JobNotFound, ResultTimeout } from './errors.js';
import { parse } from './json.js';

/**
 * @typedef {'waiting' | 'queued' | 'scheduled' | 'active' | 'complete' | 'failed' | 'dead' | 'cancelled' | 'expired'} Status
 */

const FINISHED = new Set(['complete', 'failed', 'dead', 'cancelled', 'expired']);

/** @param {string} status */
export function isFinished(status) {
  return FINISHED.has(status);
}

export class Job {
  /**
   * @param {import('./client.js').Queue} queue
   * @param {string} id
   * @param {boolean} [created] false when the enqueue found a job with this id already
   */
  constructor(queue, id, created = true) {
    this.queue = queue;
    this.id = id;
    this.created = created;
  }

  /** Where the job is; throws JobNotFound if it has no record. @returns {Promise<Status>} */
  async status() {
    const status = await this.queue.client.call((redis) => redis.hget(this.queue.keys.job(this.id), 's'));
    if (status) return /** @type {Status} */ (status);
    if (await this.queue.isDone(this.id)) return 'complete';
    throw new JobNotFound(this.id);
  }

  /**
   * Wait for the job to finish and return its result (integers past 2**53 as BigInt), or
   * throw its error: JobFailed, JobCancelled, JobExpired, JobNotFound, or ResultTimeout.
   * Subscribes to the queue's settled channel, then reads the status, and reads the record
   * again only when the job's id is announced (or every pollInterval, in case an
   * announcement was lost with a connection).
   * @param {{timeout?: number, signal?: AbortSignal}} [options] timeout in ms
   * @returns {Promise<any>}
   */
  async result({ timeout, signal } = {}) {
    const deadline = timeout === undefined ? Infinity : Date.now() + timeout;
    /** @type {() => void} */
    let wake = () => {};
    let woken = false;
    const release = await this.queue.client.listener().wait(this.queue.keys.settled, this.id, () => {
      woken = true;
      wake();
    });
    try {
      let record = null;
      if (!isFinished(await this.status())) {
        for (;;) {
          signal?.throwIfAborted();
          const pause = Math.min(this.queue.client.pollInterval, deadline - Date.now());
          if (pause <= 0) throw new ResultTimeout(this.id, timeout ?? 0);
          if (!woken) await sleep(pause, signal, (resolve) => (wake = resolve));
          woken = false;
          record = await this.read();
          if (isFinished(record.status)) break;
        }
      }
      return this.outcome(record ?? (await this.read()));
    } finally {
      release();
    }
  }

  /** @returns {Promise<{status: string, result?: string, error?: string}>} */
  async read() {
    const fields = await this.queue.client.call((redis) => redis.hgetall(this.queue.keys.job(this.id)));
    if (fields.s) return { status: fields.s, result: fields.r, error: fields.e };
    if (await this.queue.isDone(this.id)) return { status: 'complete' };
    throw new JobNotFound(this.id);
  }

  /** @param {{status: string, result?: string, error?: string}} record */
  outcome(record) {
    if (record.status === 'complete') return record.result === undefined ? null : parse(record.result);
    if (record.status === 'cancelled') throw new JobCancelled(this.id);
    if (record.status === 'expired') throw new JobExpired(this.id);
    let error = { type: 'Unknown', message: record.error ?? 'no error recorded', traceback: '' };
    try {
      const body = JSON.parse(record.error ?? '');
      if (body && typeof body.type === 'string') error = { ...error, ...body };
    } catch {
      // not the JSON aioqueue writes: the raw text is the message
    }
    throw new JobFailed(this.id, String(error.type), String(error.message), String(error.traceback ?? ''));
  }

  /**
   * Cancel the job if it is queued, scheduled or waiting (it never runs), or ask for its
   * abort if it is running. False if it had finished already or does not exist.
   * @returns {Promise<boolean>}
   */
  async cancel() {
    return this.queue.cancel(this.id);
  }
}

/**
 * @param {number} ms
 * @param {AbortSignal | undefined} signal
 * @param {(resolve: () => void) => void} onWake
 * @returns {Promise<void>}
 */
function sleep(ms, signal, onWake) {
  return new Promise((resolve, reject) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', aborted);
      resolve();
    };
    const aborted = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', aborted, { once: true });
    onWake(done);
  });
}
