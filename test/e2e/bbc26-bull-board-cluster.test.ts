import { Cluster } from 'ioredis';
import { Queue, Worker } from 'bullmq';
import type { Execution } from '@verity/sdk';
import { QueueName, QueueShards } from '@verity/queues';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import { LocalRedisCluster, RedisClusterNode } from '../support/redis-cluster';
import { redisCommands } from '../../scripts/local-services';

interface BoardJob {
  id: string;
  name: string;
  data: Record<string, unknown>;
}
interface BoardQueue {
  name: string;
  isPaused: boolean;
  readOnlyMode: boolean;
  jobs: BoardJob[];
}

/**
 * Bull Board, the operator's first stop, with the queues on a real three-node Redis Cluster and QUEUE_SHARDS=3 (each
 * shard on a node of its own) and BULL_BOARD_WRITABLE=true: it lists every shard's queues and shows a job queued on a
 * shard other than the home one; its writes (retry of a failed job, pause and resume) reach that shard's queue and no
 * other, and a tenant's key writes nothing (403); and with the node serving a shard killed, it answers 503
 * queue-unavailable, as for a single Redis that is away, while the API stays up.
 */
describe('Bull Board on a Redis Cluster (three nodes, QUEUE_SHARDS=3, writable)', () => {
  let redisCluster: LocalRedisCluster;
  let stack: Stack;
  let shards: QueueShards;
  let prefix = '';
  let client: Cluster | undefined;
  const testQueues: Queue[] = [];

  beforeAll(async () => {
    redisCluster = await LocalRedisCluster.start();
    prefix = await redisCluster.prefixAcrossNodes('bbc26', 3);
    shards = new QueueShards(prefix, 3);
    // No workers: what the API enqueues stays where the board can show it.
    stack = await Stack.start({
      label: 'bbc26',
      dispatchers: 0,
      reconcilers: 0,
      env: {
        REDIS_CLUSTER_NODES: redisCluster.nodeList,
        QUEUE_SHARDS: '3',
        QUEUE_PREFIX: prefix,
        BULL_BOARD_WRITABLE: 'true',
      },
    });
    client = new Cluster(
      redisCluster.nodes.map((n) => ({ host: n.host, port: n.port })),
      { redisOptions: { maxRetriesPerRequest: null } },
    );
    client.on('error', () => undefined);
  }, 120_000);

  afterAll(async () => {
    await Promise.all(testQueues.map((q) => q.close().catch(() => undefined)));
    client?.disconnect();
    await stack?.stop();
    await redisCluster?.stop();
  });

  /** A queue of one shard, as the test reads it on the cluster. */
  function shardQueue(name: QueueName, shard: number): Queue {
    const queue = new Queue(name, { connection: client!, prefix: shards.prefixOf(shard) });
    queue.on('error', () => undefined);
    testQueues.push(queue);
    return queue;
  }

  const board = <T>(method: string, path: string, key: string = DEMO.operator) =>
    http<T>(stack.apiUrl, method, `/admin/queues${path}`, { key });

  /** A shard other than the home one (0) whose node does not serve QUEUE_PREFIX's slot (the API's own small keys). */
  async function awayShard(): Promise<{ shard: number; node: RedisClusterNode }> {
    const apiNode = await redisCluster.nodeOf(prefix);
    for (const shard of shards.all().filter((s) => s !== 0)) {
      const node = await redisCluster.nodeOf(shards.prefixOf(shard));
      if (node.port !== apiNode.port) return { shard, node };
    }
    throw new Error('every shard but the home one shares its node with QUEUE_PREFIX');
  }

  it('lists every shard’s queues and shows a job queued on a shard other than the home one', async () => {
    const { shard } = await awayShard();
    // An execution routed to that shard: its first advance job waits there (no dispatcher).
    let executionId = '';
    for (let i = 0; i < 60 && !executionId; i += 1) {
      const created = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
        key: DEMO.agent,
        body: submission([charge(unique('bbc26'))]),
      });
      expect(created.status).toBe(201);
      if (shards.shardOfExecution(created.body.id) === shard) executionId = created.body.id;
    }
    expect(executionId).not.toBe('');

    const listed = await board<{ queues: BoardQueue[] }>('GET', '/api/queues');
    expect(listed.status).toBe(200);
    const names = listed.body.queues.map((q) => q.name);
    for (const name of Object.values(QueueName)) {
      for (const s of shards.shardsOf(name)) expect(names).toContain(`${s}.${name}`);
    }
    expect(listed.body.queues.every((q) => !q.readOnlyMode)).toBe(true);

    const active = `${shard}.${QueueName.EXECUTIONS}`;
    const page = await waitFor(
      () =>
        board<{ queues: BoardQueue[] }>(
          'GET',
          `/api/queues?activeQueue=${active}&status=waiting&page=1&jobsPerPage=50`,
        ),
      (res) =>
        res.status !== 200 ||
        (res.body.queues.find((q) => q.name === active)?.jobs ?? []).some((j) => j.data.executionId === executionId),
    );
    expect(page.status).toBe(200);
    const job = page.body.queues.find((q) => q.name === active)!.jobs.find((j) => j.data.executionId === executionId)!;
    const one = await board<{ job: BoardJob; status: string }>('GET', `/api/queues/${active}/${job.id}`);
    expect({ status: one.status, state: one.body.status, executionId: one.body.job.data.executionId }).toEqual({
      status: 200,
      state: 'waiting',
      executionId,
    });
    // An advance job's id is BullMQ's counter of its queue: the same id on the home shard's queue is another job.
    const elsewhere = await board<{ job?: BoardJob }>('GET', `/api/queues/0.${QueueName.EXECUTIONS}/${job.id}`);
    expect(elsewhere.body.job?.data.executionId).not.toBe(executionId);
  }, 120_000);

  it('retries a failed job and pauses a queue on that shard only; a tenant’s key gets 403 and changes nothing', async () => {
    const { shard } = await awayShard();
    const name = `${shard}.${QueueName.DISPATCH}`;
    const queue = shardQueue(QueueName.DISPATCH, shard);
    const others = shards
      .all()
      .filter((s) => s !== shard)
      .map((s) => shardQueue(QueueName.DISPATCH, s));

    // A job of that shard's dispatch queue that failed (a worker of the test's own fails it).
    const jobId = 'bbc26-failed';
    await queue.add('dispatch-operation', { operationId: 'op_bbc26', executionId: 'exe_bbc26' }, { jobId });
    const worker = new Worker(QueueName.DISPATCH, () => Promise.reject(new Error('failed on purpose')), {
      connection: client!,
      prefix: shards.prefixOf(shard),
    });
    worker.on('error', () => undefined);
    try {
      await waitFor(
        () => queue.getJobState(jobId),
        (state) => state === 'failed',
      );
    } finally {
      await worker.close();
    }

    const shown = await board<{ status: string }>('GET', `/api/queues/${name}/${jobId}`);
    expect({ status: shown.status, state: shown.body.status }).toEqual({ status: 200, state: 'failed' });

    // A tenant's keys write nothing.
    for (const key of [DEMO.admin, DEMO.reviewer, DEMO.agent]) {
      const answers = [
        (await board('PUT', `/api/queues/${name}/${jobId}/retry`, key)).status,
        (await board('PUT', `/api/queues/${name}/pause`, key)).status,
      ];
      expect({ key, answers }).toEqual({ key, answers: [403, 403] });
    }
    expect(await queue.getJobState(jobId)).toBe('failed');
    expect(await queue.isPaused()).toBe(false);

    // The operator's retry puts the job back to wait on its shard.
    const retried = await board('PUT', `/api/queues/${name}/${jobId}/retry`);
    expect(retried.status).toBe(204);
    expect(await queue.getJobState(jobId)).toBe('waiting');
    for (const other of others) expect(await other.getJob(jobId)).toBeUndefined();

    // Pause and resume reach that shard's queue and no other.
    const paused = await board('PUT', `/api/queues/${name}/pause`);
    expect(paused.status).toBe(200);
    expect(await queue.isPaused()).toBe(true);
    for (const other of others) expect(await other.isPaused()).toBe(false);
    const listed = await board<{ queues: BoardQueue[] }>('GET', '/api/queues');
    expect(listed.body.queues.filter((q) => q.isPaused).map((q) => q.name)).toEqual([name]);
    const resumed = await board('PUT', `/api/queues/${name}/resume`);
    expect(resumed.status).toBe(200);
    expect(await queue.isPaused()).toBe(false);
  }, 120_000);

  it('answers 503 queue-unavailable while a node serving a shard is killed, stays up, and lists again once it is back', async () => {
    const { shard, node } = await awayShard();
    const active = `${shard}.${QueueName.EXECUTIONS}`;
    const paths = [
      '/api/queues',
      `/api/queues?activeQueue=${active}&status=waiting&page=1&jobsPerPage=50`,
      `/api/queues/${active}/some-job`,
    ];
    expect((await board('GET', paths[0])).status).toBe(200);

    await node.service.kill('SIGKILL');
    const survivors = redisCluster.nodes.filter((n) => n !== node);
    /** Whether every surviving node has found the cluster down (a slot is served by no one). */
    const clusterDown = async () => {
      const states = await Promise.all(
        survivors.map(async (n) => {
          const [info] = await redisCommands(`redis://${n.host}:${n.port}`, [['CLUSTER', 'INFO']], 1_000);
          return typeof info === 'string' && info.includes('cluster_state:fail');
        }),
      );
      return states.every(Boolean);
    };
    // Every answer, from the kill until the other nodes have found the cluster down and once more after, is 503.
    const answers: { path: string; status: number; type?: string; contentType: string | null }[] = [];
    const ask = async () => {
      for (const path of paths) {
        const res = await board<{ type?: string }>('GET', path);
        answers.push({ path, status: res.status, type: res.body?.type, contentType: res.headers.get('content-type') });
      }
    };
    let down = false;
    while (!down) {
      down = await clusterDown();
      await ask();
    }
    await ask();
    const pause = await board<{ type?: string; detail?: string }>('PUT', `/api/queues/${active}/pause`);
    expect(answers).toEqual(
      answers.map(({ path }) => ({
        path,
        status: 503,
        type: 'https://verity.dev/problems/queue-unavailable',
        contentType: expect.stringMatching(/^application\/problem\+json/),
      })),
    );
    expect({ status: pause.status, type: pause.body.type }).toEqual({
      status: 503,
      type: 'https://verity.dev/problems/queue-unavailable',
    });
    expect(pause.body.detail).toContain('could not tell whether the change was made');
    // Logged as the outage it is, not as a failure of the board.
    const [api] = stack.running('api');
    expect(api.output.join('')).not.toContain('Bull Board request failed');
    expect(api.output.join('')).toContain('job queue unavailable: answering 503');

    // The API is up: its own reads (Postgres) answer, and the process runs.
    expect(stack.running('api')).toHaveLength(1);
    const read = await http(stack.apiUrl, 'GET', '/v1/executions?limit=1', { key: DEMO.agent });
    expect(read.status).toBe(200);

    // The node back (its slots kept in its nodes.conf), the board lists again.
    await node.service.restart();
    await redisCluster.waitUntilOk();
    const back = await waitFor(
      () => board('GET', '/api/queues'),
      (res) => res.status === 200,
      30_000,
      250,
    );
    expect(back.status).toBe(200);
  }, 180_000);
});
