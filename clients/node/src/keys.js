// A queue's keys: "<prefix>:{<queue>}:<role>" (docs/protocol.md, Keys). The braces are a
// Redis Cluster hash tag: every key of a queue is in one slot.
import { ConfigError } from './errors.js';

export const PRIORITY_LEVELS = 10;

/** A KEYS name -> its role after "<prefix>:{<queue>}:" (core/keys.py's names; any other name is its own role). */
const ROLES = /** @type {Record<string, string>} */ ({
  job_prefix: 'job:', done_prefix: 'donefp:', ready_prefix: 'ready:', direct_prefix: 'direct:',
  taken_prefix: 'take:', schedule_wake: 'schedule:wake', ticks: 'periodic:ticks',
});

export class QueueKeys {
  /** @param {string} prefix @param {string} queue */
  constructor(prefix, queue) {
    if (typeof queue !== 'string' || !queue || queue.length > 200 || /[{}:\s]/.test(queue)) {
      throw new ConfigError(`invalid queue name ${JSON.stringify(queue)}: use 1-200 characters without braces, colons or spaces`);
    }
    if (typeof prefix !== 'string' || !prefix || /[{}\s]/.test(prefix)) {
      throw new ConfigError(`invalid key prefix ${JSON.stringify(prefix)}`);
    }
    this.name = queue;
    this.base = `${prefix}:{${queue}}`;
  }

  /** @param {string} role */
  key(role) {
    return `${this.base}:${role}`;
  }

  /** @param {string} id */
  job(id) {
    return `${this.base}:job:${id}`;
  }

  /** @param {number} priority */
  ready(priority) {
    return `${this.base}:ready:${priority}`;
  }

  get settled() {
    return this.key('settled');
  }

  /** @param {number} spanMs @param {number} generation @param {number} slot */
  done(spanMs, generation, slot) {
    return `${this.base}:donefp:${spanMs}:${generation}:${slot}`;
  }

  /**
   * The KEYS of one call of a script, from its header: `ready` fills an open group of
   * ready lists (a key renamed, added or moved in the header is followed).
   * @param {import('./scripts.js').Script} script
   * @param {number[]} [ready]
   */
  keysFor(script, ready = []) {
    return script.keys.flatMap((slot) => {
      if (!slot.group) return [this.key(ROLES[slot.name] ?? slot.name)];
      if (slot.name === 'links') return this.links();
      if (slot.name === 'ready') {
        const levels = slot.size < 0 ? ready : Array.from({ length: slot.size }, (_, p) => p);
        return levels.map((p) => this.ready(p));
      }
      throw new Error(`aioqueue: ${script.name}.lua declares KEYS group ${slot.name}, which this client does not know`);
    });
  }

  /** The keys of include/links.lua, in the order scripts declare them. */
  links() {
    return ['groups', 'group:', 'inputs:', 'handoff', 'waiting'].map((role) => this.key(role));
  }
}
