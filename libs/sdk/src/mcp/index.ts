export * from './server';
export * from './schema';
export * from './words';
