import { Global, Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { dataSourceOptions } from './data-source';
import { useSecretsKey } from './secrets-cipher';
import { TransitionService } from './transition.service';

@Global()
@Module({
  imports: [
    TypeOrmModule.forRootAsync({
      inject: [VERITY_CONFIG],
      useFactory: (config: VerityConfig) => {
        useSecretsKey(config.SECRETS_KEY);
        return {
          ...dataSourceOptions(config.DATABASE_URL, config.DATABASE_POOL_SIZE),
          // Fail fast at boot; the caller reports which service is missing.
          retryAttempts: 0,
        };
      },
    }),
  ],
  providers: [TransitionService],
  exports: [TransitionService],
})
export class PersistenceModule {}
