import { createRedis } from '@verity/platform';
import { TEST_REDIS_URL, clearRedisPrefix, testQueuePrefix } from '../../../test/support/services';
import { JobName, QueueName } from './names';
import { JobProducer } from './producer';

describe('JobProducer.tryEnqueue when Redis goes away', () => {
  it('answers false, counts the failure and tells the hook which job was not enqueued', async () => {
    const prefix = testQueuePrefix('producer');
    const redis = createRedis(TEST_REDIS_URL, 'producer', 'producer-spec');
    const heard: { job: JobName; failures: number }[] = [];
    const producer = new JobProducer(redis, prefix, (job, _error, failures) => heard.push({ job, failures }));
    try {
      expect(await producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: 'exe_1' })).toBe(true);
      expect(producer.enqueueFailures).toBe(0);
      // The connection is gone (and, as a producer's, has no offline queue): every enqueue fails at once.
      redis.disconnect();
      expect(await producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: 'exe_2' })).toBe(false);
      expect(await producer.tryEnqueue(JobName.VERIFY_OPERATION, { operationId: 'op_1' })).toBe(false);
      expect(producer.enqueueFailures).toBe(2);
      expect(heard).toEqual([
        { job: JobName.ADVANCE_EXECUTION, failures: 1 },
        { job: JobName.VERIFY_OPERATION, failures: 2 },
      ]);
      // enqueue (for callers that must know) still throws.
      await expect(producer.enqueue(JobName.ADVANCE_EXECUTION, { executionId: 'exe_3' })).rejects.toThrow();
    } finally {
      await producer.close();
      redis.disconnect();
      await clearRedisPrefix(prefix);
    }
  }, 15_000);
});

describe('JobProducer after a queue was first used while Redis was going away', () => {
  it('builds the queue again once the connection is back, instead of failing every enqueue for good', async () => {
    const prefix = testQueuePrefix('producer-rebuild');
    const redis = createRedis(TEST_REDIS_URL, 'producer', 'producer-spec-rebuild');
    const producer = new JobProducer(redis, prefix);
    try {
      await waitUntilReady(redis);
      // The dispatch queue is first touched in the same tick as the connection drops (and reconnects by itself):
      // BullMQ's one-time connection check, sent a moment later, fails.
      const reconnected = new Promise<void>((resolve) => redis.once('close', () => redis.once('ready', resolve)));
      const first = producer.enqueue(JobName.DISPATCH_OPERATION, { operationId: 'op_down' });
      redis.disconnect(true);
      await expect(first).rejects.toThrow("Stream isn't writeable");
      await reconnected;
      // The same producer, the same (reconnected) connection: the enqueue goes through and the job is in Redis.
      await producer.enqueue(JobName.DISPATCH_OPERATION, { operationId: 'op_up' }, { jobId: 'op_up.dispatch' });
      const job = await producer.queue(QueueName.DISPATCH).getJob('op_up.dispatch');
      expect(job?.data).toEqual({ operationId: 'op_up' });
    } finally {
      await producer.close();
      redis.disconnect();
      await clearRedisPrefix(prefix);
    }
  }, 15_000);
});

function waitUntilReady(redis: ReturnType<typeof createRedis>): Promise<void> {
  return redis.status === 'ready' ? Promise.resolve() : new Promise((resolve) => redis.once('ready', () => resolve()));
}
