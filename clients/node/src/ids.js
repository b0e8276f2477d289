// Job ids: the shape the Python producer generates, and where a done id is kept.
import { createHash, randomBytes } from 'node:crypto';
import { ConfigError } from './errors.js';

/** Base64 in ASCII order, so generated ids sort by time. */
export const ID_ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~';
const DONE_SLOTS = 4096;
const GENERATED_SINCE = 1397;
const RESERVED = ['poison-', 'periodic:', 'debounce:'];

/** A new id: 20 characters, the Unix millisecond (48 bits) then 72 random bits. */
export function newJobId() {
  const raw = Buffer.alloc(15);
  raw.writeUIntBE(Date.now(), 0, 6);
  randomBytes(9).copy(raw, 6);
  let out = '';
  for (let i = 0; i < 15; i += 3) {
    const n = (raw[i] << 16) | (raw[i + 1] << 8) | raw[i + 2];
    for (let shift = 18; shift >= 0; shift -= 6) out += ID_ALPHABET[(n >> shift) & 63];
  }
  return out;
}

/** @param {unknown} id */
export function checkJobId(id) {
  if (typeof id !== 'string') throw new ConfigError(`id must be a string, not ${typeof id}`);
  if (!id) throw new ConfigError('id must not be empty (leave it out for a generated id)');
  const reserved = RESERVED.find((prefix) => id.startsWith(prefix));
  if (reserved) throw new ConfigError(`id ${JSON.stringify(id)}: ids starting with "${reserved}" are minted by aioqueue`);
}

/** @param {number} byte */
function sextet(byte) {
  const position = ID_ALPHABET.indexOf(String.fromCharCode(byte));
  return position < 0 ? 63 : position;
}

/** The done set a job id goes to (aioqueue/core/ids.py: done_slot). @param {string} id */
export function doneSlot(id) {
  const bytes = Buffer.from(id, 'utf8');
  if (bytes.length === 20 && bytes[0] === 48 && sextet(bytes[1]) * 64 + sextet(bytes[2]) >= GENERATED_SINCE) {
    return sextet(bytes[6]) * 64 + sextet(bytes[7]);
  }
  let slot = 0;
  for (const byte of bytes.subarray(Math.max(0, bytes.length - 6))) slot = (slot * 31 + byte) % DONE_SLOTS;
  return slot;
}

/**
 * What a done set keeps of an id (aioqueue/core/ids.py: fingerprint): the first 8 bytes of
 * its SHA-1, big-endian, less the top bit, in decimal. @param {string} id
 */
export function fingerprint(id) {
  const digest = createHash('sha1').update(id, 'utf8').digest();
  return (digest.readBigUInt64BE(0) & 0x7fffffffffffffffn).toString();
}
