import type { DynamicModule } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { assertDatabaseReachable } from '@verity/persistence';
import { Tracing, VerityConfig, assertNoEviction, onShutdown, runMain, startProcess } from '@verity/platform';
import { QueueName } from './names';
import { serveWorkerOps } from './worker-ops';

export interface WorkerApp {
  name: 'dispatcher' | 'reconciler';
  /** Started by the app's first import (./tracing), before Nest, pg and ioredis were required; null when off. */
  tracing: Tracing | null;
  module: (config: VerityConfig) => DynamicModule;
  metricsPort: 'DISPATCHER_METRICS_PORT' | 'RECONCILER_METRICS_PORT';
  /** The queues this app consumes (their depth is on its /metrics). */
  queues: readonly QueueName[];
  /** Extra fields of the "ready" line. */
  ready?: (config: VerityConfig) => Record<string, unknown>;
}

/**
 * How a worker app (dispatcher, reconciler) runs: config validated first, crashes logged, Redis refused unless
 * eviction is off, Postgres required, the Nest context with its workers, its /metrics and /health port, and on SIGTERM the port closed
 * first (no new scrapes or probes), then the workers finish their jobs, then the spans are flushed. A failure to start
 * is one fatal JSON line and exit code 1.
 */
export function runWorkerApp(spec: WorkerApp): void {
  runMain(spec.name, () => start(spec));
}

async function start(spec: WorkerApp): Promise<void> {
  const { config, logger } = startProcess(spec.name);
  await assertNoEviction(config);
  await assertDatabaseReachable(config.DATABASE_URL);
  const app = await NestFactory.createApplicationContext(spec.module(config), { logger: ['error', 'warn'] });
  await app.init();
  // A port that cannot be had stops the process (the message names the variable), after its workers stop cleanly.
  const ops = await serveWorkerOps(app, spec.metricsPort, spec.queues).catch(async (error: unknown) => {
    await app.close();
    await spec.tracing?.shutdown();
    throw error;
  });
  logger.info({ ...spec.ready?.(config), metricsPort: ops?.port ?? null }, `${spec.name} ready`);
  onShutdown(
    logger,
    async () => {
      await ops?.close();
      await app.close();
      await spec.tracing?.shutdown();
    },
    config.SHUTDOWN_GRACE_MS,
  );
}
