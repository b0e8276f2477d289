// The producer scripts, copied assembled from aioqueue/store/lua by clients/sync_lua.py (a
// test fails when a copy drifts): the very source the Python producer sends, so the same
// SHA1, called by EVALSHA and loaded with EVAL when Redis lacks it.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';

/** @param {string} name */
function load(name) {
  const source = readFileSync(new URL(`../lua/${name}.lua`, import.meta.url), 'utf8');
  return { name, source, sha: createHash('sha1').update(source, 'utf8').digest('hex') };
}

/** @typedef {{name: string, source: string, sha: string}} Script */

export const ENQUEUE = load('enqueue');
export const CANCEL = load('cancel');
export const CANCEL_SHARDED = load('cancel.sharded');

/** @param {unknown} error */
export function isNoScript(error) {
  return error instanceof Error && error.message.startsWith('NOSCRIPT');
}
