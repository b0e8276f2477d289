// Enqueues a job for the Python worker of the README (tasks.py: the send_welcome task on
// the "emails" queue), waits for its result, and shows a failure and two refusals.
import { Client, JobFailed } from '../src/index.js';

const client = new Client(process.env.REDIS_URL ?? 'redis://localhost:6379/0');
try {
  const emails = client.queue('emails');
  const job = await emails.enqueue(
    'send_welcome',
    { args: ['ada@example.com'], kwargs: { name: 'Ada' } },
    { id: 'welcome-ada-node', delay: 2000 },
  );
  console.log('enqueued', job.id, 'created:', job.created);
  console.log(await job.result({ timeout: 30_000 }));

  const bad = await emails.enqueue('send_welcome', ['bob@invalid'], { maxAttempts: 1 });
  try {
    await bad.result({ timeout: 30_000 });
  } catch (error) {
    if (!(error instanceof JobFailed)) throw error;
    console.log('failed as expected:', error.errorType, '-', error.errorMessage);
  }
  await emails.enqueue('send_welcome', [NaN]).catch((error) => console.log('refused:', `${error}`));
  // @ts-expect-error: a typo in an option is refused (and, with types, flagged)
  await emails.enqueue('send_welcome', ['x'], { priorty: 9 }).catch((error) => console.log('refused:', `${error}`));
} finally {
  await client.close();
}
