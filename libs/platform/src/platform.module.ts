import { DynamicModule, Global, Module } from '@nestjs/common';
import { VERITY_CONFIG, VerityConfig, tracingOn } from './config';
import { Logger, createLogger } from './logger';

export const LOGGER = Symbol('LOGGER');

/** Config (validated once at boot) and the structured logger, for every app. */
@Global()
@Module({})
export class PlatformModule {
  /**
   * `logger`: the process's own (startProcess), so that the process has one log destination, the one its exit waits
   * for (logsWritten); a new one where none is given (a test that builds a module alone).
   */
  static forRoot(app: string, config: VerityConfig, logger?: Logger): DynamicModule {
    return {
      module: PlatformModule,
      providers: [
        { provide: VERITY_CONFIG, useValue: config },
        { provide: LOGGER, useValue: logger ?? createLogger(app, config.LOG_LEVEL, tracingOn(config)) },
      ],
      exports: [VERITY_CONFIG, LOGGER],
    };
  }
}
