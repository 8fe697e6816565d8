import {
  AuthFailureLimiter,
  createRedis,
  createRedisClient,
  failureScope,
  loadConfig,
  RedisClient,
} from '@verity/platform';
import { LocalRedisCluster } from '../../../../test/support/redis-cluster';
import { TEST_REDIS_URL, clearRedisPrefix, testQueuePrefix } from '../../../../test/support/services';
import { RequestAdmission } from './admission';
import { SharedRateLimiter } from './rate-limiter';

/** How long a case waits for Redis' answer before this process' own counts decide. */
const ANSWER_MS = 10_000;

/** Real Redis; the commands a call sends are counted on the client (each one is a round trip of its own). */
async function withAdmission(
  prefix: string,
  test: (parts: {
    redis: RedisClient;
    failures: AuthFailureLimiter;
    rate: SharedRateLimiter;
    admission: RequestAdmission;
    commandsOf: (call: () => Promise<unknown>) => Promise<string[]>;
  }) => Promise<void>,
): Promise<void> {
  const redis = createRedis(TEST_REDIS_URL, 'producer', 'admission-spec');
  // Redis is waited for longer than the API's 100 ms, which a loaded machine can outlast: these cases are about what
  // Redis decides (the one without Redis disconnects it, and is answered at once).
  const failures = new AuthFailureLimiter(redis, prefix, 3, ANSWER_MS);
  const rate = new SharedRateLimiter(redis, prefix, 2, ANSWER_MS);
  const admission = new RequestAdmission(redis, prefix, failures, ANSWER_MS);
  const commandsOf = async (call: () => Promise<unknown>) => {
    const sent = jest.spyOn(redis, 'sendCommand');
    try {
      await call();
      return sent.mock.calls.map(([command]) => command.name);
    } finally {
      sent.mockRestore();
    }
  };
  try {
    if (redis.status !== 'ready') await new Promise((ready) => redis.once('ready', ready));
    await test({ redis, failures, rate, admission, commandsOf });
  } finally {
    redis.disconnect();
    await clearRedisPrefix(prefix);
  }
}

describe('RequestAdmission: the address check and the rate-limit token in one round trip', () => {
  it('decides as the two separate calls do, with one command', async () => {
    const prefix = testQueuePrefix('admit');
    await withAdmission(prefix, async ({ failures, rate, admission, commandsOf }) => {
      // The script is loaded by the first call (EVALSHA, then EVAL once): counted from the second on.
      expect(await admission.admit('10.0.0.1', 'key_warm', rate)).toEqual({ blockedFor: 0, rateWait: 0 });

      let answer: unknown;
      const commands = await commandsOf(async () => {
        answer = await admission.admit('10.0.0.1', 'key_a', rate);
      });
      expect(answer).toEqual({ blockedFor: 0, rateWait: 0 });
      expect(commands).toEqual(['evalsha']);

      // The bucket holds 2: the second token is the last, and the separate call sees the same bucket empty.
      expect(await admission.admit('10.0.0.1', 'key_a', rate)).toEqual({ blockedFor: 0, rateWait: 0 });
      const third = await admission.admit('10.0.0.1', 'key_a', rate);
      expect(third.blockedFor).toBe(0);
      expect(third.rateWait).toBeGreaterThanOrEqual(1);
      expect(await rate.take('key_a')).toBeGreaterThanOrEqual(1);

      // An address that used its failures is refused before any token is taken.
      for (let i = 0; i < 3; i += 1) await failures.recordFailure('10.0.0.2');
      const blocked = await admission.admit('10.0.0.2', 'key_b', rate);
      expect(blocked.blockedFor).toBeGreaterThanOrEqual(1);
      expect(blocked.rateWait).toBe(0);
      expect(await failures.blockedFor('10.0.0.2')).toBe(blocked.blockedFor);
      // key_b's bucket is still full: its two tokens are there for another address.
      expect(await admission.admit('10.0.0.3', 'key_b', rate)).toEqual({ blockedFor: 0, rateWait: 0 });
      expect(await rate.take('key_b')).toBe(0);
      expect(await rate.take('key_b')).toBeGreaterThanOrEqual(1);
    });
  });

  it("decides by this process' own counts when Redis does not answer", async () => {
    const prefix = testQueuePrefix('admit-down');
    await withAdmission(prefix, async ({ redis, failures, rate, admission }) => {
      redis.disconnect();
      expect(await admission.admit('10.0.0.1', 'key_a', rate)).toEqual({ blockedFor: 0, rateWait: 0 });
      expect(await admission.admit('10.0.0.1', 'key_a', rate)).toEqual({ blockedFor: 0, rateWait: 0 });
      expect((await admission.admit('10.0.0.1', 'key_a', rate)).rateWait).toBeGreaterThanOrEqual(1);
      for (let i = 0; i < 3; i += 1) await failures.recordFailure('10.0.0.2');
      const blocked = await admission.admit('10.0.0.2', 'key_b', rate);
      expect(blocked.blockedFor).toBeGreaterThanOrEqual(1);
      expect(blocked.rateWait).toBe(0);
    });
  });

  it('AuthFailureLimiter.reserve checks and counts in one step: of guesses at once, no more than the limit are looked up', async () => {
    const prefix = testQueuePrefix('reserve');
    await withAdmission(prefix, async ({ redis, failures }) => {
      const answers = await Promise.all(Array.from({ length: 12 }, () => failures.reserve('10.0.0.4')));
      expect(answers.filter((a) => a.kind === 'reserved')).toHaveLength(3);
      // The other nine waited for room among the lookups in flight, found none, and were turned away unlooked-up.
      expect(answers.filter((a) => a.kind === 'busy')).toHaveLength(9);
      // A lookup that found its key frees its place; one more is then let through, no more.
      await failures.settle('10.0.0.4', true);
      expect((await failures.reserve('10.0.0.4')).kind).toBe('reserved');
      expect((await failures.reserve('10.0.0.4')).kind).toBe('busy');
      // The three in flight were guesses: three failures, and the address is blocked for the window.
      for (let i = 0; i < 3; i += 1) await failures.settle('10.0.0.4', false);
      const blocked = await failures.reserve('10.0.0.4');
      expect(blocked).toMatchObject({ kind: 'blocked' });
      expect(await failures.blockedFor('10.0.0.4')).toBeGreaterThanOrEqual(1);
      // And by this process' own count, in one step too, while Redis does not answer.
      redis.disconnect();
      const local = await Promise.all(Array.from({ length: 12 }, () => failures.reserve('10.0.0.5')));
      expect(local.filter((a) => a.kind === 'reserved')).toHaveLength(3);
      expect(local.filter((a) => a.kind === 'busy')).toHaveLength(9);
    });
  });

  it('valid keys looked up at once are no failures: more of them than the limit all pass, and the address stays open', async () => {
    const prefix = testQueuePrefix('reserve-valid');
    await withAdmission(prefix, async ({ failures }) => {
      // Twelve keys not known yet from one address (a cold cache, clients behind one NAT), each found after a lookup
      // of a few milliseconds: a lookup that waits for room gets it when one of them ends.
      const lookUpFound = async () => {
        const reservation = await failures.reserve('10.0.0.6');
        if (reservation.kind !== 'reserved') return reservation.kind;
        await new Promise((resolve) => setTimeout(resolve, 20));
        await failures.settle('10.0.0.6', true);
        return reservation.kind;
      };
      const answers = await Promise.all(Array.from({ length: 12 }, lookUpFound));
      expect(answers).toEqual(Array.from({ length: 12 }, () => 'reserved'));
      expect(await failures.blockedFor('10.0.0.6')).toBe(0);
      expect((await failures.reserve('10.0.0.6')).kind).toBe('reserved');
    });
  });

  it('asks twice when the prefix has no hash tag (the two keys could sit on two cluster nodes)', async () => {
    const prefix = `vt-untagged-${Date.now()}`;
    await withAdmission(prefix, async ({ rate, admission, commandsOf }) => {
      await admission.admit('10.0.0.1', 'key_warm', rate);
      const commands = await commandsOf(() => admission.admit('10.0.0.1', 'key_a', rate));
      expect(commands).toEqual(['evalsha', 'evalsha']);
    });
  });
});

describe('RequestAdmission on a real Redis Cluster (three nodes)', () => {
  let cluster: LocalRedisCluster;
  beforeAll(async () => {
    cluster = await LocalRedisCluster.start();
  }, 60_000);
  afterAll(async () => cluster?.stop());

  it('is answered by the cluster (both keys in the prefix slot), so every API process shares the counts', async () => {
    const prefix = testQueuePrefix('admit-cluster');
    const config = loadConfig({ REDIS_CLUSTER_NODES: cluster.nodeList, QUEUE_PREFIX: prefix });
    // Two API processes: each its own connection and its own local fallback counts. Each waits for the cluster far
    // longer than the API's 100 ms: on a loaded machine a cluster's answer took longer, the local counts decided, and
    // the test read that as the cluster not answering — it asks where the answer comes from, not how fast.
    const processes = [0, 1].map(() => {
      const redis = createRedisClient(config, 'producer', 'admission-cluster-spec');
      const failures = new AuthFailureLimiter(redis, prefix, 3, ANSWER_MS);
      return {
        redis,
        failures,
        rate: new SharedRateLimiter(redis, prefix, 2, ANSWER_MS),
        admission: new RequestAdmission(redis, prefix, failures, ANSWER_MS),
      };
    });
    const [a, b] = processes;
    try {
      // A producer connection has no offline queue: a command before it is ready would fail (and fall back).
      for (const { redis } of processes) {
        if (redis.status !== 'ready') await new Promise((ready) => redis.once('ready', ready));
      }
      // A bucket of 2 for the key across both: were either answered by its own local bucket (the fallback when Redis
      // does not answer, e.g. CROSSSLOT), the third admission would pass.
      expect(await a.admission.admit('10.0.0.1', 'key_a', a.rate)).toEqual({ blockedFor: 0, rateWait: 0 });
      expect(await b.admission.admit('10.0.0.1', 'key_a', b.rate)).toEqual({ blockedFor: 0, rateWait: 0 });
      expect((await a.admission.admit('10.0.0.1', 'key_a', a.rate)).rateWait).toBeGreaterThanOrEqual(1);
      // Failures counted by one process block the address in the other.
      for (let i = 0; i < 3; i += 1) await a.failures.recordFailure('10.0.0.2');
      expect((await b.admission.admit('10.0.0.2', 'key_b', b.rate)).blockedFor).toBeGreaterThanOrEqual(1);
    } finally {
      for (const { redis } of processes) redis.disconnect();
    }
  });
});

describe('failureScope: what one client’s failed authentications are counted against', () => {
  it('an IPv4 address as it is (also IPv4-mapped), an IPv6 address by its /64 in one spelling', () => {
    expect(failureScope('203.0.113.7')).toBe('203.0.113.7');
    expect(failureScope('::ffff:203.0.113.7')).toBe('203.0.113.7');
    expect(failureScope('2001:db8:7:7::1')).toBe('2001:db8:7:7::/64');
    expect(failureScope('2001:0DB8:0007:0007:ffff:0:0:1')).toBe('2001:db8:7:7::/64');
    expect(failureScope('2001:db8:7:8::1')).toBe('2001:db8:7:8::/64');
    expect(failureScope('::1')).toBe('0:0:0:0::/64');
    expect(failureScope('unknown')).toBe('unknown');
  });
});
