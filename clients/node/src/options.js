// Per-call options, checked before anything is written, and the payload they shape.
import { ConfigError, PayloadTooLarge, SerializationError } from './errors.js';
import { JSONValueError, encode } from './json.js';
import { checkJobId, newJobId } from './ids.js';
import { PRIORITY_LEVELS } from './keys.js';

/** @typedef {'low' | 'normal' | 'high'} PriorityName */

/**
 * Per-call options; times in milliseconds, as Node counts them.
 * @typedef {object} JobOptions
 * @property {string} [id] the job's id: an idempotency key (a second enqueue with it writes nothing)
 * @property {number | PriorityName} [priority] 0..9, a higher number first; default 5 ('normal')
 * @property {number} [delay] due this many ms from now (by the Redis clock)
 * @property {Date} [at] due at this time (with delay too: the later of the two)
 * @property {number} [timeout] ms the handler may run (overrides the task's)
 * @property {number} [maxAttempts] attempts the job gets; default the task's
 * @property {number} [expires] a job not started this many ms after it was due expires, never run
 * @property {Record<string, string>} [headers] e.g. W3C trace context; the handler reads JobContext.headers
 */

/**
 * A job's arguments: an array (positional), or positional and keyword arguments.
 * @typedef {unknown[] | {args?: unknown[], kwargs?: Record<string, unknown>}} Arguments
 */

export const PRIORITIES = Object.freeze({ low: 0, normal: 5, high: 9 });
const KNOWN = new Set(['id', 'priority', 'delay', 'at', 'timeout', 'maxAttempts', 'expires', 'headers']);

/**
 * One job as enqueue.lua takes it.
 * @typedef {{id: string, payload: string, priority: number, maxAttempts: number, delayMs: number, dueMs: number, fresh: boolean}} NewJob
 */

/**
 * Check and encode one call; throws (writing nothing) on bad input.
 * @param {string} task
 * @param {Arguments | undefined} args
 * @param {JobOptions | undefined} options
 * @param {number} maxPayloadBytes
 * @returns {NewJob}
 */
export function prepare(task, args, options = {}, maxPayloadBytes) {
  if (typeof task !== 'string' || !task) throw new ConfigError('a task name is needed');
  if (options === null || typeof options !== 'object') throw new ConfigError('options must be an object');
  for (const name of Object.keys(options)) {
    if (!KNOWN.has(name)) throw new ConfigError(`unknown option ${JSON.stringify(name)} (options: ${[...KNOWN].join(', ')})`);
  }
  const body = /** @type {Record<string, unknown>} */ ({ t: task });
  const [positional, keywords] = split(args);
  if (positional.length) body.a = positional;
  if (Object.keys(keywords).length) body.k = keywords;
  if (options.timeout !== undefined) body.to = positive('timeout', options.timeout) / 1000;
  if (options.headers !== undefined) body.h = headers(options.headers);
  if (options.expires !== undefined) body.xp = Math.max(1, Math.round(positive('expires', options.expires)));
  let payload;
  try {
    payload = encode(body);
  } catch (error) {
    if (!(error instanceof JSONValueError)) throw error;
    const where = error.message.replace(/^\$\.a/, 'args').replace(/^\$\.k\./, 'kwargs.');
    throw new SerializationError(`arguments of task ${JSON.stringify(task)} cannot travel as JSON: ${where}`);
  }
  const size = Buffer.byteLength(payload, 'utf8');
  if (size > maxPayloadBytes) throw new PayloadTooLarge(size, maxPayloadBytes);
  if (options.id !== undefined) checkJobId(options.id);
  return {
    id: options.id ?? newJobId(),
    payload,
    priority: priority(options.priority),
    maxAttempts: attempts(options.maxAttempts),
    delayMs: delay(options.delay),
    dueMs: at(options.at),
    fresh: options.id === undefined,
  };
}

/** @param {Arguments | undefined} args @returns {[unknown[], Record<string, unknown>]} */
function split(args) {
  if (args === undefined) return [[], {}];
  if (Array.isArray(args)) return [args, {}];
  if (args === null || typeof args !== 'object') throw new ConfigError('arguments must be an array or {args, kwargs}');
  for (const name of Object.keys(args)) {
    if (name !== 'args' && name !== 'kwargs') throw new ConfigError(`arguments take args and kwargs, not ${JSON.stringify(name)}`);
  }
  const { args: positional = [], kwargs = {} } = args;
  if (!Array.isArray(positional)) throw new ConfigError('args must be an array');
  if (kwargs === null || typeof kwargs !== 'object' || Array.isArray(kwargs)) throw new ConfigError('kwargs must be an object');
  return [positional, kwargs];
}

/** @param {string} name @param {unknown} value */
function positive(name, value) {
  if (typeof value !== 'number' || !(value > 0) || !Number.isFinite(value)) {
    throw new ConfigError(`${name} must be a positive number of milliseconds, not ${String(value)}`);
  }
  return value;
}

/** @param {unknown} value */
function headers(value) {
  if (value === null || typeof value !== 'object' || Object.values(value).some((v) => typeof v !== 'string')) {
    throw new ConfigError('headers must be an object of strings');
  }
  return value;
}

/** @param {unknown} value */
function priority(value) {
  if (value === undefined) return PRIORITIES.normal;
  if (typeof value === 'string' && Object.hasOwn(PRIORITIES, value)) return PRIORITIES[/** @type {PriorityName} */ (value)];
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value >= PRIORITY_LEVELS) {
    throw new ConfigError(`priority must be 0..9 or low, normal, high, not ${String(value)}`);
  }
  return value;
}

/** @param {unknown} value */
function attempts(value) {
  if (value === undefined) return 0; // the task's own, as the worker knows it
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1) {
    throw new ConfigError(`maxAttempts must be an integer of at least 1, not ${String(value)}`);
  }
  return value;
}

/** @param {unknown} value */
function delay(value) {
  if (value === undefined) return 0;
  if (typeof value !== 'number' || !(value >= 0) || !Number.isFinite(value)) {
    throw new ConfigError(`delay must be a number of milliseconds >= 0, not ${String(value)}`);
  }
  return Math.trunc(value);
}

/** @param {unknown} value */
function at(value) {
  if (value === undefined) return 0;
  if (!(value instanceof Date) || Number.isNaN(value.getTime())) throw new ConfigError('at must be a valid Date');
  return value.getTime();
}
