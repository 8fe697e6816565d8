import type { ProblemDetails as Problem } from '@verity/sdk';
import { DEMO, Stack } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';

type Errors = Problem & { errors?: { field: string; rule: string; message: string }[] };

/**
 * U+2800 BRAILLE PATTERN BLANK is a braille cell with no dots: it shows nothing, yet it is neither white space nor a
 * default-ignorable code point, so a field that must say something took it for text (the best-known "invisible
 * character" of blank names and messages, beside U+3164). Text that shows nothing is refused like empty text; braille
 * written with it between words is text and is kept.
 */
describe('text of blank braille cells', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'red25blank', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  const TABLES = ['executions', 'operations', 'events', 'admin_changes', 'tenants'];
  async function signature(): Promise<Record<string, string>> {
    const out: Record<string, string> = {};
    for (const table of TABLES) {
      const [row] = (await stack.db.dataSource.query(
        `SELECT count(*)::text || '/' || coalesce(max(xmin::text::bigint), 0)::text AS s FROM ${table}`,
      )) as { s: string }[];
      out[table] = row.s;
    }
    return out;
  }

  // U+1D159 MUSICAL SYMBOL NULL NOTEHEAD: a notehead drawn as nothing, of neither property either.
  const BLANK = ['\u2800', ' \u2800\u2800 ', '\u2800\u200b', '\u2800\n\u2800', '\u{1D159}', '\u{1D159}\u2800'];

  it.each(BLANK.map((value) => [JSON.stringify(value), value]))(
    'refuses %s wherever text must say something: 400 too_small naming the field, and writes nothing',
    async (_name, value) => {
      const created = await http<{ id: string; operations: { id: string }[] }>(stack.apiUrl, 'POST', '/v1/executions', {
        key: DEMO.agent,
        body: submission([charge(unique('blank'), { requires_approval: true })]),
      });
      expect(created.status).toBe(201);
      const op = created.body.operations[0].id;
      const requests: [string, string, string, string, unknown][] = [
        ['evidence', DEMO.reviewer, 'POST', `/v1/operations/${op}/resolve`, { status: 'VERIFIED', evidence: value }],
        ['reason', DEMO.reviewer, 'POST', `/v1/operations/${op}/approval`, { decision: 'deny', reason: value }],
        ['reason', DEMO.reviewer, 'POST', `/v1/operations/${op}/approval`, { decision: 'approve', reason: value }],
        ['reason', DEMO.agent, 'POST', `/v1/executions/${created.body.id}/cancel`, { reason: value }],
        ['obligation_owner', DEMO.admin, 'PUT', '/v1/admin/policy', { obligation_owner: value }],
        ['escalation_target', DEMO.admin, 'PUT', '/v1/admin/policy', { escalation_target: value }],
        ['agent_id', DEMO.agent, 'POST', '/v1/executions', submission([charge(unique('b'))], { agent_id: value })],
        ['intent', DEMO.agent, 'POST', '/v1/executions', submission([charge(unique('b'))], { intent: value })],
      ];
      const before = await signature();
      const answers = [];
      for (const [field, key, method, path, body] of requests) {
        const res = await http<Errors>(stack.apiUrl, method, path, { key, body });
        answers.push({
          field,
          status: res.status,
          type: res.headers.get('content-type')?.split(';')[0],
          errors: res.body.errors?.map((e) => ({ field: e.field, rule: e.rule })),
        });
      }
      expect(answers).toEqual(
        requests.map(([field]) => ({
          field,
          status: 400,
          type: 'application/problem+json',
          errors: [{ field, rule: 'too_small' }],
        })),
      );
      expect(await signature()).toEqual(before);
    },
  );

  it('takes braille text, whose words a blank cell separates, as written', async () => {
    const intent = '\u2813\u2811\u2807\u2807\u2815\u2800\u283a\u2815\u2817\u2807\u2819';
    const res = await http<{ intent: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('braille'))], { intent }),
    });
    expect(res.status).toBe(201);
    expect(res.body.intent).toBe(intent);
  });
});
