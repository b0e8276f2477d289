// JSON that travels exactly between Node and Python.
//
// encode() writes what JSON.stringify would, but refuses what JSON.stringify changes
// silently (NaN and infinities become null, undefined and functions vanish, a Map becomes
// {}), text that is not Unicode (lone surrogates) and integers beyond 64 bits; it writes a
// BigInt as its digits (an exact integer for Python) and an integral Number of 2**53 or
// more in exponent form (a float for Python, as the double it is). parse() reads integers
// beyond Number.MAX_SAFE_INTEGER as BigInt, the others as Number.

const MIN_INT = -(2n ** 63n);
const MAX_INT = 2n ** 64n - 1n;
const UNSAFE = 2 ** 53;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

export class JSONValueError extends TypeError {}

/**
 * @param {unknown} value
 * @returns {string}
 */
export function encode(value) {
  return write(value, '$', new Set());
}

/**
 * @param {unknown} value
 * @param {string} path
 * @param {Set<object>} parents
 * @returns {string}
 */
function write(value, path, parents) {
  switch (typeof value) {
    case 'string':
      if (LONE_SURROGATE.test(value)) throw new JSONValueError(`${path} is not Unicode text (a lone surrogate)`);
      return JSON.stringify(value);
    case 'number':
      if (!Number.isFinite(value)) throw new JSONValueError(`${path} is ${value}, which JSON cannot hold`);
      if (Number.isInteger(value) && Math.abs(value) >= UNSAFE) return value.toExponential();
      return JSON.stringify(value);
    case 'bigint':
      if (value < MIN_INT || value > MAX_INT) throw new JSONValueError(`${path} is an integer beyond 64 bits`);
      return value.toString();
    case 'boolean':
      return value ? 'true' : 'false';
    case 'object':
      if (value === null) return 'null';
      return writeObject(value, path, parents);
  }
  throw new JSONValueError(`${path} is ${typeof value === 'undefined' ? 'undefined' : `a ${typeof value}`}, which JSON cannot hold`);
}

/**
 * @param {object} value
 * @param {string} path
 * @param {Set<object>} parents
 */
function writeObject(value, path, parents) {
  if (parents.has(value)) throw new JSONValueError(`${path} refers to itself`);
  const toJSON = /** @type {{toJSON?: unknown}} */ (value).toJSON;
  if (typeof toJSON === 'function') return write(toJSON.call(value), path, parents);
  parents.add(value);
  try {
    if (Array.isArray(value)) {
      const items = [];
      for (let i = 0; i < value.length; i++) items.push(write(value[i], `${path}[${i}]`, parents));
      return `[${items.join(',')}]`;
    }
    const proto = Object.getPrototypeOf(value);
    if (proto !== Object.prototype && proto !== null) {
      const kind = proto?.constructor?.name ?? 'object';
      throw new JSONValueError(`${path} is a ${kind}, which JSON cannot hold (use a plain object or an array)`);
    }
    const fields = [];
    for (const [key, item] of Object.entries(value)) {
      if (LONE_SURROGATE.test(key)) throw new JSONValueError(`${path} has a key that is not Unicode text`);
      fields.push(`${JSON.stringify(key)}:${write(item, `${path}.${key}`, parents)}`);
    }
    return `{${fields.join(',')}}`;
  } finally {
    parents.delete(value);
  }
}

/**
 * Parse JSON, reading integers beyond Number.MAX_SAFE_INTEGER as BigInt.
 * @param {string} text
 * @returns {any}
 */
export function parse(text) {
  if (!/\d{16,}/.test(text)) return JSON.parse(text); // every integer in it is safe
  const reader = new Reader(text);
  const value = reader.value();
  reader.space();
  if (reader.at < text.length) throw new SyntaxError(`unexpected text at ${reader.at} in JSON`);
  return value;
}

const NUMBER = /-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/y;
const STRING = /"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/y;
const WORDS = /** @type {const} */ ([['true', true], ['false', false], ['null', null]]);

class Reader {
  /** @param {string} text */
  constructor(text) {
    this.text = text;
    this.at = 0;
  }

  space() {
    while (' \t\n\r'.includes(this.text[this.at] ?? '.')) this.at++;
  }

  /** @param {RegExp} pattern */
  match(pattern) {
    pattern.lastIndex = this.at;
    const found = pattern.exec(this.text);
    if (!found) throw new SyntaxError(`unexpected text at ${this.at} in JSON`);
    this.at = pattern.lastIndex;
    return found;
  }

  /** @returns {any} */
  value() {
    this.space();
    const c = this.text[this.at];
    if (c === '{') return this.object();
    if (c === '[') return this.array();
    if (c === '"') return JSON.parse(this.match(STRING)[0]);
    for (const [word, value] of WORDS) {
      if (this.text.startsWith(word, this.at)) {
        this.at += word.length;
        return value;
      }
    }
    const [literal, fraction, exponent] = this.match(NUMBER);
    const number = Number(literal);
    return fraction || exponent || Number.isSafeInteger(number) ? number : BigInt(literal);
  }

  /** @param {string} c */
  expect(c) {
    this.space();
    if (this.text[this.at] !== c) throw new SyntaxError(`expected ${c} at ${this.at} in JSON`);
    this.at++;
  }

  array() {
    /** @type {any[]} */
    const out = [];
    this.expect('[');
    this.space();
    if (this.text[this.at] === ']') {
      this.at++;
      return out;
    }
    do out.push(this.value());
    while (this.next(']'));
    return out;
  }

  object() {
    /** @type {Record<string, any>} */
    const out = {};
    this.expect('{');
    this.space();
    if (this.text[this.at] === '}') {
      this.at++;
      return out;
    }
    do {
      this.space();
      const key = JSON.parse(this.match(STRING)[0]);
      this.expect(':');
      Object.defineProperty(out, key, { value: this.value(), enumerable: true, writable: true, configurable: true });
    } while (this.next('}'));
    return out;
  }

  /** A comma: true (more follow); the closing character: false. @param {string} close */
  next(close) {
    this.space();
    const c = this.text[this.at++];
    if (c === ',') return true;
    if (c === close) return false;
    throw new SyntaxError(`expected , or ${close} at ${this.at - 1} in JSON`);
  }
}
