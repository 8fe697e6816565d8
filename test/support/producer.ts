import { createRedis } from '@verity/platform';
import { JobProducer } from '@verity/queues';
import { TEST_REDIS_URL, clearRedisPrefix, testQueuePrefix } from './services';

export interface ProducerSetup {
  producer: JobProducer;
  redis: ReturnType<typeof createRedis>;
  prefix: string;
}

/**
 * A producer on a fresh key prefix of the test Redis (or of the Redis behind `url`, a link a test can cut), closed and
 * its keys removed after `work`, pass or fail.
 */
export async function withProducer(
  label: string,
  work: (setup: ProducerSetup) => Promise<void>,
  options: { url?: string; onEnqueueFailure?: ConstructorParameters<typeof JobProducer>[2] } = {},
): Promise<void> {
  const prefix = testQueuePrefix(label);
  const redis = createRedis(options.url ?? TEST_REDIS_URL, 'producer', `${label}-spec`);
  const producer = new JobProducer(redis, prefix, options.onEnqueueFailure);
  try {
    await work({ producer, redis, prefix });
  } finally {
    await producer.close();
    redis.disconnect();
    await clearRedisPrefix(prefix);
  }
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
    made?.redis.disconnect();
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
