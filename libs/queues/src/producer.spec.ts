import { Job, UnrecoverableError, Worker } from 'bullmq';
import { createRedis } from '@verity/platform';
import { patientCommands, withProducer, withProducerOnLink } from '../../../test/support/producer';
import { TEST_REDIS_URL } from '../../../test/support/services';
import { JobName, QueueName } from './names';
import { JobProducer } from './producer';
import { refreshQueueDepth } from './worker-ops';

describe('JobProducer.tryEnqueue when Redis goes away', () => {
  it('answers false, counts the failure and tells the hook which job was not enqueued', async () => {
    const heard: { job: JobName; failures: number }[] = [];
    await withProducer(
      'producer',
      async ({ producer, redis }) => {
        expect(await producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: 'exe_1' })).toBe(true);
        expect(producer.enqueueFailures).toBe(0);
        // The connection is gone (and, as a producer's, has no offline queue): every enqueue fails at once.
        redis.disconnect();
        expect(await producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: 'exe_2' })).toBe(false);
        expect(await producer.tryEnqueue(JobName.VERIFY_OPERATION, { operationId: 'op_1', executionId: 'exe_1' })).toBe(
          false,
        );
        // The re-arming form too (a reviewer's release): false, counted, heard.
        expect(
          await producer.tryEnqueueOrRearm(
            JobName.DISPATCH_OPERATION,
            { operationId: 'op_2', executionId: 'exe_1' },
            'op_2.dispatch.release',
          ),
        ).toBe(false);
        expect(producer.enqueueFailures).toBe(3);
        expect(heard).toEqual([
          { job: JobName.ADVANCE_EXECUTION, failures: 1 },
          { job: JobName.VERIFY_OPERATION, failures: 2 },
          { job: JobName.DISPATCH_OPERATION, failures: 3 },
        ]);
        // enqueue (for callers that must know) still throws.
        await expect(producer.enqueue(JobName.ADVANCE_EXECUTION, { executionId: 'exe_3' })).rejects.toThrow();
      },
      { onEnqueueFailure: (job, _error, failures) => heard.push({ job, failures }) },
    );
  }, 15_000);
});

describe('JobProducer after a queue was first used while Redis was going away', () => {
  it('builds the queue again once the connection is back, instead of failing every enqueue for good', async () => {
    await withProducer('producer-rebuild', async ({ producer, redis }) => {
      await waitUntilReady(redis);
      // The dispatch queue is first touched in the same tick as the connection drops (and reconnects by itself):
      // BullMQ's one-time connection check, sent a moment later, fails.
      const reconnected = new Promise<void>((resolve) => redis.once('close', () => redis.once('ready', resolve)));
      const first = producer.enqueue(JobName.DISPATCH_OPERATION, { operationId: 'op_down', executionId: 'exe_down' });
      redis.disconnect(true);
      await expect(first).rejects.toThrow("Stream isn't writeable");
      await reconnected;
      // The same producer, the same (reconnected) connection: the enqueue goes through and the job is in Redis.
      await producer.enqueue(
        JobName.DISPATCH_OPERATION,
        { operationId: 'op_up', executionId: 'exe_up' },
        { jobId: 'op_up.dispatch' },
      );
      const job = await producer.queue(QueueName.DISPATCH).getJob('op_up.dispatch');
      expect(job?.data).toEqual({ operationId: 'op_up', executionId: 'exe_up' });
    });
  }, 15_000);
});

describe('JobProducer.enqueueOrRearm: one job per id, a finished one armed again', () => {
  // What is tested is which jobs are left, not how fast Redis answers: the producers' commands get a timeout a loaded
  // CI machine meets (the product's 2 s has its own tests, against a Redis that stops answering).
  const patient = { patient: true };

  it('adds a new job, leaves a pending one alone, and replaces one that finished (completed or failed)', async () => {
    await withProducer('producer-rearm', async ({ producer, prefix }) => {
      const data = { operationId: 'op_rearm', executionId: 'exe_rearm' };
      const id = 'op_rearm.dispatch';
      const queue = producer.queue(QueueName.DISPATCH);
      expect(await producer.enqueueOrRearm(JobName.DISPATCH_OPERATION, data, id)).toBe(true);
      const first = await queue.getJob(id);
      expect(first?.data).toEqual(data);
      expect(await queue.getJobState(id)).toBe('waiting');

      // Pending: the same job stays (same timestamp, one job in the queue).
      expect(await producer.enqueueOrRearm(JobName.DISPATCH_OPERATION, data, id)).toBe(false);
      expect((await queue.getJob(id))?.timestamp).toBe(first!.timestamp);
      expect(await queue.getJobCounts('waiting', 'completed')).toEqual({ waiting: 1, completed: 0 });

      // Finished for real, by a worker: once completed, once failed for good. Each time the job is armed again.
      let calls = 0;
      const connection = createRedis(TEST_REDIS_URL, 'worker', 'producer-spec-rearm-worker');
      for (const finish of ['completed', 'failed'] as const) {
        const worker = new Worker(
          QueueName.DISPATCH,
          async () => {
            calls += 1;
            if (finish === 'failed') throw new UnrecoverableError('failed for good');
          },
          { connection, prefix },
        );
        worker.on('error', () => undefined);
        await finishedBy(worker, id, finish);
        expect(await queue.getJobState(id)).toBe(finish);
        await worker.close();
        expect(await producer.enqueueOrRearm(JobName.DISPATCH_OPERATION, data, id)).toBe(true);
        const armed = await queue.getJob(id);
        expect(armed?.finishedOn).toBeUndefined();
        expect(armed?.data).toEqual(data);
        expect(await queue.getJobState(id)).toBe('waiting');
      }
      expect(calls).toBe(2);
      connection.disconnect();
    });
  }, 15_000);

  it('leaves exactly one armed job when several processes re-arm one finished job at once', async () => {
    // Two reconcilers (or an API and a reconciler) each read "finished", remove and add: whatever the interleaving,
    // the job must end armed once — never removed by one after the other armed it, leaving none.
    await withProducer(
      'producer-rearm-race',
      async ({ producer, prefix }) => {
        const otherRedis = patientCommands(createRedis(TEST_REDIS_URL, 'producer', 'producer-rearm-race-other'));
        const other = new JobProducer(otherRedis, prefix);
        const connection = createRedis(TEST_REDIS_URL, 'worker', 'producer-spec-rearm-race-worker');
        try {
          const queue = producer.queue(QueueName.DISPATCH);
          for (let round = 0; round < 5; round += 1) {
            const data = { operationId: `op_race${round}`, executionId: 'exe_race' };
            const id = `op_race${round}.dispatch`;
            await producer.enqueueOrRearm(JobName.DISPATCH_OPERATION, data, id);
            const worker = new Worker(QueueName.DISPATCH, async () => undefined, { connection, prefix });
            worker.on('error', () => undefined);
            await finishedBy(worker, id, 'completed');
            expect(await queue.getJobState(id)).toBe('completed');
            await worker.close();
            const armed = await Promise.all(
              Array.from({ length: 10 }, (_, i) =>
                (i % 2 === 0 ? producer : other).enqueueOrRearm(JobName.DISPATCH_OPERATION, data, id),
              ),
            );
            expect(armed).toContain(true);
            expect(await queue.getJobState(id)).toBe('waiting');
            expect(await queue.getJobCounts('waiting', 'completed')).toEqual({ waiting: 1, completed: 0 });
            await queue.remove(id);
          }
        } finally {
          await other.close();
          otherRedis.disconnect();
          connection.disconnect();
        }
      },
      patient,
    );
  }, 30_000);
});

/**
 * Resolves when `worker` has finished job `id` as `outcome` says: its 'completed' or 'failed' event, which BullMQ sends
 * once the job's new state is written. Listened to from the worker's construction (it takes its first job on a later
 * tick), so the event cannot pass unheard; no bound of its own, the test's timeout is the only one.
 */
function finishedBy(worker: Worker, id: string, outcome: 'completed' | 'failed'): Promise<void> {
  return new Promise((resolve) => {
    const heard = (job: Job | undefined) => {
      if (job?.id !== id) return;
      worker.off(outcome, heard);
      resolve();
    };
    worker.on(outcome, heard);
  });
}

function waitUntilReady(redis: ReturnType<typeof createRedis>): Promise<void> {
  return redis.status === 'ready' ? Promise.resolve() : new Promise((resolve) => redis.once('ready', () => resolve()));
}

describe('JobProducer while Redis is away and being reconnected to', () => {
  it('fails at once on a queue it has not used yet (BullMQ would wait for the connection to come back)', async () => {
    await withProducerOnLink('producer-away', async ({ producer, redis, link }) => {
      await waitUntilReady(redis);
      const reconnecting = new Promise<void>((resolve) => redis.once('reconnecting', () => resolve()));
      await link.sever();
      await reconnecting;
      // Intake awaits this after its commit: it must answer (the sweeper owes the job), not hang for the outage.
      expect(await producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: 'exe_away' })).toBe(false);
      expect(producer.enqueueFailures).toBe(1);
      // A worker's scrape reads queue depth the same way: it gives up, and the series are dropped.
      await expect(refreshQueueDepth(producer, [QueueName.DISPATCH])).rejects.toThrow();
      // Redis back before the connection is ended: ended while reconnecting, ioredis would leave a timer behind
      // (withProducer).
      await link.mend();
      await waitUntilReady(redis);
    });
  }, 15_000);
});
