// aioqueue for Node: enqueue jobs for aioqueue's Python workers (docs/protocol.md).
//
//   import { Client } from 'aioqueue';
//   const client = new Client('redis://localhost:6379/0');
//   const job = await client.queue('emails').enqueue('send_welcome', ['ada@example.com'], { delay: 60_000 });
//   const sent = await job.result({ timeout: 120_000 });
export { Client, Queue } from './client.js';
export { Job, isFinished } from './job.js';
export { PRIORITIES } from './options.js';
export { encode, parse } from './json.js';
export * from './errors.js';
