import { createLogger, createRedisClient, loadConfig, queueJobs } from '@verity/platform';
import type { Job } from 'bullmq';
import { LocalRedisCluster } from '../../../test/support/redis-cluster';
import { JobName, QueueName } from './names';
import { JobProducer } from './producer';
import { QueueWorker } from './queue-worker';
import { QueueShards } from './shards';
import { SweepSchedule, redisMarkerKey } from './sweep-schedule';
import { refreshQueueDepth } from './worker-ops';

class RecordingWorker extends QueueWorker {
  readonly seen: { queue: string; data: { executionId: string; operationId?: string } }[] = [];
  constructor(queue: QueueName, config: ReturnType<typeof loadConfig>) {
    super(queue, config, createLogger('cluster-spec', 'silent'));
  }
  async process(job: Job): Promise<string> {
    this.seen.push({ queue: job.queueQualifiedName, data: job.data as { executionId: string } });
    return 'done';
  }
}

/** Until `probe` is true, polled (a condition, never a sleep); fails after timeoutMs. */
async function until(probe: () => boolean | Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error('condition not met');
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('queues on a real Redis Cluster (three nodes), QUEUE_SHARDS=3', () => {
  let cluster: LocalRedisCluster;
  let config: ReturnType<typeof loadConfig>;
  let shards: QueueShards;

  beforeAll(async () => {
    cluster = await LocalRedisCluster.start();
    const prefix = await cluster.prefixAcrossNodes('cluster', 3);
    config = loadConfig({ REDIS_CLUSTER_NODES: cluster.nodeList, QUEUE_PREFIX: prefix, QUEUE_SHARDS: '3' });
    shards = QueueShards.of(config);
  }, 60_000);

  afterAll(async () => {
    await cluster?.stop();
  });

  it("puts each execution's jobs on its shard, spreads executions over the nodes, and consumes every shard", async () => {
    const redis = createRedisClient(config, 'producer', 'cluster-spec');
    const producer = new JobProducer(redis, shards);
    const executions = new RecordingWorker(QueueName.EXECUTIONS, config);
    const verify = new RecordingWorker(QueueName.VERIFY, config);
    try {
      executions.onApplicationBootstrap();
      verify.onApplicationBootstrap();
      expect(executions.workers.map((w) => w.opts.prefix)).toEqual([0, 1, 2].map((s) => shards.prefixOf(s)));
      // Executions until every shard has some (the hash spreads them; which one each gets is its business).
      const ids: string[] = [];
      for (let i = 0; new Set(ids.map((id) => shards.shardOfExecution(id))).size < 3; i += 1) ids.push(`exe_c${i}`);
      for (const executionId of ids) {
        await producer.enqueue(
          JobName.ADVANCE_EXECUTION,
          { executionId },
          { jobId: `${executionId}.advance-execution` },
        );
        await producer.enqueue(
          JobName.VERIFY_OPERATION,
          { operationId: `op_of_${executionId}`, executionId },
          { jobId: `op_of_${executionId}.verify.0`, delay: 60_000 },
        );
      }
      await until(() => executions.seen.length === ids.length);
      // Each advance was consumed from its execution's shard.
      for (const { queue, data } of executions.seen) {
        expect(queue).toBe(`${shards.prefixOf(shards.shardOfExecution(data.executionId))}:${QueueName.EXECUTIONS}`);
      }
      // The delayed verifications wait in Redis: each on the node serving its execution's shard, and each node holds
      // only its own shard's keys.
      for (const [index, node] of cluster.nodes.entries()) {
        const keys = await cluster.keysOn(node, `${config.QUEUE_PREFIX.slice(0, -1)}*`);
        const shardsHere = new Set(keys.map((k) => Number(/^\{[^}]*:(\d+)\}/.exec(k)?.[1])));
        expect({ index, shards: [...shardsHere] }).toEqual({ index, shards: [expect.any(Number)] });
        const [shard] = [...shardsHere];
        expect((await cluster.nodeOf(shards.prefixOf(shard))).port).toBe(node.port);
        const verifications = keys.filter((k) => /:verify:op_of_/.test(k) && !/:(lock|logs)$/.test(k));
        for (const key of verifications) {
          const executionId = /op_of_(exe_c\d+)\.verify/.exec(key)?.[1] ?? '';
          expect(shards.shardOfExecution(executionId)).toBe(shard);
        }
        expect(verifications.length).toBe(ids.filter((id) => shards.shardOfExecution(id) === shard).length);
      }
      // Depth is summed over the shards.
      await refreshQueueDepth(producer, [QueueName.VERIFY]);
      const delayed = (await queueJobs.get()).values.find(
        (v) => v.labels.queue === QueueName.VERIFY && v.labels.state === 'delayed',
      );
      expect(delayed?.value).toBe(ids.length);
    } finally {
      await executions.beforeApplicationShutdown();
      await verify.beforeApplicationShutdown();
      await producer.close();
      redis.disconnect();
    }
  }, 60_000);

  it('keeps the sweep schedule on the home shard and a marker on every shard', async () => {
    const redis = createRedisClient(config, 'producer', 'cluster-spec-sweep');
    const producer = new JobProducer(redis, shards);
    const schedule = new SweepSchedule(
      producer,
      redis,
      { everyMs: 60_000, checkEveryMs: 60_000 },
      createLogger('s', 'silent'),
    );
    try {
      await schedule.start();
      expect(await producer.queue(QueueName.SWEEP, 0).getJobScheduler('sweep')).toBeTruthy();
      for (const shard of shards.all()) expect(await redis.exists(redisMarkerKey(shards.prefixOf(shard)))).toBe(1);
    } finally {
      await schedule.stop();
      await producer.close();
      redis.disconnect();
    }
  }, 30_000);
});
