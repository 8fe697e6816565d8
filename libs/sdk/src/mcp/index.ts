export * from './server';
export * from './schema';
export * from './words';
export * from './request-id';
