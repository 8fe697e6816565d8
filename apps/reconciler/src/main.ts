import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { assertNoEviction, createLogger, loadConfig, logCrashes, onShutdown } from '@verity/platform';
import { ReconcilerModule } from './reconciler.module';

async function bootstrap(): Promise<void> {
  const config = loadConfig();
  const logger = createLogger('reconciler', config.LOG_LEVEL);
  logCrashes(logger);
  await assertNoEviction(config.REDIS_URL);
  const app = await NestFactory.createApplicationContext(ReconcilerModule.forRoot(config), {
    logger: ['error', 'warn'],
  });
  await app.init();
  logger.info('reconciler ready');
  onShutdown(logger, () => app.close());
}

bootstrap().catch((error: unknown) => {
  process.stderr.write(
    `${JSON.stringify({ level: 'fatal', app: 'reconciler', msg: String((error as Error)?.message ?? error) })}\n`,
  );
  process.exit(1);
});
