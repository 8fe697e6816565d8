// First: tracing patches pg, ioredis and http as they are first required (see ./tracing).
import { tracing } from './tracing';
import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { assertNoEviction, createLogger, loadConfig, logCrashes, onShutdown, tracingOn } from '@verity/platform';
import { ReconcilerModule } from './reconciler.module';

async function bootstrap(): Promise<void> {
  const config = loadConfig();
  const logger = createLogger('reconciler', config.LOG_LEVEL, tracingOn(config));
  logCrashes(logger);
  await assertNoEviction(config.REDIS_URL);
  const app = await NestFactory.createApplicationContext(ReconcilerModule.forRoot(config), {
    logger: ['error', 'warn'],
  });
  await app.init();
  logger.info('reconciler ready');
  onShutdown(logger, async () => {
    await app.close();
    await tracing?.shutdown();
  });
}

bootstrap().catch((error: unknown) => {
  process.stderr.write(
    `${JSON.stringify({ level: 'fatal', app: 'reconciler', msg: String((error as Error)?.message ?? error) })}\n`,
  );
  process.exit(1);
});
