// The producer scripts, copied assembled from aioqueue/store/lua by clients/sync_lua.py (a
// test fails when a copy drifts): the very source the Python producer sends, so the same
// SHA1, called by EVALSHA and loaded with EVAL when Redis lacks it.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';

/**
 * One KEYS or ARGV slot of a script's header: a key (or argument), or a group of them
 * (size -1: as many as the call brings).
 * @typedef {{name: string, group: boolean, size: number}} Slot
 * @typedef {{name: string, source: string, sha: string, keys: Slot[], args: Slot[]}} Script
 */

const SLOT = /^(KEYS|ARGV)\[(\d+)(\.\.(\d*))?\]\s+([a-z_]+)\b/gm;

/**
 * A script's KEYS and ARGV, read from its header (as aioqueue/store/layout.py reads them).
 * @param {string} source
 */
export function parseLayout(source) {
  const header = source.split(']]')[0];
  /** @type {{keys: Slot[], args: Slot[]}} */
  const layout = { keys: [], args: [] };
  for (const [, part, first, dots, last, name] of header.matchAll(SLOT)) {
    const size = !dots ? 1 : last ? Number(last) - Number(first) + 1 : -1;
    layout[part === 'KEYS' ? 'keys' : 'args'].push({ name, group: Boolean(dots), size });
  }
  return layout;
}

/** @param {string} name @param {string[]} args the ARGV this client sends, in order */
function load(name, args) {
  const source = readFileSync(new URL(`../lua/${name}.lua`, import.meta.url), 'utf8');
  const layout = parseLayout(source);
  const have = layout.args.map((slot) => slot.name);
  if (have.join(',') !== args.join(',')) {
    throw new Error(`aioqueue: ${name}.lua takes ARGV ${have.join(', ')}; this client sends ${args.join(', ')}`);
  }
  return { name, source, sha: createHash('sha1').update(source, 'utf8').digest('hex'), ...layout };
}

export const ENQUEUE = load('enqueue', ['count', 'priorities', 'span_ms', 'resend', 'jobs']);
const CANCEL_ARGS = ['id', 'result_ttl_ms', 'abort_channel', 'settled_channel'];
export const CANCEL = load('cancel', CANCEL_ARGS);
export const CANCEL_SHARDED = load('cancel.sharded', CANCEL_ARGS);

/** @param {unknown} error */
export function isNoScript(error) {
  return error instanceof Error && error.message.startsWith('NOSCRIPT');
}
