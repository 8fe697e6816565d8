import { Pool } from 'pg';
import { TestDatabase, createTestDatabase } from '../support/services';
import type { SandboxEffects } from './cluster';
import { ChaosActions, InvariantReport, checkInvariants } from './invariants';

/**
 * The chaos run is only as good as its checker: a checker that cannot see a broken promise would report a clean run
 * whatever happened. Here the database and the provider's effects are written by hand, each breaking one promise,
 * and every break must be counted on its own row.
 */
describe('chaos invariant checker', () => {
  let db: TestDatabase;
  let pool: Pool;
  beforeAll(async () => {
    db = await createTestDatabase('invariants');
    pool = new Pool({ connectionString: db.url, max: 2 });
    await pool.query(`INSERT INTO tenants (id, name) VALUES ('t', 'test') ON CONFLICT DO NOTHING`);
  });
  afterAll(async () => {
    await pool?.end();
    await db?.drop();
  });

  const actions: ChaosActions = {
    workerKills: 0,
    workerRestarts: 0,
    pauses: [],
    redisRestarts: 0,
    postgresRestarts: 0,
    unexpectedExits: [],
    submitRetries: 0,
    approvals: 0,
    refusedStarts: 0,
    reviewers: { approvalRaces: 0, resolutionRaces: 0, refusals: {}, wonTwice: [] },
  };

  async function execution(id: string, status: string) {
    await pool.query(
      `INSERT INTO executions (id, tenant_id, agent_id, intent, status, deadline_at)
       VALUES ($1, 't', 'a', 'i', $2, now() + interval '1 hour')`,
      [id, status],
    );
  }

  async function operation(
    id: string,
    executionId: string,
    connector: 'sandbox.payments' | 'sandbox.sms',
    ref: string,
    status: string,
    extra: { evidence?: unknown; attempt?: number } = {},
  ) {
    const params =
      connector === 'sandbox.payments' ? { reference: ref, amount: 1, currency: 'EUR' } : { client_ref: ref };
    await pool.query(
      `INSERT INTO operations (id, execution_id, tenant_id, key, position, connector, action, params, status,
                               verification_method, attempt, evidence)
       VALUES ($1, $2, 't', $1, 0, $3, 'x', $4, $5, $6, $7, $8)`,
      [
        id,
        executionId,
        connector,
        JSON.stringify(params),
        status,
        connector === 'sandbox.payments' ? 'read_after_write' : '',
        extra.attempt ?? 1,
        extra.evidence === undefined ? null : JSON.stringify(extra.evidence),
      ],
    );
  }

  type Event = [operationId: string | null, type: string, from: string | null, to: string];

  /** Writes the log with seq 1..n (or the seqs given) and sets the execution's event_seq to the highest. */
  async function events(executionId: string, list: Event[], seqs?: number[]) {
    for (const [i, [operationId, type, from, to]] of list.entries()) {
      await pool.query(
        `INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, from_status, to_status)
         VALUES ($1, $2, 't', $3, $4, $5, $6, $7)`,
        [`evt_${executionId}_${i}`, executionId, seqs?.[i] ?? i + 1, operationId, type, from, to],
      );
    }
    await pool.query(
      `UPDATE executions SET event_seq = (SELECT max(seq) FROM events WHERE execution_id = $1) WHERE id = $1`,
      [executionId],
    );
  }

  /** created → validating → failed: a short, legal execution history. */
  const lifecycle: Event[] = [
    [null, 'execution.created', null, 'created'],
    [null, 'execution.status_changed', 'created', 'validating'],
    [null, 'execution.status_changed', 'validating', 'failed'],
  ];

  /** PREPARED → SENT → ...rest, one status event each. */
  const sent = (op: string, ...rest: string[]): Event[] => {
    const chain = ['PREPARED', 'SENT', ...rest];
    return chain.slice(1).map((to, i): Event => [op, 'operation.status_changed', chain[i], to]);
  };

  let report: InvariantReport;
  beforeAll(async () => {
    const evidence = { method: 'read_after_write' };
    // ok: a verified charge that exists, an acknowledged SMS that exists.
    await execution('exe_ok', 'failed');
    await operation('op_ok', 'exe_ok', 'sandbox.payments', 'ref-ok', 'VERIFIED', { evidence });
    await operation('op_sms_ok', 'exe_ok', 'sandbox.sms', 'sms-ok', 'ACKNOWLEDGED');
    await events('exe_ok', [
      ...lifecycle,
      ...sent('op_ok', 'ACKNOWLEDGED', 'VERIFIED'),
      ...sent('op_sms_ok', 'ACKNOWLEDGED'),
    ]);

    // broken: FAILED with an effect, VERIFIED without one, an SMS delivered twice, an illegal move, a seq gap.
    await execution('exe_bad', 'failed');
    await operation('op_failed', 'exe_bad', 'sandbox.payments', 'ref-failed', 'FAILED');
    await operation('op_ghost', 'exe_bad', 'sandbox.payments', 'ref-ghost', 'VERIFIED', { evidence });
    await operation('op_twice', 'exe_bad', 'sandbox.sms', 'sms-twice', 'ACKNOWLEDGED');
    const bad = [
      ...lifecycle,
      ...sent('op_failed', 'ACKNOWLEDGED', 'FAILED'), // ACKNOWLEDGED → FAILED is not a move the model allows
      ...sent('op_ghost', 'ACKNOWLEDGED', 'VERIFIED'),
      ...sent('op_twice', 'ACKNOWLEDGED'),
    ];
    await events(
      'exe_bad',
      bad,
      bad.map((_, i) => (i < 3 ? i + 1 : i + 2)),
    ); // seq 4 is missing

    const effects: SandboxEffects = {
      total: 5,
      charges: {
        'ref-ok': { count: 1, ids: ['ch_1'], amounts: [1] },
        'ref-failed': { count: 1, ids: ['ch_2'], amounts: [1] },
      },
      messages: {
        'sms-ok': { count: 1, ids: ['m1'], to: ['+1'] },
        'sms-twice': { count: 2, ids: ['m2', 'm3'], to: ['+1', '+1'] },
      },
      duplicates: [{ kind: 'message', key: 'sms-twice', count: 2 }],
    };
    report = await checkInvariants({
      pool,
      effects,
      planned: [],
      // exe_lost was answered 201 and does not exist.
      accepted: ['exe_ok', 'exe_bad', 'exe_lost'].map((executionId) => ({
        executionId,
        planned: { operations: 1 } as never,
      })),
      notAccepted: [],
      actions,
      options: { operations: 0, faultProbability: 0, seed: 0 },
    });
  });

  const row = (prefix: string) => report.rows.find((r) => r.label.startsWith(prefix))?.violations;

  it('counts each broken promise on its own row', () => {
    expect(row('lost')).toBe(1);
    expect(row('duplicate effects')).toBe(1);
    expect(row('VERIFIED without an effect')).toBe(1);
    expect(row('FAILED with an effect')).toBe(1);
    expect(row('I2 event seq')).toBe(1);
    expect(row('I1 illegal transitions')).toBe(1);
    expect(report.violations).toBe(6);
  });

  it('finds nothing wrong with the operations that kept their promises', () => {
    expect(row('ACKNOWLEDGED (no read-back) without an effect')).toBe(0);
    expect(row('CANCELLED with an effect')).toBe(0);
    expect(row('I3 sent more than once')).toBe(0);
    expect(row('I2 status without its event')).toBe(0);
    expect(row('effects never SENT by Verity')).toBe(0);
    expect(report.table).toContain('6 invariant violation(s)');
  });
});

/** The reviewers' rows (I13): one decision per request or hold, nothing sent after a deny, as the log tells it. */
describe('chaos invariant checker: decisions by people', () => {
  let db: TestDatabase;
  let pool: Pool;
  let report: InvariantReport;
  beforeAll(async () => {
    db = await createTestDatabase('invdecide');
    pool = new Pool({ connectionString: db.url, max: 2 });
    await pool.query(`INSERT INTO tenants (id, name) VALUES ('t', 'test') ON CONFLICT DO NOTHING`);
    await pool.query(
      `INSERT INTO executions (id, tenant_id, agent_id, intent, status, deadline_at, event_seq)
       VALUES ('exe_d', 't', 'a', 'i', 'failed', now() + interval '1 hour', 0)`,
    );
    const evidence = JSON.stringify({ method: 'none', resolution: { status: 'VERIFIED', evidence: 'dashboard' } });
    for (const [id, status, ev] of [
      ['op_twice', 'CANCELLED', null], // approval decided twice
      ['op_denied_sent', 'ACKNOWLEDGED', null], // denied, then SENT
      ['op_resolved_twice', 'VERIFIED', evidence], // resolved twice (a human VERIFIED of an SMS: I6 holds)
      ['op_fine', 'VERIFIED', evidence], // approved once, then held and resolved once: fine
    ] as const) {
      await pool.query(
        `INSERT INTO operations (id, execution_id, tenant_id, key, position, connector, action, params, status,
                                 verification_method, attempt, evidence)
         VALUES ($1, 'exe_d', 't', $1, 0, 'sandbox.sms', 'send', $2, $3, '', 1, $4)`,
        [id, JSON.stringify({ client_ref: `ref-${id}` }), status, ev],
      );
    }
    const log: [string | null, string, string | null, string | null, Record<string, unknown>][] = [
      [null, 'execution.created', null, 'created', {}],
      [null, 'execution.status_changed', 'created', 'validating', {}],
      [null, 'execution.status_changed', 'validating', 'failed', {}],
      ['op_twice', 'approval.requested', null, null, {}],
      ['op_twice', 'approval.decided', null, null, { decision: 'approve' }],
      ['op_twice', 'approval.decided', null, null, { decision: 'deny' }],
      ['op_twice', 'operation.status_changed', 'PREPARED', 'CANCELLED', {}],
      ['op_denied_sent', 'approval.requested', null, null, {}],
      ['op_denied_sent', 'approval.decided', null, null, { decision: 'deny' }],
      ['op_denied_sent', 'operation.status_changed', 'PREPARED', 'SENT', {}],
      ['op_denied_sent', 'operation.status_changed', 'SENT', 'ACKNOWLEDGED', {}],
      ['op_resolved_twice', 'operation.status_changed', 'PREPARED', 'SENT', {}],
      ['op_resolved_twice', 'operation.status_changed', 'SENT', 'UNKNOWN', {}],
      ['op_resolved_twice', 'operation.status_changed', 'UNKNOWN', 'MANUAL_REVIEW', {}],
      ['op_resolved_twice', 'operation.resolved', null, null, { status: 'FAILED' }],
      ['op_resolved_twice', 'operation.resolved', null, null, { status: 'VERIFIED' }],
      ['op_resolved_twice', 'operation.status_changed', 'MANUAL_REVIEW', 'VERIFIED', { actor: 'human' }],
      ['op_fine', 'approval.requested', null, null, {}],
      ['op_fine', 'approval.decided', null, null, { decision: 'approve' }],
      ['op_fine', 'operation.status_changed', 'PREPARED', 'SENT', {}],
      ['op_fine', 'operation.status_changed', 'SENT', 'UNKNOWN', {}],
      ['op_fine', 'operation.status_changed', 'UNKNOWN', 'MANUAL_REVIEW', {}],
      ['op_fine', 'operation.resolved', null, null, { status: 'VERIFIED' }],
      ['op_fine', 'operation.status_changed', 'MANUAL_REVIEW', 'VERIFIED', { actor: 'human' }],
    ];
    for (const [i, [operationId, type, from, to, data]] of log.entries()) {
      await pool.query(
        `INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, from_status, to_status, data)
         VALUES ($1, 'exe_d', 't', $2, $3, $4, $5, $6, $7)`,
        [`evt_d_${i}`, i + 1, operationId, type, from, to, JSON.stringify(data)],
      );
    }
    await pool.query(`UPDATE executions SET event_seq = $1 WHERE id = 'exe_d'`, [log.length]);
    const messages = Object.fromEntries(
      ['op_denied_sent', 'op_resolved_twice', 'op_fine'].map((id) => [
        `ref-${id}`,
        { count: 1, ids: [id], to: ['+1'] },
      ]),
    );
    report = await checkInvariants({
      pool,
      effects: { total: 3, charges: {}, messages, duplicates: [] },
      planned: [],
      accepted: [],
      notAccepted: [],
      actions: {
        workerKills: 0,
        workerRestarts: 0,
        pauses: [],
        redisRestarts: 0,
        postgresRestarts: 0,
        unexpectedExits: [],
        submitRetries: 0,
        approvals: 0,
        refusedStarts: 0,
        reviewers: {
          approvalRaces: 2,
          resolutionRaces: 2,
          refusals: {},
          wonTwice: ['approval of op_x: 2 answered 2xx'],
        },
      },
      options: { operations: 0, faultProbability: 0, seed: 0 },
    });
  });
  afterAll(async () => {
    await pool?.end();
    await db?.drop();
  });

  const row = (prefix: string) => report.rows.find((r) => r.label.startsWith(prefix));

  it('counts a decision written twice, a resolution written twice, a send after a deny and a race won twice', () => {
    expect(row('I13 more than one decision event')).toMatchObject({ violations: 2 });
    expect(row('I13 more than one decision event')!.examples!.join(' ')).toMatch(/op_twice.*op_resolved_twice/);
    expect(row('sent after its approval was denied')).toMatchObject({ violations: 1 });
    expect(row('I13 a decision won by more than one reviewer')).toMatchObject({ violations: 1 });
  });

  it('accepts a human resolution with evidence as I6 evidence, and one decision per request or hold', () => {
    expect(row('I6 VERIFIED without read-after-write evidence')).toMatchObject({ violations: 0 });
    expect(report.violations).toBe(4);
  });
});
