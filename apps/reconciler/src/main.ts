// First: tracing patches pg, ioredis and http as they are first required (see ./tracing).
import { tracing } from './tracing';
import 'reflect-metadata';
import { runWorkerApp } from '@verity/queues';
import { RECONCILER_QUEUES, ReconcilerModule } from './reconciler.module';

runWorkerApp({
  name: 'reconciler',
  tracing,
  module: (config, dataSource, logger) => ReconcilerModule.forRoot(config, dataSource, logger),
  metricsPort: 'RECONCILER_METRICS_PORT',
  queues: RECONCILER_QUEUES,
});
