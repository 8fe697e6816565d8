import { redisHashTag } from '@verity/platform';
import { JobName, JobPayloads, QUEUE_OF_JOB, QueueName } from './names';

/** What the shards are made of: three variables of the config. */
export interface QueueShardsConfig {
  QUEUE_PREFIX: string;
  QUEUE_SHARDS: number;
  QUEUE_SHARDS_CONSUMED?: number[] | undefined;
}

/**
 * The shard that holds the sweep (its schedule and its queue), the marker of an emptied Redis and every job without an
 * execution or a delivery to route by. Some reconciler must consume it (QUEUE_SHARDS_CONSUMED).
 */
export const HOME_SHARD = 0;

/**
 * A stable hash of a routing key (32-bit FNV-1a over UTF-16 code units): the same id gives the same shard in every
 * process, every version and every Node release. WARNING: changing it moves executions to other shards while their
 * queued jobs stay on the old ones (harmless to correctness, the CAS guards every move, but the job ids stop
 * deduplicating across the two).
 */
export function shardOfKey(key: string, shards: number): number {
  if (shards <= 1) return 0;
  let hash = 0x811c9dc5;
  for (let i = 0; i < key.length; i += 1) {
    hash ^= key.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return (hash >>> 0) % shards;
}

/**
 * The Redis key prefix of one shard. One shard keeps QUEUE_PREFIX exactly (`{verity}`: jobs queued before sharding
 * existed are still found). More put the shard number inside the hash tag (`{verity:0}`, `{verity:1}`, …), so each
 * shard hashes to a slot of its own and a Redis Cluster spreads them over its nodes.
 */
export function shardPrefix(prefix: string, shard: number, shards: number): string {
  if (shards <= 1) return prefix;
  const hashTag = redisHashTag(prefix);
  if (!hashTag) throw new Error(`QUEUE_PREFIX ${prefix} has no hash tag to put the shard in`);
  return `${prefix.slice(0, hashTag.end)}:${shard}${prefix.slice(hashTag.end)}`;
}

/** The key a job is routed by: its execution (every job of an execution on one shard), else its delivery. */
export function routingKeyOf(data: JobPayloads[JobName]): string | null {
  const fields = data as Partial<Record<'executionId' | 'deliveryId', unknown>>;
  if (typeof fields.executionId === 'string') return fields.executionId;
  if (typeof fields.deliveryId === 'string') return fields.deliveryId;
  return null;
}

/** The queue shards of a deployment, and the ones this process consumes. */
export class QueueShards {
  private readonly consumedSet: ReadonlySet<number>;

  constructor(
    readonly prefix: string,
    readonly count = 1,
    consumed?: readonly number[],
  ) {
    if (!Number.isInteger(count) || count < 1) throw new Error(`QUEUE_SHARDS must be a positive integer, got ${count}`);
    this.consumedSet = new Set(consumed ?? this.all());
  }

  static of(config: QueueShardsConfig): QueueShards {
    return new QueueShards(config.QUEUE_PREFIX, config.QUEUE_SHARDS, config.QUEUE_SHARDS_CONSUMED);
  }

  all(): number[] {
    return Array.from({ length: this.count }, (_, shard) => shard);
  }

  prefixOf(shard: number): string {
    return shardPrefix(this.prefix, shard, this.count);
  }

  /** The shards a queue exists on: the sweep only on the home shard (one schedule), the rest on all of them. */
  shardsOf(queue: QueueName): number[] {
    return queue === QueueName.SWEEP ? [HOME_SHARD] : this.all();
  }

  /** The shards of `queue` this process consumes (none: it builds no worker for that queue). */
  consumed(queue: QueueName): number[] {
    return this.shardsOf(queue).filter((shard) => this.consumedSet.has(shard));
  }

  /** The shard a job goes to. */
  shardOf<N extends JobName>(name: N, data: JobPayloads[N]): number {
    if (QUEUE_OF_JOB[name] === QueueName.SWEEP) return HOME_SHARD;
    const key = routingKeyOf(data);
    return key === null ? HOME_SHARD : shardOfKey(key, this.count);
  }

  /** The shard of an execution's jobs. */
  shardOfExecution(executionId: string): number {
    return shardOfKey(executionId, this.count);
  }
}
