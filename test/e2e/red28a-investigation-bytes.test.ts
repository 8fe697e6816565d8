import { DEMO, Stack } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { Event, Op, submit, waitForOp } from './dispatcher-helpers';

const BUDGET = 64 * 1024;

/** Evidence as large as a resolution takes it: 10,000 characters, most of them three bytes each (29,968 bytes). */
const large = (n: number) => `investigation ${n} `.padEnd(10_000, '€');

interface Problem {
  type: string;
  detail: string;
  current_status?: string;
  investigations?: number;
  investigation_bytes?: number;
  investigation_bytes_limit?: number;
}

/**
 * A held operation kept up to 100 "still unknown" records of up to 10,000 characters (30 KB) each: ~3 MB per
 * operation, and an execution of 100 held operations ~300 MB in the one answer of GET /v1/executions/{id} (or its
 * review queue entry, or a page of executions, which always keeps one). The evidence a hold's investigations keep is
 * now bounded too (64 KiB of UTF-8), judged in the statement that appends one: past it, 409 and nothing written.
 */
describe('the evidence of a hold’s "still unknown" records is bounded', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'red28ainvbytes' });
  }, 120_000);
  afterAll(async () => stack?.stop());

  async function held(): Promise<{ executionId: string; op: Op }> {
    const created = await submit(stack, [charge(unique('red28a'), { expected_state: { charged: true } })]);
    const op = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    return { executionId: created.id, op };
  }

  const stillUnknown = (opId: string, evidence: string) =>
    http<Op & Problem>(stack.apiUrl, 'POST', `/v1/operations/${opId}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'MANUAL_REVIEW', evidence },
    });

  const eventsOf = async (executionId: string) =>
    (
      await http<{ data: Event[] }>(stack.apiUrl, 'GET', `/v1/executions/${executionId}/events?limit=1000`, {
        key: DEMO.agent,
      })
    ).body.data;

  /** What the row keeps: its investigations and the bytes of their evidence, as stored. */
  async function stored(opId: string): Promise<{ count: number; bytes: number; due_at: string }> {
    const [row] = (await stack.db.dataSource.query(
      `SELECT coalesce(jsonb_array_length(obligation->'investigations'), 0)::int AS count,
              coalesce((SELECT sum(octet_length(i->>'evidence'))
                        FROM jsonb_array_elements(obligation->'investigations') i), 0)::int AS bytes,
              obligation->>'due_at' AS due_at
       FROM operations WHERE id = $1`,
      [opId],
    )) as { count: number; bytes: number; due_at: string }[];
    return row;
  }

  it('one past the budget is 409 resolution-not-permitted naming what is used, and writes nothing', async () => {
    const { executionId, op } = await held();
    for (const n of [1, 2]) expect((await stillUnknown(op.id, large(n))).status).toBe(200);
    const used = 2 * Buffer.byteLength(large(1));
    expect(await stored(op.id)).toMatchObject({ count: 2, bytes: used });

    const before = await stored(op.id);
    const eventsBefore = await eventsOf(executionId);
    const refused = await stillUnknown(op.id, large(3));
    expect(refused.status).toBe(409);
    expect(refused.body.type).toContain('resolution-not-permitted');
    expect(refused.body).toMatchObject({
      current_status: 'MANUAL_REVIEW',
      investigations: 2,
      investigation_bytes: used,
      investigation_bytes_limit: BUDGET,
    });
    expect(await stored(op.id)).toEqual(before);
    expect(await eventsOf(executionId)).toHaveLength(eventsBefore.length);

    // A statement that fits what is left is taken, up to the budget exactly; a byte more is not.
    const rest = 'x'.repeat(BUDGET - used);
    expect((await stillUnknown(op.id, rest)).status).toBe(200);
    expect(await stored(op.id)).toMatchObject({ count: 3, bytes: BUDGET });
    const full = await stored(op.id);
    const oneMore = await stillUnknown(op.id, 'y');
    expect(oneMore.status).toBe(409);
    expect(oneMore.body).toMatchObject({ investigations: 3, investigation_bytes: BUDGET });
    expect(await stored(op.id)).toEqual(full);
    // The hold is still a reviewer's to resolve.
    const after = await http<Op>(stack.apiUrl, 'GET', `/v1/operations/${op.id}`, { key: DEMO.reviewer });
    expect(after.body.status).toBe('MANUAL_REVIEW');
    expect(after.body.recovery_obligation!.investigations).toHaveLength(3);
  });

  it('two at once, each within the budget alone and past it together: one is written, the other is 409', async () => {
    const { executionId, op } = await held();
    for (const n of [1, 2]) expect((await stillUnknown(op.id, large(n))).status).toBe(200);
    const used = 2 * Buffer.byteLength(large(1));
    const each = Math.ceil((BUDGET - used) / 2) + 100;
    expect(used + each).toBeLessThanOrEqual(BUDGET);
    const eventsBefore = await eventsOf(executionId);

    const answers = await Promise.all(['a', 'b'].map((c) => stillUnknown(op.id, c.repeat(each))));
    expect(answers.map((a) => a.status).sort()).toEqual([200, 409]);
    const loser = answers.find((a) => a.status === 409)!;
    expect(loser.body.type).toMatch(/already-decided|resolution-not-permitted/);

    const row = await stored(op.id);
    expect(row).toMatchObject({ count: 3, bytes: used + each });
    expect(row.bytes).toBeLessThanOrEqual(BUDGET);
    const written = (await eventsOf(executionId)).slice(eventsBefore.length);
    expect(written.filter((e) => e.type === 'operation.still_unknown')).toHaveLength(1);
  });
});
