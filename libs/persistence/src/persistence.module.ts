import { Global, Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { DataSource } from 'typeorm';
import { dataSourceOptions, takeAppDataSource } from './data-source';
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
      // The app's main opened it already (its first connection is the start-up check: openAppDataSource); a module
      // built without one (in a test) opens its own.
      dataSourceFactory: async (options) => takeAppDataSource() ?? new DataSource(options!),
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
