export * from './names';
export * from './producer';
export * from './queues.module';
export * from './worker.module';
export * from './watchdog';
export * from './sweep-schedule';
export * from './telemetry';
export * from './queue-worker';
