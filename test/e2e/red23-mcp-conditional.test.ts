import type { ProblemDetails as Problem } from '@verity/sdk';
import { DEMO, Stack } from '../support/stack';
import { http, sms, submission, unique } from '../support/http';

const HEADERS = {
  accept: 'application/json, text/event-stream',
  'content-type': 'application/json',
  'mcp-protocol-version': '2025-03-26',
};

/**
 * `POST /mcp` carries writes (a submission, a cancel) and has no ETag, as the writes of an execution on /v1: an
 * `If-Match` naming entity tags can never hold there (RFC 9110 §13.1.1), nor `If-None-Match: *` on what exists
 * (§13.1.2). Refused 412 before anything in the POST runs, as on /v1; `If-Match: *`, a list in If-None-Match, and no
 * condition are carried out.
 */
describe('MCP: a POST made conditional on a version', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'red23-mcp-conditional', dispatchers: 0, reconcilers: 0 });
  }, 120_000);
  afterAll(async () => stack?.stop());

  const written = async (reference: string) =>
    (
      (await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM operations WHERE params->>'client_ref' = $1`, [
        reference,
      ])) as { n: number }[]
    )[0].n;

  const submitWith = (reference: string, conditional: Record<string, string>) =>
    http<Problem>(stack.apiUrl, 'POST', '/mcp', {
      key: DEMO.agent,
      headers: { ...HEADERS, ...conditional },
      rawBody: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: 'submit_execution', arguments: submission([sms(reference)]) },
      }),
    });

  it('refuses If-Match naming tags, and If-None-Match: *, 412 with nothing carried out', async () => {
    const refused: Record<string, string>[] = [
      { 'if-match': '"a-version"' },
      { 'if-match': 'W/"x", "y"' },
      { 'if-none-match': '*' },
    ];
    for (const conditional of refused) {
      const reference = unique('red23-mcp-cond');
      const res = await submitWith(reference, conditional);
      expect([conditional, res.status, res.headers.get('content-type'), res.body.type]).toEqual([
        conditional,
        412,
        'application/problem+json; charset=utf-8',
        'https://verity.dev/problems/precondition-failed',
      ]);
      expect(await written(reference)).toBe(0);
    }
  });

  it('carries out a POST with If-Match: *, a list in If-None-Match, or no condition', async () => {
    const carried: Record<string, string>[] = [{ 'if-match': '*' }, { 'if-none-match': '"a-version"' }, {}];
    for (const conditional of carried) {
      const reference = unique('red23-mcp-cond-ok');
      const res = await submitWith(reference, conditional);
      expect([conditional, res.status]).toEqual([conditional, 200]);
      expect(await written(reference)).toBe(1);
    }
  });

  it('answers its other methods 405 whatever the condition', async () => {
    for (const method of ['DELETE', 'PUT', 'PATCH']) {
      const res = await http(stack.apiUrl, method, '/mcp', { key: DEMO.agent, headers: { 'if-match': '"a-version"' } });
      expect([method, res.status]).toEqual([method, 405]);
    }
  });
});
