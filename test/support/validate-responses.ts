import { installResponseValidation, takeViolations, type Violation } from './openapi-validator';

/**
 * Jest setupFilesAfterEnv: every test's fetch (the http() helper, the SDK, the MCP client, the SSE helper) checks the
 * responses of the APIs a Stack started against the document they serve (see openapi-validator.ts). The wrapper
 * throws at the request; the hooks below also fail the test whose code caught that error (or the file, for a
 * request made outside a test), so a swallowed rejection cannot hide an undescribed response.
 */
installResponseValidation();

function report(violations: Violation[]): void {
  if (violations.length === 0) return;
  throw new Error(
    `${violations.length} response(s) not described by /docs-json:\n${violations.map((v) => v.message).join('\n')}`,
  );
}

afterEach(() => report(takeViolations()));
afterAll(() => report(takeViolations()));
