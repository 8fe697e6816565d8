/** Every test talks to the real Postgres and Redis; see test/support for per-file databases and key prefixes. */
const moduleNameMapper = {
  '^@verity/(status-model|persistence|queues|connectors|sdk|platform)$': '<rootDir>/libs/$1/src',
  '^@verity/sdk/mcp$': '<rootDir>/libs/sdk/src/mcp',
  // One module of a library without the rest of its index (Nest, zod, the platform's index: ~0.3 s of CPU for a test
  // file): libs/persistence's data source and keys import the platform's so, and a test stack or a test that only
  // makes keys loads them without Nest.
  '^@verity/(platform|persistence)/(.+)$': '<rootDir>/libs/$1/src/$2',
};
const transform = { '^.+\\.ts$': ['ts-jest', { diagnostics: false }] };
module.exports = {
  // The node environment, and at the end of each file a check that it closed what it opened
  // (test/support/test-environment.ts).
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
  // How long jest waits for a worker to exit at the end of a run before it kills it and warns "A worker process has
  // failed to exit gracefully". Its 500 ms is less than a worker of the e2e files takes to end with nothing left
  // open: its event loop is empty 1–50 ms after jest asks it to stop, then Node disposes of V8's heap (~200 MB, one
  // munmap and TLB flush per page: ~150 ms of CPU), which took 0.4–1.9 s on two cores shared at load 8–24. What a test
  // file leaves open is found by the file's own check instead (test/support/test-environment.ts), and a worker that
  // exits sooner is not waited for.
  workerGracefulExitTimeout: 5000,
  // Every response from a test stack's API is checked against its /docs-json (a no-op where no Stack runs).
  setupFilesAfterEnv: ['<rootDir>/test/support/validate-responses.ts'],
};
