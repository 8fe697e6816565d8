import { createLogger, createRedis, loadConfig } from '@verity/platform';
import { JobName, JobProducer, QueueName, webhookDeliveryJob } from '@verity/queues';
import { TEST_REDIS_URL, clearRedisPrefix, testQueuePrefix } from '../../../test/support/services';
import { WebhooksProcessor } from './reconciler.processors';
import type { DeferredDelivery, WebhooksService } from './webhooks.service';

/** Until `check` holds, looked at every 20 ms; the test's timeout is the only bound (a loaded machine is slow). */
async function until(check: () => Promise<boolean> | boolean): Promise<void> {
  while (!(await check())) await new Promise((resolve) => setTimeout(resolve, 20));
}

/**
 * A WebhooksProcessor on a fresh key prefix of the test Redis, with `deliver` standing in for the delivery service, and
 * a producer beside it; all closed and the keys removed after `work`, pass or fail.
 */
async function withProcessor(
  deliver: (...args: [string, number, number]) => Promise<string | DeferredDelivery>,
  work: (parts: { producer: JobProducer }) => Promise<void>,
): Promise<void> {
  const prefix = testQueuePrefix('webhooks-proc');
  const config = loadConfig({ REDIS_URL: TEST_REDIS_URL, QUEUE_PREFIX: prefix, WORKER_CONCURRENCY: '2' });
  const processor = new WebhooksProcessor(
    { deliver } as unknown as WebhooksService,
    createLogger('webhooks-proc-spec', 'silent'),
    config,
  );
  const redis = createRedis(TEST_REDIS_URL, 'producer', 'webhooks-proc-spec');
  const producer = new JobProducer(redis, prefix);
  try {
    processor.onApplicationBootstrap();
    await work({ producer });
  } finally {
    await processor.beforeApplicationShutdown();
    await producer.close();
    redis.disconnect();
    await clearRedisPrefix(prefix);
  }
}

/** A delivery job of `id`, enqueued: its state, read when asked. */
async function enqueueDelivery(producer: JobProducer, id: string) {
  const job = webhookDeliveryJob(id, 0, { attempts: 3, backoffMs: 60_000 }, 1);
  await producer.enqueue(JobName.DELIVER_WEBHOOK, job.data, job.options);
  const queue = producer.queue(QueueName.WEBHOOKS);
  const current = async () => (await queue.getJob(job.options.jobId!))!;
  return { current, state: async () => (await current()).getState() };
}

describe('WebhooksProcessor: a deferred delivery', () => {
  it('is woken by its wake while it waits for a slot, no attempt spent', async () => {
    const wakes: (() => Promise<unknown>)[] = [];
    const calls: number[] = [];
    const deliver = async (_id: string, _round: number, attemptsMade: number): Promise<string | DeferredDelivery> => {
      calls.push(attemptsMade);
      if (calls.length === 1) {
        return { wakeAt: Date.now() + 60_000, wakeWhenFree: (wake) => wakes.push(wake) };
      }
      return 'delivered';
    };
    await withProcessor(deliver, async ({ producer }) => {
      const { state } = await enqueueDelivery(producer, 'whd_2');
      await until(async () => wakes.length === 1 && (await state()) === 'delayed');
      await wakes[0]();
      await until(() => calls.length === 2);
      expect(calls).toEqual([0, 0]);
    });
  }, 30_000);

  it('is not woken by its old wake once it has been tried again: a retry keeps its backoff', async () => {
    const wakes: (() => Promise<unknown>)[] = [];
    const calls: string[] = [];
    // 1st: its tenant is at its share (deferred). 2nd: the receiver fails (retried with backoff). Then: delivered.
    const deliver = async (): Promise<string | DeferredDelivery> => {
      calls.push(`call ${calls.length + 1}`);
      if (calls.length === 1) {
        return { wakeAt: Date.now() + 60_000, wakeWhenFree: (wake) => wakes.push(wake) };
      }
      if (calls.length === 2) throw new Error('the endpoint answered 503');
      return 'delivered';
    };
    await withProcessor(deliver, async ({ producer }) => {
      const { current, state } = await enqueueDelivery(producer, 'whd_1');
      await until(async () => wakes.length === 1 && (await state()) === 'delayed');
      // Nothing woke it before its wakeAt (its tenant's slots were held that long): its delay ends, as a timer's would.
      await (await current()).promote();
      // Tried again: the receiver failed, and the retry waits for its backoff (60 s).
      await until(async () => calls.length === 2 && (await state()) === 'delayed');
      // A slot of its tenant frees now: the wake registered by the first deferral is still on file, and declines.
      await expect(wakes[0]()).rejects.toThrow('no longer waiting for a delivery slot');
      expect(await state()).toBe('delayed');
      expect(calls).toEqual(['call 1', 'call 2']);
    });
  }, 30_000);
});
