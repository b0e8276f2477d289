// Unit tests that need no Redis: JSON exactness, ids, options, settled messages.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError, PayloadTooLarge, SerializationError, encode, parse } from '../src/index.js';
import { ID_ALPHABET, doneSlot, fingerprint, newJobId } from '../src/ids.js';
import { prepare } from '../src/options.js';
import { parseIds } from '../src/settled.js';

test('encode writes what Python reads back exactly', () => {
  assert.equal(encode({ a: [1, 2.5, 'é', null, true, 2n ** 64n - 1n, 1e21, 2 ** 53] }),
    '{"a":[1,2.5,"é",null,true,18446744073709551615,1e+21,9.007199254740992e+15]}');
  assert.equal(encode(new Date(0)), '"1970-01-01T00:00:00.000Z"');
  assert.equal(encode(Object.create(null)), '{}');
});

test('encode refuses what JSON.stringify would change silently', () => {
  const cyclic = /** @type {any[]} */ ([]);
  cyclic.push(cyclic);
  for (const value of [NaN, Infinity, [undefined], { f() {} }, new Map(), new Set([1]), Symbol('s'),
    '\ud800', { '\udc00': 1 }, 2n ** 64n, -(2n ** 63n) - 1n, cyclic, new Uint8Array(2), new (class Point {})()]) {
    assert.throws(() => encode(value), TypeError, String(value));
  }
});

test('parse keeps integers past 2**53 exact, as BigInt', () => {
  assert.deepEqual(parse('{"a":[9007199254740993,-9223372036854775808,1.5,1e300,"12345678901234567890"]}'),
    { a: [9007199254740993n, -9223372036854775808n, 1.5, 1e300, '12345678901234567890'] });
  assert.deepEqual(parse('[1234567890123456, {"__proto__": 1}]'), [1234567890123456, JSON.parse('{"__proto__": 1}')]);
  assert.throws(() => parse('[12345678901234567890,'), SyntaxError);
});

test('generated ids have the Python shape and sort by time', () => {
  const before = Date.now();
  const id = newJobId();
  assert.match(id, /^[0-9A-Z_a-z~]{20}$/);
  let ms = 0;
  for (const c of id.slice(0, 8)) ms = ms * 64 + ID_ALPHABET.indexOf(c);
  assert.ok(ms >= before && ms <= Date.now());
});

test('done slots match Python', () => { // values from aioqueue.core.ids.done_slot
  const expected = { '0Pz3Nq7Yb2c_x~AaBbCc': 482, 'order-42': 1466, x: 120, '00000000000000000042': 638 };
  for (const [id, slot] of Object.entries(expected)) assert.equal(doneSlot(id), slot, id);
});

test('fingerprints match Python (aioqueue.core.ids.fingerprint)', () => {
  const expected = {
    '0Pz3Nq7Yb2c_x~AaBbCc': '603962094169323981', 'order-42': '4896312827597028906',
    x: '1294412771620432260', 'été-2026': '6761565986704597491',
  };
  for (const [id, want] of Object.entries(expected)) assert.equal(fingerprint(id), want, id);
});

test('options are checked before anything is written', () => {
  const bad = [{ priority: 10 }, { priority: 'urgent' }, { delay: -1 }, { timeout: 0 }, { maxAttempts: 0 },
    { expires: NaN }, { id: '' }, { id: 'debounce:x' }, { at: new Date(NaN) }, { delai: 5 }, { headers: { a: 1 } }];
  for (const options of bad) {
    assert.throws(() => prepare('t', [], /** @type {any} */ (options), 1000), ConfigError, JSON.stringify(options));
  }
  assert.throws(() => prepare('t', [NaN], {}, 1000), SerializationError);
  assert.throws(() => prepare('t', ['x'.repeat(2000)], {}, 1000), PayloadTooLarge);
  const job = prepare('t', { args: [1], kwargs: { k: 'v' } }, { priority: 'high', timeout: 1500, expires: 2000 }, 1000);
  assert.equal(job.payload, '{"t":"t","a":[1],"k":{"k":"v"},"to":1.5,"xp":2000}');
  assert.equal(job.priority, 9);
  assert.equal(prepare('t', undefined, undefined, 1000).payload, '{"t":"t"}');
});

test('settled messages parse as netstrings', () => {
  assert.deepEqual(parseIds(Buffer.from('3:abc5:a:b:c0:')), ['abc', 'a:b:c', '']);
  assert.deepEqual(parseIds(Buffer.from('4:\u00e9\u00e9')), ['éé']);
  for (const bad of ['3:ab', 'x:abc', '3abc']) assert.equal(parseIds(Buffer.from(bad)), null);
});
