import { createLogger, createRedis, loadConfig } from '@verity/platform';
import { JobName, JobProducer, QueueName, webhookDeliveryJob } from '@verity/queues';
import { TEST_REDIS_URL, clearRedisPrefix, testQueuePrefix } from '../../../test/support/services';
import { WebhooksProcessor } from './reconciler.processors';
import type { DeferredDelivery, WebhooksService } from './webhooks.service';

async function until(check: () => Promise<boolean> | boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('WebhooksProcessor: a deferred delivery', () => {
  it('is woken by its wake while it waits for a slot, no attempt spent', async () => {
    const prefix = testQueuePrefix('webhooks-proc');
    const config = loadConfig({ REDIS_URL: TEST_REDIS_URL, QUEUE_PREFIX: prefix, WORKER_CONCURRENCY: '2' });
    const wakes: (() => Promise<unknown>)[] = [];
    const calls: number[] = [];
    const webhooks = {
      deliver: async (_id: string, _round: number, attemptsMade: number): Promise<string | DeferredDelivery> => {
        calls.push(attemptsMade);
        if (calls.length === 1) {
          return { wakeAt: Date.now() + 60_000, wakeWhenFree: (wake) => wakes.push(wake) };
        }
        return 'delivered';
      },
    } as unknown as WebhooksService;
    const processor = new WebhooksProcessor(webhooks, createLogger('webhooks-proc-spec', 'silent'), config);
    const redis = createRedis(TEST_REDIS_URL, 'producer', 'webhooks-proc-spec');
    const producer = new JobProducer(redis, prefix);
    try {
      processor.onApplicationBootstrap();
      const job = webhookDeliveryJob('whd_2', 0, { attempts: 3, backoffMs: 60_000 }, 1);
      await producer.enqueue(JobName.DELIVER_WEBHOOK, job.data, job.options);
      const queue = producer.queue(QueueName.WEBHOOKS);
      await until(
        async () =>
          wakes.length === 1 && (await queue.getJob(job.options.jobId!)?.then((j) => j?.getState())) === 'delayed',
      );
      await wakes[0]();
      await until(() => calls.length === 2);
      expect(calls).toEqual([0, 0]);
    } finally {
      await processor.beforeApplicationShutdown();
      await producer.close();
      redis.disconnect();
      await clearRedisPrefix(prefix);
    }
  }, 30_000);

  it('is not woken by its old wake once it has been tried again: a retry keeps its backoff', async () => {
    const prefix = testQueuePrefix('webhooks-proc');
    const config = loadConfig({ REDIS_URL: TEST_REDIS_URL, QUEUE_PREFIX: prefix, WORKER_CONCURRENCY: '2' });
    const wakes: (() => Promise<unknown>)[] = [];
    const calls: string[] = [];
    // 1st: its tenant is at its share (deferred). 2nd: the receiver fails (retried with backoff). Then: delivered.
    const webhooks = {
      deliver: async (): Promise<string | DeferredDelivery> => {
        calls.push(`call ${calls.length + 1}`);
        if (calls.length === 1) {
          return { wakeAt: Date.now() + 60_000, wakeWhenFree: (wake) => wakes.push(wake) };
        }
        if (calls.length === 2) throw new Error('the endpoint answered 503');
        return 'delivered';
      },
    } as unknown as WebhooksService;
    const processor = new WebhooksProcessor(webhooks, createLogger('webhooks-proc-spec', 'silent'), config);
    const redis = createRedis(TEST_REDIS_URL, 'producer', 'webhooks-proc-spec');
    const producer = new JobProducer(redis, prefix);
    try {
      processor.onApplicationBootstrap();
      const job = webhookDeliveryJob('whd_1', 0, { attempts: 3, backoffMs: 60_000 }, 1);
      await producer.enqueue(JobName.DELIVER_WEBHOOK, job.data, job.options);
      const queue = producer.queue(QueueName.WEBHOOKS);
      const state = async () => (await queue.getJob(job.options.jobId!))?.getState();
      await until(async () => wakes.length === 1 && (await state()) === 'delayed');
      // Nothing woke it before its wakeAt (its tenant's slots were held that long): its delay ends, as a timer's would.
      await (await queue.getJob(job.options.jobId!))!.promote();
      // Tried again: the receiver failed, and the retry waits for its backoff (60 s).
      await until(async () => calls.length === 2 && (await state()) === 'delayed');
      // A slot of its tenant frees now: the wake registered by the first deferral is still on file.
      await wakes[0]().catch(() => undefined);
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(calls).toEqual(['call 1', 'call 2']);
      expect(await state()).toBe('delayed');
    } finally {
      await processor.beforeApplicationShutdown();
      await producer.close();
      redis.disconnect();
      await clearRedisPrefix(prefix);
    }
  }, 30_000);
});
