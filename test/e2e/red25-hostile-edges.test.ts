import type { ProblemDetails as Problem } from '@verity/sdk';
import { DEMO, Stack } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import { publicTables, tableSignature } from '../fuzz/fuzz';
import { events, submit, waitForApprovalRequest } from './dispatcher-helpers';

/**
 * Hostile input at the edges the catalogues of openapi-hostile and api-validation stop short of: JSON nested as deep
 * as the body limit lets it (~130,000 levels, where those send 10,000 and 60,000: a check that walks a body by
 * recursion overflows the stack somewhere between), on every route that reads a body; and an approval's
 * `requested_at` at the edges of what its format takes (year 0000, which Postgres cannot hold; nanoseconds; a +23:59
 * offset). Each is refused with a 4xx that says why, and nothing is written.
 */
describe('hostile input at the edges of the limits', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'red25edges', reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  const LIMIT = 256 * 1024;
  /** Arrays and objects nested until the body (with `wrap` around it) nearly fills the body limit. */
  const arrays = (wrap = 0) => {
    const depth = Math.floor((LIMIT - wrap - 64) / 2);
    return '['.repeat(depth) + ']'.repeat(depth);
  };
  const objects = (wrap = 0) => {
    const depth = Math.floor((LIMIT - wrap - 64) / 6);
    return '{"a":'.repeat(depth) + '1' + '}'.repeat(depth);
  };

  it('refuses JSON nested as deep as the body limit allows on every route that reads a body, and writes nothing', async () => {
    // Waiting for approval: the dispatcher has done all it will do with it until a decision, and writes nothing more.
    const created = await submit(stack, [charge(unique('edges'), { requires_approval: true })]);
    await waitForApprovalRequest(stack, created.id);
    const op = created.operations[0].id;
    const routes: [string, string, string][] = [
      ['POST', '/v1/executions', DEMO.agent],
      ['POST', `/v1/executions/${created.id}/cancel`, DEMO.agent],
      ['POST', `/v1/operations/${op}/approval`, DEMO.reviewer],
      ['POST', `/v1/operations/${op}/resolve`, DEMO.reviewer],
      ['PUT', '/v1/admin/policy', DEMO.admin],
      ['PUT', '/v1/admin/connector-settings/http', DEMO.admin],
      ['POST', '/v1/admin/webhooks', DEMO.admin],
      ['POST', '/mcp', DEMO.agent],
    ];
    const params = JSON.stringify(submission([charge(unique('edges'))]));
    const bodies: [string, (path: string) => string][] = [
      ['arrays', () => arrays()],
      ['objects', () => objects()],
      [
        'arrays in a member',
        (path) =>
          path === '/v1/executions'
            ? params.replace('"amount":', `"deep":${arrays(params.length)},"amount":`)
            : `{"reason":${arrays(20)}}`,
      ],
      [
        'objects in a member',
        (path) =>
          path === '/v1/executions'
            ? params.replace('"amount":', `"deep":${objects(params.length)},"amount":`)
            : `{"reason":${objects(20)}}`,
      ],
    ];
    const tables = await publicTables(stack);
    const before = await tableSignature(stack, tables);
    const answers: unknown[] = [];
    const expected: unknown[] = [];
    for (const [method, path, key] of routes) {
      for (const [shape, body] of bodies) {
        const text = body(path);
        expect(Buffer.byteLength(text)).toBeLessThanOrEqual(LIMIT);
        const res = await http<Problem & { jsonrpc?: string; error?: { code: number } }>(stack.apiUrl, method, path, {
          key,
          rawBody: text,
          headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        });
        const mcp = path === '/mcp';
        answers.push({
          path,
          shape,
          status: res.status,
          type: res.headers.get('content-type')?.split(';')[0],
          says: mcp ? typeof res.body.error?.code : res.body.type,
        });
        expected.push({
          path,
          shape,
          status: 400,
          type: mcp ? 'application/json' : 'application/problem+json',
          says: mcp ? 'number' : 'https://verity.dev/problems/validation-error',
        });
      }
    }
    expect(answers).toEqual(expected);
    expect(await tableSignature(stack, tables)).toEqual(before);
  });

  it.each([
    ['year 0000', '0000-01-01T00:00:00Z', '0000-01-01T00:00:00.000Z'],
    ['year 9999, nanoseconds', '9999-12-31T23:59:59.999999999Z', '9999-12-31T23:59:59.999Z'],
    ['a +23:59 offset', '2026-12-07T00:00:00+23:59', '2026-12-06T00:01:00.000Z'],
    ['30 digits of a second', '2026-12-07T00:00:00.123456789012345678901234567890Z', '2026-12-07T00:00:00.123Z'],
  ])(
    'answers an approval naming a request of %s that was never asked for: 412 with the one that waits, nothing decided',
    async (_name, requestedAt, shown) => {
      const created = await submit(stack, [charge(unique('edges-ra'), { requires_approval: true })]);
      const { execution } = await waitForApprovalRequest(stack, created.id);
      const op = execution.operations[0];
      const log = await events(stack, created.id);
      for (const decision of ['approve', 'deny']) {
        const res = await http<Problem & { requested_at?: string }>(
          stack.apiUrl,
          'POST',
          `/v1/operations/${op.id}/approval`,
          { key: DEMO.reviewer, body: { decision, requested_at: requestedAt } },
        );
        expect({ status: res.status, type: res.body.type, requested_at: res.body.requested_at }).toEqual({
          status: 412,
          type: 'https://verity.dev/problems/precondition-failed',
          requested_at: op.approval!.requested_at,
        });
        expect(res.body.detail).toContain(`the approval request of ${shown}, which is not the one waiting`);
      }
      expect(await events(stack, created.id)).toEqual(log);
    },
  );
});
