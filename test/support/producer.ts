import { createRedis } from '@verity/platform';
import { JobProducer } from '@verity/queues';
import { type RedisLink, redisLink } from './redis-link';
import { TEST_REDIS_URL, clearRedisPrefix, testQueuePrefix } from './services';

export interface ProducerSetup {
  producer: JobProducer;
  redis: ReturnType<typeof createRedis>;
  prefix: string;
}

/**
 * A producer's command timeout for a test whose subject is not that timeout: the product's 2 s is met by a shared test
 * Redis on a CI runner with a load average many times its cores (seen as "Command timed out" in a test of re-arming).
 * Still finite, so a Redis that never answers fails the command, not only the test's own timeout.
 */
export const PATIENT_COMMAND_TIMEOUT_MS = 10_000;

/** Gives a producer's connection a command timeout for a loaded test machine (the product's default stays). */
export function patientCommands(redis: ReturnType<typeof createRedis>): ReturnType<typeof createRedis> {
  redis.options.commandTimeout = PATIENT_COMMAND_TIMEOUT_MS;
  return redis;
}

/**
 * A producer on a fresh key prefix of the test Redis (or of the Redis behind `url`, a link a test can cut), closed and
 * its keys removed after `work`, pass or fail. `patient`: its commands get PATIENT_COMMAND_TIMEOUT_MS.
 */
export async function withProducer(
  label: string,
  work: (setup: ProducerSetup) => Promise<void>,
  options: { url?: string; onEnqueueFailure?: ConstructorParameters<typeof JobProducer>[2]; patient?: boolean } = {},
): Promise<void> {
  const prefix = testQueuePrefix(label);
  const redis = createRedis(options.url ?? TEST_REDIS_URL, 'producer', `${label}-spec`);
  if (options.patient) patientCommands(redis);
  const producer = new JobProducer(redis, prefix, options.onEnqueueFailure);
  try {
    await work({ producer, redis, prefix });
  } finally {
    await producer.close();
    disconnectForGood(redis);
    await clearRedisPrefix(prefix);
  }
}

/** withProducer over a link to the test Redis that `work` can cut, hold and mend; the link is closed after, pass or fail. */
export async function withProducerOnLink(
  label: string,
  work: (setup: ProducerSetup & { link: RedisLink }) => Promise<void>,
): Promise<void> {
  const link = await redisLink();
  try {
    await withProducer(label, (setup) => work({ ...setup, link }), { url: link.url });
  } finally {
    await link.sever();
  }
}

/**
 * Ends a client, unless a test already did. ioredis, asked to disconnect, ends its last socket and arms a timer
 * (disconnectTimeout, 2 s) that only that socket's 'close' clears: on a socket already closed — a client ended before,
 * or reconnecting after its link was cut — it runs its whole 2 s, past the end of the file (the check at its end
 * waits as long). A cut link is mended before its client is ended.
 */
function disconnectForGood(redis: ReturnType<typeof createRedis>): void {
  if (redis.status !== 'end') redis.disconnect();
}

/**
 * A producer on a fresh key prefix of the test Redis for every test of the enclosing describe: made before the first
 * test (by a `beforeAll` registered here, so one declared after this call can use it), closed and its keys removed
 * after the last. Read `producer` and `redis` only inside hooks and tests.
 */
export function producerDuringDescribe(label: string): ProducerSetup {
  const prefix = testQueuePrefix(label);
  let made: { producer: JobProducer; redis: ReturnType<typeof createRedis> } | undefined;
  beforeAll(() => {
    const redis = createRedis(TEST_REDIS_URL, 'producer', `${label}-spec`);
    made = { redis, producer: new JobProducer(redis, prefix) };
  });
  afterAll(async () => {
    await made?.producer.close();
    if (made) disconnectForGood(made.redis);
    await clearRedisPrefix(prefix);
  });
  const ready = () => {
    if (!made) throw new Error('the producer is used before its beforeAll ran');
    return made;
  };
  return {
    prefix,
    get producer() {
      return ready().producer;
    },
    get redis() {
      return ready().redis;
    },
  };
}
