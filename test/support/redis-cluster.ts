/**
 * A real Redis Cluster of three masters on spare loopback ports, for tests and the chaos run: each node is its own
 * `redis-server --cluster-enabled yes` in a temp directory, joined with `redis-cli --cluster create`. Stop it after.
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import IORedis from 'ioredis';
import {
  LocalServiceError,
  PrivateService,
  freePort,
  redisCommands,
  startPrivateRedis,
} from '../../scripts/local-services';
import { shardPrefix } from '../../libs/queues/src/shards';
import { testQueuePrefix } from './services';

export interface RedisClusterNode {
  service: PrivateService;
  host: string;
  port: number;
}

export class LocalRedisCluster {
  private constructor(
    readonly dir: string,
    readonly nodes: RedisClusterNode[],
    private readonly ownsDir: boolean,
  ) {}

  /** REDIS_CLUSTER_NODES for the apps. */
  get nodeList(): string {
    return this.nodes.map((n) => `${n.host}:${n.port}`).join(',');
  }

  static async start(options: { dir?: string; nodes?: number; appendonly?: boolean } = {}): Promise<LocalRedisCluster> {
    const ownsDir = !options.dir;
    const dir = options.dir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'verity-redis-cluster-'));
    const count = options.nodes ?? 3;
    const nodes: RedisClusterNode[] = [];
    const cluster = new LocalRedisCluster(dir, nodes, ownsDir);
    try {
      for (let i = 0; i < count; i += 1) {
        const port = await freePort();
        // The cluster bus listens on a port too: by default port + 10000, which falls in the system's ephemeral range
        // (an outgoing connection could hold it, and the node exits at start). One of our own range instead.
        const busPort = await freePort();
        const service = await startPrivateRedis({
          dir: path.join(dir, `node-${i}`),
          port,
          appendonly: options.appendonly ?? false,
          // nodes.conf lives in the node's own directory (--dir), kept across a restart: the node keeps its slots.
          extraArgs: [
            '--cluster-enabled',
            'yes',
            '--cluster-config-file',
            'nodes.conf',
            '--cluster-node-timeout',
            '2000',
            '--cluster-port',
            String(busPort),
          ],
        });
        nodes.push({ service, host: '127.0.0.1', port });
      }
      const created = spawnSync(
        'redis-cli',
        ['--cluster', 'create', ...nodes.map((n) => `${n.host}:${n.port}`), '--cluster-replicas', '0', '--cluster-yes'],
        { encoding: 'utf8', timeout: 30_000 },
      );
      if (created.status !== 0) {
        throw new LocalServiceError(`redis-cli --cluster create failed:\n${created.stdout}\n${created.stderr}`);
      }
      await cluster.waitUntilOk();
    } catch (error) {
      await cluster.stop();
      throw error;
    }
    return cluster;
  }

  /** Until every node reports cluster_state:ok (all slots served). */
  async waitUntilOk(timeoutMs = 30_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const states = await Promise.all(
        this.nodes.map(async (n) => {
          try {
            const [info] = await redisCommands(`redis://${n.host}:${n.port}`, [['CLUSTER', 'INFO']], 1_000);
            return typeof info === 'string' && info.includes('cluster_state:ok');
          } catch {
            return false;
          }
        }),
      );
      if (states.every(Boolean)) return;
      if (Date.now() > deadline) throw new LocalServiceError(`the Redis Cluster in ${this.dir} is not ok`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** The node that serves a key's slot (by asking the cluster). */
  async nodeOf(key: string): Promise<RedisClusterNode> {
    const redis = new IORedis(this.nodes[0].port, this.nodes[0].host, { maxRetriesPerRequest: 1 });
    try {
      const slot = (await redis.call('CLUSTER', 'KEYSLOT', key)) as number;
      const ranges = (await redis.call('CLUSTER', 'SLOTS')) as [number, number, [string, number, ...unknown[]]][];
      const owner = ranges.find(([from, to]) => slot >= from && slot <= to);
      const node = owner && this.nodes.find((n) => n.port === owner[2][1]);
      if (!node) throw new Error(`no node serves slot ${slot}`);
      return node;
    } finally {
      redis.disconnect();
    }
  }

  /**
   * A test's queue prefix whose `shards` shard tags are served by as many different nodes (as far as there are nodes),
   * so a test can see the shards spread: with random tags, two shards may share a node by chance.
   */
  async prefixAcrossNodes(label: string, shards: number): Promise<string> {
    for (let attempt = 0; attempt < 200; attempt += 1) {
      const prefix = testQueuePrefix(label);
      const owners = new Set<number>();
      for (let shard = 0; shard < shards; shard += 1)
        owners.add((await this.nodeOf(shardPrefix(prefix, shard, shards))).port);
      if (owners.size === Math.min(shards, this.nodes.length)) return prefix;
    }
    throw new Error('no prefix spreads its shards over the nodes');
  }

  /** Every key matching `pattern` on one node (SCAN is per node on a cluster). */
  async keysOn(node: RedisClusterNode, pattern: string): Promise<string[]> {
    const redis = new IORedis(node.port, node.host, { maxRetriesPerRequest: 1 });
    try {
      const keys: string[] = [];
      let cursor = '0';
      do {
        const [next, batch] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
        cursor = next;
        keys.push(...batch);
      } while (cursor !== '0');
      return keys;
    } finally {
      redis.disconnect();
    }
  }

  /** Stops every node and removes the directory this cluster made. */
  async stop(): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.service.stop(10_000).catch(() => undefined)));
    if (this.ownsDir) fs.rmSync(this.dir, { recursive: true, force: true });
  }
}
