import { Cluster } from 'ioredis';
import type { Execution } from '@verity/sdk';
import { QueueName, QueueShards } from '@verity/queues';
import { DEMO, METRICS_TOKEN, Stack, waitFor } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import { LocalRedisCluster, RedisClusterNode } from '../support/redis-cluster';

/**
 * The whole system with its queues on a real three-node Redis Cluster and QUEUE_SHARDS=3: the shards are spread over
 * the nodes (the test picks a prefix whose three shard tags are served by three different nodes), every job of an
 * execution sits on that execution's shard, and executions still go to VERIFIED end to end.
 */
describe('queues sharded over a Redis Cluster (three nodes, QUEUE_SHARDS=3)', () => {
  let redisCluster: LocalRedisCluster;
  let stack: Stack;
  let shards: QueueShards;
  let prefix = '';

  beforeAll(async () => {
    redisCluster = await LocalRedisCluster.start();
    prefix = await redisCluster.prefixAcrossNodes('qcluster', 3);
    shards = new QueueShards(prefix, 3);
    // No dispatcher yet: the executions' first jobs stay queued where the test can look at them.
    stack = await Stack.start({
      label: 'qcluster',
      dispatchers: 0,
      // Every read-back goes through a verify job (not the dispatcher's read at send), and every send through a dispatch
      // job (not the advance job's own), so the verify and dispatch queues' shards are exercised too.
      env: {
        REDIS_CLUSTER_NODES: redisCluster.nodeList,
        QUEUE_SHARDS: '3',
        QUEUE_PREFIX: prefix,
        VERIFY_AT_SEND: 'false',
        SEND_IN_ADVANCE: 'false',
      },
    });
  }, 120_000);

  afterAll(async () => {
    await stack?.stop();
    await redisCluster?.stop();
  });

  /** The queue shard a key belongs to, from its hash tag (`{…:2}:dispatch:…` → 2). */
  function shardOfKey(key: string): number {
    const match = /^\{[^}]*:(\d+)\}/.exec(key);
    if (!match) throw new Error(`not a shard key: ${key}`);
    return Number(match[1]);
  }

  /** The keys of this test's queues on one node. */
  function keysOn(node: RedisClusterNode): Promise<string[]> {
    return redisCluster.keysOn(node, `${prefix.slice(0, -1)}:*`);
  }

  async function hashField(node: RedisClusterNode, key: string, field: string): Promise<string | null> {
    const { default: IORedis } = await import('ioredis');
    const redis = new IORedis(node.port, node.host, { maxRetriesPerRequest: 1 });
    try {
      return await redis.hget(key, field);
    } finally {
      redis.disconnect();
    }
  }

  it('spreads executions over the shards and nodes, keeps each one on its shard, and ends them VERIFIED', async () => {
    // The events channel: writers announce on the cluster, where this subscriber (on any node) hears them.
    const announced = new Set<string>();
    const subscriber = new Cluster(redisCluster.nodes.map((n) => ({ host: n.host, port: n.port })));
    subscriber.on('message', (_channel: string, ids: string) => ids.split(',').forEach((id) => announced.add(id)));
    await subscriber.subscribe(`${prefix}:events`);
    try {
      // Executions until every shard has some.
      const executions: { id: string; reference: string }[] = [];
      while (new Set(executions.map((e) => shards.shardOfExecution(e.id))).size < 3 && executions.length < 60) {
        const reference = unique('cluster-order');
        const created = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
          key: DEMO.agent,
          body: submission([charge(reference)]),
        });
        expect(created.status).toBe(201);
        executions.push({ id: created.body.id, reference });
      }
      expect(new Set(executions.map((e) => shards.shardOfExecution(e.id))).size).toBe(3);

      // Each advance job waits on the node that serves its execution's shard, and each node holds one shard only.
      const owner = new Map<number, number>();
      for (const shard of shards.all()) owner.set(shard, (await redisCluster.nodeOf(shards.prefixOf(shard))).port);
      expect(new Set(owner.values()).size).toBe(3);
      const queuedFor = new Set<string>();
      await waitFor(
        async () => {
          for (const node of redisCluster.nodes) {
            for (const key of (await keysOn(node)).filter((k) => /:executions:\d+$/.test(k))) {
              expect(owner.get(shardOfKey(key))).toBe(node.port);
              const data = JSON.parse((await hashField(node, key, 'data')) ?? '{}') as { executionId?: string };
              expect(shardOfKey(key)).toBe(shards.shardOfExecution(data.executionId ?? ''));
              queuedFor.add(data.executionId ?? '');
            }
          }
          return queuedFor.size;
        },
        (n) => n === executions.length,
      );

      // Now the dispatcher: it consumes every shard.
      await stack.startApp('dispatcher');
      for (const { id, reference } of executions) {
        const settled = await waitFor(
          async () => (await http<Execution>(stack.apiUrl, 'GET', `/v1/executions/${id}`, { key: DEMO.agent })).body,
          (e) => e.status === 'completed',
          60_000,
        );
        expect(settled.operations.map((o) => o.status)).toEqual(['VERIFIED']);
        expect((await stack.effects()).charges[reference].count).toBe(1);
      }

      // Every operation's jobs sit on its execution's shard: the dispatch jobs (kept after completion) by their data,
      // the verifications by the ids their queue's event stream recorded.
      const operations = (await stack.db.dataSource.query(
        `SELECT id, execution_id FROM operations WHERE execution_id = ANY($1)`,
        [executions.map((e) => e.id)],
      )) as { id: string; execution_id: string }[];
      const executionOf = new Map(operations.map((o) => [o.id, o.execution_id]));
      const dispatchShards = new Map<string, number>();
      const verifyShards = new Map<string, number>();
      const { default: IORedis } = await import('ioredis');
      for (const node of redisCluster.nodes) {
        const keys = await keysOn(node);
        for (const key of keys) expect(owner.get(shardOfKey(key))).toBe(node.port);
        for (const key of keys.filter((k) => /:dispatch:op_[^:]+\.dispatch$/.test(k))) {
          const data = JSON.parse((await hashField(node, key, 'data')) ?? '{}') as Record<string, string>;
          expect(data.executionId).toBe(executionOf.get(data.operationId));
          dispatchShards.set(data.operationId, shardOfKey(key));
        }
        const redis = new IORedis(node.port, node.host, { maxRetriesPerRequest: 1 });
        try {
          for (const stream of keys.filter((k) => k.endsWith(`:${QueueName.VERIFY}:events`))) {
            for (const [, fields] of await redis.xrange(stream, '-', '+')) {
              const jobId = fields[fields.indexOf('jobId') + 1] ?? '';
              if (fields[fields.indexOf('event') + 1] === 'added')
                verifyShards.set(jobId.split('.')[0], shardOfKey(stream));
            }
          }
        } finally {
          redis.disconnect();
        }
      }
      for (const { id: operationId, execution_id: executionId } of operations) {
        expect({
          operationId,
          dispatch: dispatchShards.get(operationId),
          verify: verifyShards.get(operationId),
        }).toEqual({
          operationId,
          dispatch: shards.shardOfExecution(executionId),
          verify: shards.shardOfExecution(executionId),
        });
      }
      // Their events were announced on the cluster's channel.
      await waitFor(
        async () => executions.filter((e) => !announced.has(e.id)).length,
        (n) => n === 0,
      );
    } finally {
      subscriber.disconnect();
    }
  }, 180_000);

  it('answers ready, sums queue depth over the shards, and shows every shard in Bull Board', async () => {
    expect((await http(stack.apiUrl, 'GET', '/health/ready')).status).toBe(200);
    const [dispatcher] = stack.running('dispatcher');
    const metrics = await fetch(`${dispatcher.opsUrl}/metrics`, {
      headers: { authorization: `Bearer ${METRICS_TOKEN}` },
    });
    expect(metrics.status).toBe(200);
    const text = await metrics.text();
    // One series per queue and state, not one per shard.
    expect(text.match(/^verity_queue_jobs\{queue="dispatch",state="waiting"\} \d+$/gm)).toHaveLength(1);
    const board = await http<{ queues: { name: string }[] }>(stack.apiUrl, 'GET', '/admin/queues/api/queues', {
      key: DEMO.operator,
    });
    expect(board.status).toBe(200);
    const names = board.body.queues.map((q) => q.name);
    for (const shard of shards.all()) expect(names).toContain(`${shard}.${QueueName.DISPATCH}`);
    expect(names).toContain(`0.${QueueName.SWEEP}`);
    expect(names).not.toContain(`1.${QueueName.SWEEP}`);
  }, 60_000);
});
