// Hearing that jobs finished, so job.result() returns at once without polling. The
// scripts that finish jobs announce their ids on the queue's settled channel, one message
// per call: netstrings "<length>:<id>" back to back (lengths in bytes). One subscribed
// connection per Client, shared by every waiter; a waiter then reads the record itself.
// Pub/sub is at most once: when the connection comes back every waiter is woken to look
// again, a silent connection is found by PING, and waiters look every pollInterval anyway.

const CONFIRM_WITHIN = 2000; // ms a waiter waits for its subscription to be confirmed
const PING_EVERY = 1000;
const SILENCE_LIMIT = 3000;

/** @param {Buffer} message @returns {string[] | null} */
export function parseIds(message) {
  const ids = [];
  let at = 0;
  while (at < message.length) {
    const colon = message.indexOf(0x3a, at);
    const digits = message.subarray(at, colon).toString('latin1');
    const end = colon + 1 + Number(digits);
    if (colon < 0 || !/^\d+$/.test(digits) || end > message.length) return null;
    ids.push(message.subarray(colon + 1, end).toString('utf8'));
    at = end;
  }
  return ids;
}

export class SettledListener {
  /**
   * @param {import('ioredis').Redis | import('ioredis').Cluster} subscriber a connection of
   *   its own (subscribed mode); on a Cluster, sharded subscribers (SSUBSCRIBE)
   * @param {boolean} sharded
   */
  constructor(subscriber, sharded) {
    this.subscriber = subscriber;
    this.sharded = sharded;
    /** @type {Map<string, Set<() => void>>} "<channel> <id>" -> wake-ups */
    this.waiters = new Map();
    /** @type {Map<string, Promise<unknown>>} channel -> its SUBSCRIBE */
    this.channels = new Map();
    this.readyOnce = false;
    subscriber.on(sharded ? 'smessageBuffer' : 'messageBuffer', (/** @type {Buffer} */ channel, /** @type {Buffer} */ message) => {
      const ids = parseIds(message);
      for (const id of ids ?? []) this.wake(`${channel.toString('utf8')} ${id}`);
    });
    subscriber.on(sharded ? 'subscribersReady' : 'ready', () => {
      if (this.readyOnce) this.wakeAll(); // back after a drop: announcements may be lost
      this.readyOnce = true;
    });
    /** @type {NodeJS.Timeout | undefined} */
    this.pinger = undefined;
  }

  /**
   * Register a waiter for `id` on `channel`; resolves once the subscription is confirmed
   * (or CONFIRM_WITHIN has passed: Redis is away, and the waiter's periodic look is all
   * there is), so an announcement made after the caller reads the job's status is not lost.
   * @param {string} channel
   * @param {string} id
   * @param {() => void} wake
   * @returns {Promise<() => void>} a function that removes the waiter
   */
  async wait(channel, id, wake) {
    const key = `${channel} ${id}`;
    let set = this.waiters.get(key);
    if (!set) this.waiters.set(key, (set = new Set()));
    set.add(wake);
    this.startPinging();
    let subscribed = this.channels.get(channel);
    if (!subscribed) {
      const subscribing = this.sharded ? this.subscriber.ssubscribe(channel) : this.subscriber.subscribe(channel);
      subscribed = subscribing.catch((/** @type {unknown} */ error) => {
        this.channels.delete(channel);
        return error;
      });
      this.channels.set(channel, subscribed);
    }
    /** @type {NodeJS.Timeout | undefined} */
    let timer;
    await Promise.race([subscribed, new Promise((resolve) => (timer = setTimeout(resolve, CONFIRM_WITHIN)))]);
    clearTimeout(timer);
    return () => {
      set.delete(wake);
      if (set.size === 0) this.waiters.delete(key);
      if (this.waiters.size === 0) this.stopPinging();
    };
  }

  startPinging() {
    if (this.pinger || this.sharded) return; // (a Cluster's sharded subscribers: by its own checks)
    const subscriber = /** @type {import('ioredis').Redis} */ (this.subscriber);
    this.pinger = setInterval(() => {
      if (subscriber.status !== 'ready') return;
      const silent = setTimeout(() => subscriber.disconnect(true), SILENCE_LIMIT);
      subscriber.ping().then(() => clearTimeout(silent), () => {});
    }, PING_EVERY);
    this.pinger.unref();
  }

  stopPinging() {
    clearInterval(this.pinger);
    this.pinger = undefined;
  }

  /** @param {string} key */
  wake(key) {
    for (const wake of this.waiters.get(key) ?? []) wake();
  }

  wakeAll() {
    for (const set of this.waiters.values()) for (const wake of set) wake();
  }

  close() {
    this.stopPinging();
    this.wakeAll();
    this.subscriber.disconnect();
  }
}
