export * from './operation';
export * from './execution';
export * from './errors';
export * from './validate';
export * from './effects';
export * from './export';
