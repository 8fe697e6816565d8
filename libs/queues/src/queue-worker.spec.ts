import { createLogger, loadConfig } from '@verity/platform';
import type { Job } from 'bullmq';
import { withProducer } from '../../../test/support/producer';
import { TEST_REDIS_URL } from '../../../test/support/services';
import { JobName, QueueName } from './names';
import { QueueWorker } from './queue-worker';

class RecordingWorker extends QueueWorker {
  readonly seen: string[] = [];
  constructor(config: ReturnType<typeof loadConfig>) {
    super(QueueName.EXECUTIONS, config, createLogger('queue-worker-spec', 'silent'));
  }
  async process(job: Job): Promise<string> {
    this.seen.push((job.data as { executionId: string }).executionId);
    return 'done';
  }
}

class DispatchWorker extends QueueWorker {
  constructor(config: ReturnType<typeof loadConfig>) {
    super(QueueName.DISPATCH, config, createLogger('queue-worker-spec', 'silent'));
  }
  async process(): Promise<string> {
    return 'sent';
  }
}

describe('QueueWorker', () => {
  it('runs a send once: a dispatch job has attempts 1, and the dispatch worker re-runs no stalled job (maxStalledCount 0)', async () => {
    await withProducer('queue-worker-dispatch', async ({ producer, prefix }) => {
      const config = loadConfig({ REDIS_URL: TEST_REDIS_URL, QUEUE_PREFIX: prefix });
      const worker = new DispatchWorker(config);
      try {
        worker.onApplicationBootstrap();
        expect(worker.worker.opts.maxStalledCount).toBe(0);
        await worker.worker.pause();
        // The job as Redis holds it, enqueued the way the dispatcher's producers enqueue every send.
        await producer.enqueue(
          JobName.DISPATCH_OPERATION,
          { operationId: 'op_once', executionId: 'exe_once' },
          { jobId: 'op_once.dispatch' },
        );
        const job = await producer.queue(QueueName.DISPATCH).getJob('op_once.dispatch');
        expect(job?.opts.attempts).toBe(1);
      } finally {
        await worker.beforeApplicationShutdown();
      }
    });
  }, 20_000);

  it('is built at bootstrap from the config it is given, processes jobs, and is closed on shutdown', async () => {
    await withProducer('queue-worker', async ({ producer, prefix }) => {
      const config = loadConfig({ REDIS_URL: TEST_REDIS_URL, QUEUE_PREFIX: prefix, WORKER_CONCURRENCY: '3' });
      const worker = new RecordingWorker(config);
      // Nothing is built (or read from the environment) before bootstrap.
      expect(() => worker.worker).toThrow('not built before bootstrap');
      try {
        worker.onApplicationBootstrap();
        expect(worker.worker.opts).toMatchObject({ prefix, concurrency: 3, lockDuration: config.DISPATCH_LOCK_MS });
        await producer.enqueue(JobName.ADVANCE_EXECUTION, { executionId: 'exe_1' });
        await new Promise<void>((resolve) => worker.worker.once('completed', () => resolve()));
        expect(worker.seen).toEqual(['exe_1']);
        await worker.beforeApplicationShutdown();
        expect(worker.worker.closing).toBeTruthy();
        expect(worker.worker.isRunning()).toBe(false);
      } finally {
        await worker.beforeApplicationShutdown();
      }
    });
  }, 20_000);
});
