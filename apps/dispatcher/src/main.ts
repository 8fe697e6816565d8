// First: tracing patches pg, ioredis and http as they are first required (see ./tracing).
import { tracing } from './tracing';
import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { assertNoEviction, createLogger, loadConfig, logCrashes, onShutdown, tracingOn } from '@verity/platform';
import { DispatcherModule } from './dispatcher.module';

async function bootstrap(): Promise<void> {
  const config = loadConfig();
  const logger = createLogger('dispatcher', config.LOG_LEVEL, tracingOn(config));
  logCrashes(logger);
  await assertNoEviction(config.REDIS_URL);
  const app = await NestFactory.createApplicationContext(DispatcherModule.forRoot(config), {
    logger: ['error', 'warn'],
  });
  await app.init();
  logger.info({ concurrency: config.WORKER_CONCURRENCY }, 'dispatcher ready');
  onShutdown(logger, async () => {
    await app.close();
    await tracing?.shutdown();
  });
}

bootstrap().catch((error: unknown) => {
  process.stderr.write(
    `${JSON.stringify({ level: 'fatal', app: 'dispatcher', msg: String((error as Error)?.message ?? error) })}\n`,
  );
  process.exit(1);
});
