// First: tracing patches pg, ioredis and http as they are first required (see ./tracing).
import { tracing } from './tracing';
import 'reflect-metadata';
import { runWorkerApp } from '@verity/queues';
import { DISPATCHER_QUEUES, DispatcherModule } from './dispatcher.module';

runWorkerApp({
  name: 'dispatcher',
  tracing,
  module: (config, dataSource, logger) => DispatcherModule.forRoot(config, dataSource, logger),
  metricsPort: 'DISPATCHER_METRICS_PORT',
  queues: DISPATCHER_QUEUES,
  ready: (config) => ({ concurrency: config.WORKER_CONCURRENCY }),
});
