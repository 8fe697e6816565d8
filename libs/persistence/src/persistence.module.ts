import { Global, Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { dataSourceOptions } from './data-source';
import { SecretsCipher } from './secrets-cipher';
import { TransitionService } from './transition.service';

@Global()
@Module({
  imports: [
    TypeOrmModule.forRootAsync({
      inject: [VERITY_CONFIG],
      useFactory: (config: VerityConfig) => {
        return {
          ...dataSourceOptions(config.DATABASE_URL, config.DATABASE_POOL_SIZE, config.DATABASE_QUERY_TIMEOUT_MS),
          // Fail fast at boot; the caller reports which service is missing.
          retryAttempts: 0,
        };
      },
    }),
  ],
  providers: [
    TransitionService,
    {
      provide: SecretsCipher,
      inject: [VERITY_CONFIG],
      useFactory: (config: VerityConfig) => new SecretsCipher(config.SECRETS_KEY),
    },
  ],
  exports: [TransitionService, SecretsCipher],
})
export class PersistenceModule {}
