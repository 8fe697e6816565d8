import { TransitionService, ensureTenant } from '@verity/persistence';
import { createRedis, createRedisClient, loadConfig } from '@verity/platform';
import { ExecutionStatus } from '@verity/status-model';
import { insertTestExecution } from '../../../test/support/fixtures';
import {
  TEST_REDIS_URL,
  TestDatabase,
  clearRedisPrefix,
  createTestDatabase,
  testQueuePrefix,
} from '../../../test/support/services';
import { eventsChannel } from './names';
import { JobProducer } from './producer';
import { QueuesModule } from './queues.module';
import { QueueShards } from './shards';

/**
 * Committed events are announced on Redis a couple of milliseconds late (announcements coalesce into one PUBLISH).
 * At shutdown those still waiting were dropped: the streams learned of the last moves only at their next poll.
 */
describe('event announcements at shutdown (real Postgres and Redis)', () => {
  let db: TestDatabase;
  const prefix = testQueuePrefix('announce');

  beforeAll(async () => {
    db = await createTestDatabase('announce');
    await ensureTenant(db.dataSource.manager, 'acme');
  });
  afterAll(async () => {
    await db.drop();
    await clearRedisPrefix(prefix);
  });

  it('publishes what was announced just before the module shut down', async () => {
    const config = loadConfig({ REDIS_URL: TEST_REDIS_URL, QUEUE_PREFIX: prefix });
    const redis = createRedisClient(config, 'producer', 'announce-test-producer');
    const queues = new QueuesModule(new JobProducer(redis, QueueShards.of(config)), redis, config, db.dataSource);
    const subscriber = createRedis(TEST_REDIS_URL, 'worker', 'announce-test-subscriber');
    // The test's own connection: its PUBLISH after the shutdown reaches the subscriber after anything the module
    // published before the shutdown ended (one Redis, one subscriber connection: messages come in the order published).
    const after = createRedis(TEST_REDIS_URL, 'worker', 'announce-test-after');
    const AFTER_SHUTDOWN = 'published after the shutdown';
    try {
      await subscriber.subscribe(eventsChannel(prefix));
      // Every message up to the test's own: what the module published before it stopped.
      const heardBefore: string[] = [];
      const heard = new Promise<string>((resolve) =>
        subscriber.on('message', (_channel, ids: string) => {
          if (ids === AFTER_SHUTDOWN) resolve(heardBefore.join(','));
          else heardBefore.push(ids);
        }),
      );
      const id = await insertTestExecution(db.dataSource.manager, 'acme', { operations: [] });
      // Announcing from here on: the move below is the one thing announced.
      queues.onModuleInit();
      const moved = await new TransitionService().execution(db.dataSource.manager, {
        executionId: id,
        from: ExecutionStatus.CREATED,
        to: ExecutionStatus.VALIDATING,
      });
      expect(moved.won).toBe(true);
      // At once, before the announcement's coalescing timer could fire.
      await queues.onApplicationShutdown();
      // Published before the connection closed, it arrives before the test's own message; dropped, nothing does.
      await after.publish(eventsChannel(prefix), AFTER_SHUTDOWN);
      expect((await heard).split(',')).toContain(id);
    } finally {
      after.disconnect();
      subscriber.disconnect();
    }
  });
});
