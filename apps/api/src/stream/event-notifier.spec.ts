import { TenantSecretsCache } from '@verity/connectors';
import { SecretsCipher, deleteConnectorSecret, writeConnectorSecret } from '@verity/persistence';
import { createLogger, createRedis, loadConfig } from '@verity/platform';
import type { RedisClient } from '@verity/platform';
import { eventsChannel } from '@verity/queues';
import { execFileSync } from 'node:child_process';
import { listenSessions, terminateSession } from '../../../../test/support/listen-sessions';
import { StallablePostgres } from '../../../../test/support/stallable-postgres';
import { useTestDatabase } from '../../../../test/support/test-database';
import { ADMIN_DATABASE_URL, TEST_REDIS_URL, testQueuePrefix } from '../../../../test/support/services';
import { waitFor } from '../../../../test/support/stack';
import type { ApiKeyService } from '../auth/api-key.service';
import { EventNotifier } from './event-notifier.service';

/** The key cache the notifier tells about revocations; nothing here revokes a key. */
const KEYS = { invalidateAll: () => undefined, setRevocationsLive: () => undefined } as unknown as ApiKeyService;

/**
 * The API reads the event announcements only while one of its streams listens (real Redis, real Postgres for the
 * revocation LISTEN): subscribed with the first listener, unsubscribed with the last, and still so after the connection
 * was lost and came back — ioredis resubscribes what it had on its own, which must not outlive the last listener.
 */
describe('EventNotifier (real Redis)', () => {
  const prefix = testQueuePrefix('event-notifier');
  const channel = eventsChannel(prefix);
  const config = loadConfig({ REDIS_URL: TEST_REDIS_URL, DATABASE_URL: ADMIN_DATABASE_URL, QUEUE_PREFIX: prefix });
  let notifier: EventNotifier;
  let redis: RedisClient;
  const listeners = async () => Number(((await redis.pubsub('NUMSUB', channel)) as [string, number])[1]);
  /** The notifier's own subscriber connection (private: the test breaks it on purpose). */
  const subscriber = () => (notifier as unknown as { subscriber: RedisClient }).subscriber;

  beforeAll(async () => {
    redis = createRedis(TEST_REDIS_URL, 'producer', 'event-notifier-spec');
    // A producer connection fails its commands until it is ready (no offline queue): the first PUBSUB must wait for
    // it, or a slow connect under load fails the test with "Stream isn't writeable".
    await waitFor(
      async () => redis.status,
      (status) => status === 'ready',
    );
    notifier = new EventNotifier(config, createLogger('event-notifier-spec', 'silent'), KEYS, new TenantSecretsCache());
    await notifier.onModuleInit();
  });
  afterAll(async () => {
    await notifier.onApplicationShutdown();
    redis.disconnect();
  });

  it('subscribes with the first listener and unsubscribes with the last; an announcement wakes its execution only', async () => {
    await waitFor(
      async () => subscriber().status,
      (status) => status === 'ready',
    );
    expect(await listeners()).toBe(0);
    const woken: string[] = [];
    const offA = notifier.subscribe('exe_a', () => woken.push('a'));
    const offB = notifier.subscribe('exe_b', () => woken.push('b'));
    await waitFor(listeners, (n) => n === 1);
    await waitFor(
      async () => notifier.listening,
      (listening) => listening,
    );
    // The subscription itself wakes every listener once (whatever was committed before it took effect).
    await waitFor(
      async () => [...woken].sort().join(),
      (seen) => seen === 'a,b',
    );
    woken.length = 0;
    await redis.publish(channel, 'exe_a,exe_other');
    await waitFor(
      async () => woken.length,
      (n) => n >= 1,
    );
    expect(woken).toEqual(['a']);
    offA();
    // One listener left: still subscribed.
    await redis.publish(channel, 'exe_b');
    await waitFor(
      async () => woken.length,
      (n) => n >= 2,
    );
    expect(woken).toEqual(['a', 'b']);
    expect(await listeners()).toBe(1);
    offB();
    await waitFor(listeners, (n) => n === 0);
    expect(notifier.listening).toBe(false);
  });

  it('after the connection was lost while subscribed, the last listener leaving meanwhile unsubscribes it again', async () => {
    const off = notifier.subscribe('exe_c', () => undefined);
    await waitFor(listeners, (n) => n === 1);
    // The connection's 'close' (heard after the notifier's own): from then until it is ready again it is down.
    const closed = new Promise<void>((resolve) => subscriber().once('close', () => resolve()));
    subscriber().disconnect(true);
    // The listener leaves while the connection is down; ioredis resubscribes on its own when it is back.
    await closed;
    expect(subscriber().status).not.toBe('ready');
    off();
    await waitFor(
      async () => subscriber().status,
      (status) => status === 'ready',
    );
    await waitFor(listeners, (n) => n === 0);
    // And with a listener again after that, announcements arrive.
    let woken = 0;
    const offAgain = notifier.subscribe('exe_d', () => (woken += 1));
    await waitFor(listeners, (n) => n === 1);
    await redis.publish(channel, 'exe_d');
    await waitFor(
      async () => woken,
      (n) => n >= 1,
    );
    offAgain();
    await waitFor(listeners, (n) => n === 0);
  });
});

/**
 * The revocation LISTEN connection is opened again after it was lost. A shutdown while that reconnect was under way
 * ended only the connection that was live (none): the new one went on to LISTEN and kept the process' session open.
 */
describe('EventNotifier shut down while its LISTEN connection reconnects (real Postgres)', () => {
  let postgres: StallablePostgres;
  beforeAll(async () => {
    postgres = await StallablePostgres.start('notifier-stop');
  }, 60_000);
  afterAll(async () => postgres?.stop());

  /** This process' open connections to the private server (only this test connects to its port). */
  const connectionsToServer = async () =>
    execFileSync('ss', ['-tnH', 'state', 'established', `( dport = :${postgres.port} )`])
      .toString()
      .split('\n')
      .filter(Boolean).length;

  it('ends the connection being opened: no LISTEN session outlives the shutdown', async () => {
    const config = loadConfig({
      REDIS_URL: TEST_REDIS_URL,
      DATABASE_URL: postgres.url,
      DATABASE_QUERY_TIMEOUT_MS: '500',
      QUEUE_PREFIX: testQueuePrefix('notifier-stop'),
    });
    const notifier = new EventNotifier(
      config,
      createLogger('event-notifier-spec', 'silent'),
      KEYS,
      new TenantSecretsCache(),
    );
    await notifier.onModuleInit();
    const [listening] = await waitFor(
      () => listenSessions(postgres.url),
      (pids) => pids.length === 1,
    );
    // The LISTEN session is ended, and the server stops answering before the reconnect (a second later): its
    // connection is made (the kernel accepts it) but its start-up gets no answer — under way when the process stops.
    await terminateSession(postgres.url, listening);
    await waitFor(connectionsToServer, (n) => n === 0);
    postgres.stall();
    try {
      await waitFor(connectionsToServer, (n) => n === 1);
      await notifier.onApplicationShutdown();
      // Ended by the shutdown, or never (the server answers nothing while stalled): bounded only by the test's timeout.
      await waitFor(connectionsToServer, (n) => n === 0, Infinity);
    } finally {
      postgres.resume();
    }
    expect(await listenSessions(postgres.url)).toEqual([]);
  }, 30_000);
});

/**
 * The secret values kept for answers (TenantSecretsCache) follow the same LISTEN connection (real Postgres): a write or
 * a delete of a tenant's secret drops that tenant's values in the process; the connection lost, nothing is kept until
 * it listens again.
 */
describe("EventNotifier and the tenant's secret values kept for answers (real Postgres)", () => {
  const db = useTestDatabase('notifiersecrets', ['acme', 'other']);
  const cipher = new SecretsCipher(undefined);
  let notifier: EventNotifier;
  const cache = new TenantSecretsCache<string>();
  let reads = 0;
  const read = (value: string) => async () => {
    reads += 1;
    return { value, size: value.length };
  };

  beforeAll(async () => {
    const config = loadConfig({
      REDIS_URL: TEST_REDIS_URL,
      DATABASE_URL: db.url,
      QUEUE_PREFIX: testQueuePrefix('notifier-secrets'),
    });
    notifier = new EventNotifier(config, createLogger('event-notifier-spec', 'silent'), KEYS, cache);
    await notifier.onModuleInit();
  });
  afterAll(async () => notifier?.onApplicationShutdown());

  it("a secret's write and delete, committed elsewhere, drop that tenant's values here", async () => {
    await cache.get('acme', read('none'));
    await cache.get('other', read('none'));
    await cache.get('acme', read('none'));
    expect(reads).toBe(2);
    await writeConnectorSecret(db.dataSource.manager, cipher, 'acme', 'http', 'token', 'token-value-1', 'key_t');
    await waitFor(
      async () => cache.get('acme', read('token-value-1')),
      (value) => value === 'token-value-1',
    );
    // The other tenant's values stay kept.
    const before = reads;
    expect(await cache.get('other', read('changed'))).toBe('none');
    expect(reads).toBe(before);
    expect(await deleteConnectorSecret(db.dataSource.manager, 'acme', 'http', 'token')).toBe(true);
    await waitFor(
      async () => cache.get('acme', read('none again')),
      (value) => value === 'none again',
    );
  });

  it('the very next answer after a change committed elsewhere is read anew; a change rolled back drops nothing', async () => {
    // What is kept for acme (read now, or by the test before).
    const kept = await cache.get('acme', read('kept'));
    expect(await cache.get('acme', read('not read'))).toBe(kept);
    // Rolled back: its NOTIFY is never sent, and the round trip before the next answer hears nothing.
    const runner = db.dataSource.createQueryRunner();
    await runner.connect();
    try {
      await runner.startTransaction();
      await writeConnectorSecret(runner.manager, cipher, 'acme', 'http', 'rolled', 'rolled-back-1', 'key_t');
      await runner.rollbackTransaction();
    } finally {
      await runner.release();
    }
    const before = reads;
    expect(await cache.get('acme', read('not read'))).toBe(kept);
    expect(reads).toBe(before);
    // Committed: the next answer, with no wait, reads the values of now.
    await writeConnectorSecret(db.dataSource.manager, cipher, 'acme', 'http', 'token', 'token-value-2', 'key_t');
    expect(await cache.get('acme', read('token-value-2'))).toBe('token-value-2');
    expect(await deleteConnectorSecret(db.dataSource.manager, 'acme', 'http', 'token')).toBe(true);
    expect(await cache.get('acme', read('none again'))).toBe('none again');
  });

  it('its LISTEN session is found after the round trip kept values wait for, as after its LISTEN', async () => {
    await cache.get('acme', read('kept'));
    // A second answer uses what is kept after a round trip (a `SELECT 1`) on the LISTEN session: its last statement.
    await cache.get('acme', read('not read'));
    const listening = (notifier as unknown as { client: { processID: number } | null }).client!.processID;
    expect(await listenSessions(db.url)).toEqual([listening]);
  });

  it('the LISTEN connection lost: nothing is kept, nor used, until it listens again', async () => {
    await cache.get('acme', read('kept'));
    const listening = (notifier as unknown as { client: { processID: number } | null }).client!.processID;
    await terminateSession(db.url, listening);
    // Lost: what was kept is dropped at once, and what is read meanwhile is not kept.
    await waitFor(
      async () => cache.tenants,
      (n) => n === 0,
      10_000,
      1,
    );
    // Listening again (a new session), values are kept again.
    await waitFor(
      async () => (notifier as unknown as { client: { processID: number } | null }).client?.processID,
      (pid) => pid !== undefined && pid !== listening,
    );
    await cache.get('acme', read('after'));
    expect(await cache.get('acme', read('not read'))).toBe('after');
  });
});
