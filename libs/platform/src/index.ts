export * from './config';
export * from './logger';
export * from './redis';
export * from './ids';
export * from './shutdown';
export * from './platform.module';
export * from './runtime';
export * from './tracing';
