// Client and Queue: enqueue jobs for aioqueue's Python workers over ioredis, through the
// same Lua scripts the Python producer calls (docs/protocol.md). A producer never writes
// a record itself.
import { Cluster, Redis } from 'ioredis';
import { ConfigError, EnqueueUnconfirmed, ServerUnavailable } from './errors.js';
import { doneSlot, fingerprint } from './ids.js';
import { Job } from './job.js';
import { QueueKeys } from './keys.js';
import { prepare } from './options.js';
import { CANCEL, CANCEL_SHARDED, ENQUEUE, isNoScript } from './scripts.js';
import { SettledListener } from './settled.js';

const MAX_BATCH = 1000; // jobs per enqueue script call, as in Python
const DAY = 24 * 3600 * 1000;

/**
 * Client settings. Those a producer shares with the workers (prefix, resultTtl,
 * idempotencyTtl) must be the Python App's; the defaults are.
 * @typedef {object} ClientOptions
 * @property {string} [prefix] key prefix; default "aioqueue"
 * @property {number} [maxPayloadBytes] largest encoded job; default 1 MiB
 * @property {number} [resultTtl] ms finished records are kept; default 24 h
 * @property {number} [idempotencyTtl] ms a completed job with no result is remembered; default resultTtl
 * @property {number} [pollInterval] ms between result()'s looks in case an announcement was lost; default 5000
 * @property {number} [commandTimeout] ms one Redis command may take; default 5000
 */

/**
 * One job of an enqueueMany.
 * @typedef {object} Call
 * @property {string} task
 * @property {unknown[]} [args]
 * @property {Record<string, unknown>} [kwargs]
 * @property {import('./options.js').JobOptions} [options]
 */

const CLUSTER = /^rediss?\+cluster:\/\//;

/** The nodes of a redis+cluster://[user:password@]host:port[,host:port...] URL. @param {string} url */
function clusterNodes(url) {
  const hosts = url.replace(CLUSTER, '').replace(/^[^@/]*@/, '').split(/[/?]/)[0];
  return hosts.split(',').map((node) => {
    const colon = node.lastIndexOf(':');
    const port = Number(node.slice(colon + 1));
    if (colon < 1 || !Number.isInteger(port)) throw new ConfigError(`cluster URL: node ${JSON.stringify(node)} is not host:port`);
    return { host: node.slice(0, colon).replace(/^\[|\]$/g, ''), port };
  });
}

/** The user, password and TLS of a cluster URL. @param {string} url */
function clusterAuth(url) {
  const userinfo = /^rediss?\+cluster:\/\/([^@/]*)@/.exec(url)?.[1];
  const [username, password] = userinfo === undefined ? [] : userinfo.split(':').map(decodeURIComponent);
  return {
    ...(password === undefined ? (username ? { password: username } : {}) : { username, password }),
    ...(url.startsWith('rediss') ? { tls: {} } : {}),
  };
}

const KNOWN = new Set(['prefix', 'maxPayloadBytes', 'resultTtl', 'idempotencyTtl', 'pollInterval', 'commandTimeout']);

export class Client {
  /**
   * @param {string} url redis:// or rediss:// (with user, password and database) for one
   *   server; redis+cluster://host:port[,host:port...] (or rediss+cluster://) for a Cluster
   * @param {ClientOptions} [options]
   */
  constructor(url, options = {}) {
    for (const name of Object.keys(options)) {
      if (!KNOWN.has(name)) throw new ConfigError(`unknown client option ${JSON.stringify(name)}`);
    }
    this.prefix = options.prefix ?? 'aioqueue';
    this.maxPayloadBytes = options.maxPayloadBytes ?? 1024 * 1024;
    this.resultTtl = options.resultTtl ?? DAY;
    this.idempotencyTtl = options.idempotencyTtl ?? this.resultTtl;
    this.pollInterval = options.pollInterval ?? 5000;
    if (!(this.maxPayloadBytes > 0) || !(this.resultTtl >= 0) || !(this.idempotencyTtl >= 0)) {
      throw new ConfigError('maxPayloadBytes must be positive and TTLs not negative');
    }
    new QueueKeys(this.prefix, 'q'); // (checks the prefix)
    const redisOptions = {
      // A command sent but unanswered when the connection drops is not sent again by
      // ioredis: an enqueue may have run, so it is resent marked as such (resend=1).
      autoResendUnfulfilledCommands: false,
      maxRetriesPerRequest: 2,
      commandTimeout: options.commandTimeout ?? 5000,
    };
    this.cluster = CLUSTER.test(url);
    /** @type {Redis | Cluster} */
    this.redis = this.cluster
      ? new Cluster(clusterNodes(url), {
        lazyConnect: true,
        // every call of a queue is in its slot; a sharded subscriber per slot's node
        shardedSubscribers: true,
        retryDelayOnTryAgain: 50,
        redisOptions: { ...clusterAuth(url), ...redisOptions },
      })
      : new Redis(url, { lazyConnect: true, ...redisOptions });
    /** @type {Error | undefined} */
    this.lastError = undefined;
    this.redis.on('error', (/** @type {Error} */ error) => (this.lastError = error)); // calls report it
    this.url = maskUrl(url);
    this.connectTimeout = options.commandTimeout ?? 5000;
    /** @type {SettledListener | undefined} */
    this.settled = undefined;
  }

  /**
   * Resolves once connected; throws ServerUnavailable (nothing was sent) when Redis
   * cannot be reached within the command timeout.
   */
  async connected() {
    const redis = this.redis;
    if (redis.status === 'ready') return;
    if (redis.status === 'end') throw new ServerUnavailable(`${this.url}: the client is closed`);
    if (redis.status === 'wait') redis.connect().catch(() => {}); // (failures: 'error' events)
    /** @type {(() => void) | undefined} */
    let cleanup;
    const ready = new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        const cause = this.lastError ? `: ${this.lastError.message}` : ` (no answer within ${this.connectTimeout} ms)`;
        reject(new ServerUnavailable(`${this.url} unreachable${cause}`, { cause: this.lastError }));
      }, this.connectTimeout);
      redis.once('ready', resolve);
      cleanup = () => {
        clearTimeout(timer);
        redis.off('ready', resolve);
      };
    });
    try {
      await ready;
    } finally {
      cleanup?.();
    }
  }

  /**
   * Run a call once connected; a connection that fails during it is ServerUnavailable.
   * @template T
   * @param {(redis: Redis | Cluster) => Promise<T>} fn
   * @returns {Promise<T>}
   */
  async call(fn) {
    await this.connected();
    try {
      return await fn(this.redis);
    } catch (error) {
      if (!isConnectionError(error)) throw error;
      throw new ServerUnavailable(`${this.url}: ${/** @type {Error} */ (error).message}`, { cause: error });
    }
  }

  /**
   * `reply`, or a connection error as soon as the connection closes: ioredis does not send
   * an unanswered command again (autoResendUnfulfilledCommands), nor fails it before its
   * timeout; an enqueue is resent at once instead.
   * @template T
   * @param {Promise<T>} reply
   * @returns {Promise<T>}
   */
  async unlessClosed(reply) {
    const redis = this.redis;
    if (redis instanceof Cluster) return reply;
    reply.catch(() => {}); // (if the close comes first, its rejection is not awaited)
    /** @type {() => void} */
    let onClose = () => {};
    const closed = new Promise((_, reject) => {
      onClose = () => reject(new Error('Connection is closed.'));
      redis.once('close', onClose);
    });
    try {
      return await Promise.race([reply, /** @type {Promise<never>} */ (closed)]);
    } finally {
      redis.off('close', onClose);
    }
  }

  /** A handle on one named queue. @param {string} name */
  queue(name) {
    return new Queue(this, name);
  }

  /** The settled listener, made on first use. */
  listener() {
    if (!this.settled) {
      const subscriber = this.redis instanceof Cluster ? this.redis.duplicate() : this.redis.duplicate({ commandTimeout: undefined });
      subscriber.on('error', () => {});
      this.settled = new SettledListener(subscriber, this.cluster);
    }
    return this.settled;
  }

  /** Close the connections (and end every wait on a result). */
  async close() {
    this.settled?.close();
    if (this.redis.status === 'ready') await this.redis.quit().catch(() => this.redis.disconnect());
    else this.redis.disconnect();
  }
}

export class Queue {
  /** @param {Client} client @param {string} name */
  constructor(client, name) {
    this.client = client;
    this.keys = new QueueKeys(client.prefix, name);
    this.name = name;
  }

  /**
   * Write one job for the task named `task`; resolves once it is in Redis. Bad input (an
   * unknown or out-of-range option, arguments JSON cannot carry exactly, a payload over
   * maxPayloadBytes) throws and writes nothing. An id that has a job writes nothing and
   * returns that job (job.created false).
   * @param {string} task
   * @param {import('./options.js').Arguments} [args] an array, or {args, kwargs}
   * @param {import('./options.js').JobOptions} [options]
   * @returns {Promise<Job>}
   */
  async enqueue(task, args, options) {
    const [job] = await this.write([prepare(task, args, options, this.client.maxPayloadBytes)]);
    return job;
  }

  /**
   * Write jobs in order, in script calls of up to 1,000 pipelined in one round trip. Every
   * call is checked and encoded first: one bad call writes nothing.
   * @param {Call[]} calls
   * @returns {Promise<Job[]>}
   */
  async enqueueMany(calls) {
    const jobs = calls.map(({ task, args = [], kwargs = {}, options }, index) => {
      try {
        return prepare(task, { args, kwargs }, options, this.client.maxPayloadBytes);
      } catch (error) {
        if (error instanceof Error) error.message = `call ${index}: ${error.message}`;
        throw error;
      }
    });
    return jobs.length ? this.write(jobs) : [];
  }

  /** A handle on an existing job of this queue. @param {string} id */
  job(id) {
    return new Job(this, id);
  }

  /** @param {import('./options.js').NewJob[]} jobs @returns {Promise<Job[]>} */
  async write(jobs) {
    const chunks = [];
    for (let start = 0; start < jobs.length; start += MAX_BATCH) chunks.push(jobs.slice(start, start + MAX_BATCH));
    await this.client.connected(); // (else nothing is sent: ServerUnavailable)
    let replies;
    try {
      replies = await this.send(chunks, false);
    } catch (error) {
      if (!isConnectionError(error)) throw error;
      try { // it may have run: again, marked as a resend (no id taken for fresh)
        await this.client.connected();
        replies = await this.send(chunks, true);
      } catch (again) {
        if (isConnectionError(again) || again instanceof ServerUnavailable) {
          throw new EnqueueUnconfirmed(jobs.map((job) => job.id), this.client.url, again);
        }
        throw again;
      }
    }
    return jobs.map((job, i) => new Job(this, job.id, replies[i] === 1));
  }

  /**
   * @param {import('./options.js').NewJob[][]} chunks
   * @param {boolean} resend
   * @returns {Promise<number[]>} created (1 or 0) per job
   */
  async send(chunks, resend) {
    const pipeline = this.client.redis.pipeline();
    for (const chunk of chunks) pipeline.evalsha(ENQUEUE.sha, ...this.enqueueArgs(chunk, resend));
    const results = (await this.client.unlessClosed(pipeline.exec())) ?? [];
    const created = [];
    for (const [index, [error, reply]] of results.entries()) {
      let answer = reply;
      if (error && isNoScript(error)) {
        answer = await this.client.redis.eval(ENQUEUE.source, ...this.enqueueArgs(chunks[index], resend));
      } else if (error) {
        throw error;
      }
      const values = /** @type {unknown[]} */ (answer);
      for (let i = 0; i < values.length; i += 2) created.push(Number(values[i]));
    }
    return created;
  }

  /**
   * KEYS and ARGV of one enqueue.lua call, as its header states them.
   * @param {import('./options.js').NewJob[]} jobs
   * @param {boolean} resend
   * @returns {[number, ...(string | number)[]]}
   */
  enqueueArgs(jobs, resend) {
    const priorities = [...new Set(jobs.map((job) => job.priority))].sort((a, b) => a - b);
    const keys = this.keys.keysFor(ENQUEUE, priorities);
    /** @type {(string | number)[]} */
    const args = [jobs.length, priorities.join(','), this.client.idempotencyTtl, resend ? 1 : 0];
    for (const job of jobs) {
      args.push(job.id, job.payload, job.priority, job.maxAttempts, job.delayMs, job.dueMs, job.fresh ? 1 : 0);
    }
    return [keys.length, ...keys, ...args];
  }

  /**
   * Whether a job with no record completed with no result: its id's fingerprint in a done
   * set of the generations either side of this host's clock (docs/protocol.md, Done sets).
   * @param {string} id
   */
  async isDone(id) {
    const span = this.client.idempotencyTtl;
    if (span <= 0) return false;
    const generation = Math.floor(Date.now() / span);
    const slot = doneSlot(id);
    const member = fingerprint(id);
    const results = await this.client.call(async (redis) => {
      const pipeline = redis.pipeline();
      for (const g of [generation + 1, generation, generation - 1, generation - 2]) {
        pipeline.sismember(this.keys.done(span, g, slot), member);
      }
      return (await pipeline.exec()) ?? [];
    });
    return results.some(([error, found]) => {
      if (error) throw error;
      return found === 1;
    });
  }

  /**
   * Cancel a job (see Job.cancel). @param {string} id @returns {Promise<boolean>}
   */
  async cancel(id) {
    const k = this.keys;
    const script = this.client.cluster ? CANCEL_SHARDED : CANCEL; // (SPUBLISH on a Cluster)
    const keys = k.keysFor(script);
    const args = [id, this.client.resultTtl, k.key('aborts'), k.settled];
    const reply = await this.client.call(async (redis) => {
      try {
        return await redis.evalsha(script.sha, keys.length, ...keys, ...args);
      } catch (error) {
        if (!isNoScript(error)) throw error;
        return redis.eval(script.source, keys.length, ...keys, ...args);
      }
    });
    const [code] = /** @type {[number, string]} */ (reply);
    return code === 1 || code === 2;
  }
}

/** A URL with its password hidden. @param {string} url */
function maskUrl(url) {
  return url.replace(/^([a-z+]+:\/\/[^:@/]*:)[^@/]*@/, '$1***@');
}

/** A failure of the connection, not an answer from Redis. @param {unknown} error */
function isConnectionError(error) {
  if (!(error instanceof Error) || error.name === 'ReplyError') return false;
  return /connection|closed|ECONN|EPIPE|timed out|Stream isn't writeable|reached the max retries/i.test(error.message);
}
