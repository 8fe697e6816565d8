import { DynamicModule, Global, Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { DataSource } from 'typeorm';
import { dataSourceOptions } from './data-source';
import { SecretsCipher } from './secrets-cipher';
import { TransitionService } from './transition.service';

/**
 * Postgres for an app's Nest modules. `opened`: the app's DataSource its main opened already (openAppDataSource: its
 * first connection is the start-up check, and its pg clients know the process's stop deadline); a module built without
 * one (in a test) opens its own.
 */
@Global()
@Module({})
export class PersistenceModule {
  static forRoot(opened?: DataSource): DynamicModule {
    return {
      module: PersistenceModule,
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
          dataSourceFactory: async (options) => opened ?? new DataSource(options!),
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
    };
  }
}
