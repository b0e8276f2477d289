// A queue's keys: "<prefix>:{<queue>}:<role>" (docs/protocol.md, Keys). The braces are a
// Redis Cluster hash tag: every key of a queue is in one slot.
import { ConfigError } from './errors.js';

export const PRIORITY_LEVELS = 10;

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
    return `${this.base}:done:${spanMs}:${generation}:${slot}`;
  }

  /** The keys of include/links.lua, in the order scripts declare them. */
  links() {
    return ['groups', 'group:', 'inputs:', 'handoff', 'waiting'].map((role) => this.key(role));
  }
}
