import { DynamicModule, Global, Module } from '@nestjs/common';
import { VERITY_CONFIG, VerityConfig, tracingOn } from './config';
import { createLogger } from './logger';

export const LOGGER = Symbol('LOGGER');

/** Config (validated once at boot) and the structured logger, for every app. */
@Global()
@Module({})
export class PlatformModule {
  static forRoot(app: string, config: VerityConfig): DynamicModule {
    return {
      module: PlatformModule,
      providers: [
        { provide: VERITY_CONFIG, useValue: config },
        { provide: LOGGER, useValue: createLogger(app, config.LOG_LEVEL, tracingOn(config)) },
      ],
      exports: [VERITY_CONFIG, LOGGER],
    };
  }
}
