import { Global, Inject, Module, OnApplicationShutdown } from '@nestjs/common';
import { VERITY_CONFIG, VerityConfig, createRedis } from '@verity/platform';
import type { Redis } from 'ioredis';
import { JobProducer } from './producer';

export const PRODUCER_REDIS = Symbol('PRODUCER_REDIS');

@Global()
@Module({
  providers: [
    {
      provide: PRODUCER_REDIS,
      inject: [VERITY_CONFIG],
      useFactory: (config: VerityConfig) => createRedis(config.REDIS_URL, 'producer', 'verity-producer'),
    },
    {
      provide: JobProducer,
      inject: [PRODUCER_REDIS, VERITY_CONFIG],
      useFactory: (redis: Redis, config: VerityConfig) => new JobProducer(redis, config.QUEUE_PREFIX),
    },
  ],
  exports: [JobProducer, PRODUCER_REDIS],
})
export class QueuesModule implements OnApplicationShutdown {
  constructor(
    private readonly producer: JobProducer,
    @Inject(PRODUCER_REDIS) private readonly redis: Redis,
  ) {}

  async onApplicationShutdown(): Promise<void> {
    await this.producer.close();
    this.redis.disconnect();
  }
}
