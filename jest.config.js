/** Every test talks to the real Postgres and Redis; see test/support for per-file databases and key prefixes. */
const moduleNameMapper = {
  '^@verity/(status-model|persistence|queues|connectors|sdk|platform)$': '<rootDir>/libs/$1/src',
  '^@verity/sdk/mcp$': '<rootDir>/libs/sdk/src/mcp',
  '^@verity/platform/tracing$': '<rootDir>/libs/platform/src/tracing',
  '^@verity/platform/config$': '<rootDir>/libs/platform/src/config',
};
const transform = { '^.+\\.ts$': ['ts-jest', { diagnostics: false }] };
module.exports = {
  // The node environment, and at the end of each file a check that it closed what it opened (test/support/test-environment.ts).
  testEnvironment: '<rootDir>/test/support/test-environment.ts',
  moduleFileExtensions: ['ts', 'js', 'json'],
  rootDir: '.',
  testMatch: ['<rootDir>/libs/**/*.spec.ts', '<rootDir>/apps/**/*.spec.ts', '<rootDir>/test/**/*.test.ts'],
  transform,
  moduleNameMapper,
  testTimeout: 60000,
  collectCoverageFrom: ['libs/status-model/src/**/*.ts'],
  coverageThreshold: { 'libs/status-model/src/': { lines: 100 } },
  // Three on two cores: a test file spends much of its time waiting on its stack's timers (settle windows, sweeps,
  // job locks); with two workers a CI run left the cores 10–35 % idle.
  maxWorkers: 3,
  // Every response from a test stack's API is checked against its /docs-json (a no-op where no Stack runs).
  setupFilesAfterEnv: ['<rootDir>/test/support/validate-responses.ts'],
};
