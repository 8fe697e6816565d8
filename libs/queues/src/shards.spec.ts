import { JobName, QueueName } from './names';
import { HOME_SHARD, QueueShards, shardOfKey, shardPrefix } from './shards';

describe('shardOfKey', () => {
  // The hash decides where every queued job of an execution lives: a change would move executions between shards while
  // their jobs stay behind. These values are pinned on purpose (computed with a separate FNV-1a implementation).
  it.each([
    ['exe_01JD7Q3V9W8Y2K4M6N8P0R2T4V', 3, 2],
    ['exe_01JD7Q3V9W8Y2K4M6N8P0R2T4W', 3, 0],
    ['exe_01JD7Q3V9W8Y2K4M6N8P0R2T4X', 3, 1],
    ['exe_01JD7Q3V9W8Y2K4M6N8P0R2T4V', 16, 13],
    ['', 3, 1],
    // FNV-1a's published test vector: "a" hashes to 0xe40c292c.
    ['a', 2 ** 32, 0xe40c292c],
  ])('puts %p on shard %p of %p', (key, shards, expected) => {
    expect(shardOfKey(key, shards as number)).toBe(expected);
  });

  it('is always 0 with one shard', () => {
    for (let i = 0; i < 100; i += 1) expect(shardOfKey(`exe_${i}`, 1)).toBe(0);
  });

  it('stays in range and spreads ids about evenly', () => {
    const counts = [0, 0, 0];
    for (let i = 0; i < 30_000; i += 1) counts[shardOfKey(`exe_${i.toString(36).padStart(8, '0')}`, 3)] += 1;
    for (const n of counts) expect(Math.abs(n - 10_000)).toBeLessThan(500);
  });
});

describe('shardPrefix', () => {
  it('keeps the prefix exactly with one shard, so jobs queued before sharding are still found', () => {
    expect(shardPrefix('{verity}', 0, 1)).toBe('{verity}');
  });

  it('puts the shard inside the hash tag, so each shard hashes to a slot of its own', () => {
    expect([0, 1, 2].map((shard) => shardPrefix('{verity}', shard, 3))).toEqual([
      '{verity:0}',
      '{verity:1}',
      '{verity:2}',
    ]);
    expect(shardPrefix('acme{verity}q', 2, 3)).toBe('acme{verity:2}q');
  });

  it('refuses a prefix without a hash tag when there are several shards', () => {
    expect(() => shardPrefix('verity', 1, 3)).toThrow('no hash tag');
    // Redis reads the first `{` to the first `}` after it: an empty one there means no tag at all.
    expect(() => shardPrefix('{}{verity}', 1, 3)).toThrow('no hash tag');
  });

  it('puts the shard in the tag Redis reads, the first one', () => {
    expect(shardPrefix('{a}{b}', 1, 2)).toBe('{a:1}{b}');
    expect(shardPrefix('x{a{b}c', 1, 2)).toBe('x{a{b:1}c');
  });
});

describe('QueueShards', () => {
  const shards = new QueueShards('{verity}', 3);

  it("routes every job of an execution to the execution's shard", () => {
    for (let i = 0; i < 50; i += 1) {
      const executionId = `exe_${i}`;
      const operationId = `op_${i * 7919}`;
      const home = shards.shardOfExecution(executionId);
      expect(shards.shardOf(JobName.ADVANCE_EXECUTION, { executionId })).toBe(home);
      for (const name of [
        JobName.DISPATCH_OPERATION,
        JobName.VERIFY_OPERATION,
        JobName.RECONCILE_OPERATION,
        JobName.OBSERVE_OPERATION,
        JobName.RECHECK_OPERATION,
      ] as const) {
        expect(shards.shardOf(name, { operationId, executionId })).toBe(home);
      }
    }
  });

  it('keeps the sweep on the home shard, and spreads webhook deliveries by their id', () => {
    expect(shards.shardOf(JobName.SWEEP, {})).toBe(HOME_SHARD);
    expect(shards.shardsOf(QueueName.SWEEP)).toEqual([HOME_SHARD]);
    expect(shards.shardsOf(QueueName.DISPATCH)).toEqual([0, 1, 2]);
    const seen = new Set<number>();
    for (let i = 0; i < 50; i += 1)
      seen.add(shards.shardOf(JobName.DELIVER_WEBHOOK, { deliveryId: `whd_${i}`, round: 0 }));
    expect([...seen].sort()).toEqual([0, 1, 2]);
  });

  it('consumes every shard unless told which, and the sweep only where its home shard is consumed', () => {
    expect(shards.consumed(QueueName.VERIFY)).toEqual([0, 1, 2]);
    const some = new QueueShards('{verity}', 3, [1, 2]);
    expect(some.consumed(QueueName.VERIFY)).toEqual([1, 2]);
    expect(some.consumed(QueueName.SWEEP)).toEqual([]);
    expect(
      QueueShards.of({ QUEUE_PREFIX: '{v}', QUEUE_SHARDS: 2, QUEUE_SHARDS_CONSUMED: [0] }).consumed(QueueName.SWEEP),
    ).toEqual([0]);
  });
});
