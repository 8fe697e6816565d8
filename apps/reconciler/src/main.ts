// First: tracing patches pg, ioredis and http as they are first required (see ./tracing).
import { tracing } from './tracing';
import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import {
  assertNoEviction,
  collectProcessMetrics,
  createLogger,
  loadConfig,
  logCrashes,
  onShutdown,
  tracingOn,
} from '@verity/platform';
import { serveWorkerOps } from '@verity/queues';
import { RECONCILER_QUEUES, ReconcilerModule } from './reconciler.module';

async function bootstrap(): Promise<void> {
  const config = loadConfig();
  const logger = createLogger('reconciler', config.LOG_LEVEL, tracingOn(config));
  logCrashes(logger);
  collectProcessMetrics();
  await assertNoEviction(config.REDIS_URL);
  const app = await NestFactory.createApplicationContext(ReconcilerModule.forRoot(config), {
    logger: ['error', 'warn'],
  });
  await app.init();
  // A port that cannot be had stops the process (the message names the variable), after its workers stop cleanly.
  const ops = await serveWorkerOps(app, 'RECONCILER_METRICS_PORT', RECONCILER_QUEUES).catch(async (error: unknown) => {
    await app.close();
    await tracing?.shutdown();
    throw error;
  });
  logger.info({ metricsPort: ops?.port ?? null }, 'reconciler ready');
  // The HTTP face closes first (no new scrapes or probes), then the workers finish their jobs.
  onShutdown(logger, async () => {
    await ops?.close();
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
