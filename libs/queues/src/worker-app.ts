import type { DynamicModule, INestApplicationContext } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { NestFactory } from '@nestjs/core';
import { openAppDataSource } from '@verity/persistence';
import {
  Logger,
  StopDeadline,
  Tracing,
  VerityConfig,
  assertNoEviction,
  onShutdown,
  runMain,
  startProcess,
  stopWhileStarting,
} from '@verity/platform';
import { QueueName } from './names';
import { serveWorkerOps } from './worker-ops';

export interface WorkerApp {
  name: 'dispatcher' | 'reconciler';
  /** Started by the app's first import (./tracing), before Nest, pg and ioredis were required; null when off. */
  tracing: Tracing | null;
  /** `dataSource`: the app's pool, opened before Nest builds the module; `logger`: the process's one logger. */
  module: (config: VerityConfig, dataSource: DataSource, logger: Logger) => DynamicModule;
  metricsPort: 'DISPATCHER_METRICS_PORT' | 'RECONCILER_METRICS_PORT';
  /** The queues this app consumes (their depth is on its /metrics). */
  queues: readonly QueueName[];
  /** Extra fields of the "ready" line. */
  ready?: (config: VerityConfig) => Record<string, unknown>;
}

/**
 * How a worker app (dispatcher, reconciler) runs: config validated first, crashes logged, Redis refused unless
 * eviction is off, Postgres required, the Nest context with its workers, its /metrics and /health port, and on SIGTERM
 * the port closed first (no new scrapes or probes), then the workers finish their jobs, then the spans are flushed. A
 * failure to start is one fatal JSON line and exit code 1.
 */
export function runWorkerApp(spec: WorkerApp): void {
  runMain(spec.name, () => start(spec));
}

async function start(spec: WorkerApp): Promise<void> {
  const { config, logger } = startProcess(spec.name);
  // Until its workers are built nothing runs here: a signal stops it at once (Node's default ended it by the signal,
  // no exit code, nothing logged).
  const starting = stopWhileStarting(logger);
  await assertNoEviction(config);
  // The app's own pool (its first session is the check that Postgres can be used), its statements bounded by the
  // stop's deadline once a stop begins.
  const stopDeadline = new StopDeadline();
  const dataSource = await openAppDataSource(config, stopDeadline);
  // Nest builds the workers, which take jobs at once, inside createApplicationContext (it runs the app's init): from
  // here a signal is the orderly stop, begun once the app is up.
  starting();
  let app: INestApplicationContext | undefined;
  const up = (async () => {
    const context = await NestFactory.createApplicationContext(spec.module(config, dataSource, logger), {
      logger: ['error', 'warn'],
    });
    app = context;
    // A port that cannot be had stops the process (the message names the variable), after its workers stop cleanly.
    return await serveWorkerOps(context, spec.metricsPort, spec.queues).catch(async (error: unknown) => {
      await context.close();
      await spec.tracing?.shutdown();
      throw error;
    });
  })();
  onShutdown(
    logger,
    async () => {
      const ops = await up.catch(() => undefined);
      // A start that failed has closed what it built and exits 1 itself (runMain).
      if (ops === undefined) return new Promise<void>(() => undefined);
      await ops?.close();
      await app?.close();
      await spec.tracing?.shutdown();
    },
    config.SHUTDOWN_GRACE_MS,
    stopDeadline,
  );
  const ops = await up;
  logger.info({ ...spec.ready?.(config), metricsPort: ops?.port ?? null }, `${spec.name} ready`);
}
