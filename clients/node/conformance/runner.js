// Runs a conformance case (tests/conformance/cases) with the Node client: the case and
// where to run it as JSON on stdin, one JSON line per step on stdout
// (tests/conformance/runners.py describes the exchange).
import { readFileSync } from 'node:fs';
import {
  Client, ConfigError, JobCancelled, JobExpired, JobFailed, JobNotFound, PayloadTooLarge,
  ResultTimeout, SerializationError, encode, parse,
} from '../src/index.js';

/** @typedef {Record<string, any>} Step */

const input = parse(readFileSync(0, 'utf8'));
const client = new Client(input.url, {
  prefix: input.prefix,
  maxPayloadBytes: input.config.max_payload_bytes ?? 1024 * 1024,
});
const queue = client.queue(input.queue);
/** @type {import('../src/index.js').Job[][]} */
const jobs = [];

/** The case's values as a Node program would pass them; markers replaced. @param {any} value @returns {any} */
function native(value) {
  if (Array.isArray(value)) return value.map(native);
  if (value && typeof value === 'object' && typeof value !== 'bigint') {
    const entries = Object.entries(value);
    if (entries.length === 1 && entries[0][0].startsWith('$')) return marker(entries[0][0], entries[0][1]);
    return Object.fromEntries(entries.map(([k, v]) => [k, native(v)]));
  }
  return value;
}

/** @param {string} name @param {any} value */
function marker(name, value) {
  if (name === '$float') return { nan: NaN, inf: Infinity, '-inf': -Infinity }[/** @type {'nan'} */ (value)];
  if (name === '$unserialisable') return new Map([['a', 1]]);
  if (name === '$invalid_text') return 'a lone surrogate: \ud800';
  if (name === '$repeat') return String(value[0]).repeat(Number(value[1]));
  throw new Error(`unknown marker ${name}`);
}

/** Python's option names, in seconds, to Node's, in ms. @param {Record<string, any>} given */
function options(given = {}) {
  /** @type {Record<string, any>} */
  const out = {};
  for (const [name, value] of Object.entries(given)) {
    if (name === 'max_attempts') out.maxAttempts = Number(value);
    else if (name === 'at_from_now') out.at = new Date(Date.now() + Number(value) * 1000);
    else if (['delay', 'timeout', 'expires'].includes(name)) out[name] = Number(value) * 1000;
    else if (name === 'priority') out.priority = Number(value);
    else out[name] = value;
  }
  return out;
}

/** @param {any} ref */
function job(ref) {
  if (typeof ref === 'string') return queue.job(ref);
  if (Array.isArray(ref)) return jobs[Number(ref[0])][Number(ref[1])];
  return jobs[Number(ref)][0];
}

/** @param {unknown} error */
function describe(error) {
  const message = error instanceof Error ? error.message : String(error);
  if (error instanceof JobFailed) return { error: 'failed', type: error.errorType, message: error.errorMessage };
  /** @type {[Function, string][]} */
  const kinds = [[SerializationError, 'serialization'], [PayloadTooLarge, 'payload_too_large'],
    [ConfigError, 'invalid_option'], [JobNotFound, 'not_found'], [JobCancelled, 'cancelled'],
    [JobExpired, 'expired'], [ResultTimeout, 'timeout']];
  const kind = kinds.find(([type]) => error instanceof type);
  return { error: kind ? kind[1] : 'other', message };
}

/** @param {Step} step @param {import('../src/index.js').Job[]} made */
async function run(step, made) {
  switch (step.do) {
    case 'enqueue': {
      const args = { args: native(step.args ?? []), kwargs: native(step.kwargs ?? {}) };
      const one = await queue.enqueue(step.task, args, options(step.options));
      made.push(one);
      return { id: one.id, created: one.created };
    }
    case 'enqueue_many': {
      const calls = step.calls.map((/** @type {Step} */ call) => ({
        task: call.task, args: native(call.args ?? []), kwargs: native(call.kwargs ?? {}), options: options(call.options),
      }));
      made.push(...(await queue.enqueueMany(calls)));
      return { jobs: made.map((one) => ({ id: one.id, created: one.created })) };
    }
    case 'status':
      return { status: await job(step.job).status() };
    case 'result':
      return { value: await job(step.job).result({ timeout: 30_000 }) };
    case 'cancel':
      return { cancelled: await job(step.job).cancel() };
    case 'wait_running':
      for (;;) {
        const status = await job(step.job).status();
        if (status === 'active') return { status };
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    case 'bench':
      return bench(Number(step.count));
  }
  throw new Error(`unknown step ${step.do}`);
}

/** No-op jobs one at a time, then in bulk. @param {number} count */
async function bench(count) {
  let start = performance.now();
  for (let i = 0; i < count; i++) await queue.enqueue('noop', [i]);
  const single = (performance.now() - start) / 1000;
  const calls = Array.from({ length: count }, (_, i) => ({ task: 'noop', args: [i] }));
  start = performance.now();
  await queue.enqueueMany(calls);
  const bulk = (performance.now() - start) / 1000;
  return { single_per_s: count / single, bulk_per_s: count / bulk };
}

try {
  for (const step of input.steps) {
    const before = Date.now();
    /** @type {import('../src/index.js').Job[]} */
    const made = [];
    /** @type {Record<string, unknown>} */
    let outcome;
    try {
      outcome = await run(step, made);
      if (String(step.do).startsWith('enqueue')) outcome.before_ms = before;
    } catch (error) {
      outcome = describe(error);
    }
    jobs.push(made);
    process.stdout.write(`${encode(outcome)}\n`);
  }
} finally {
  await client.close();
}
