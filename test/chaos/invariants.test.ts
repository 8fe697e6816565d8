import { Pool } from 'pg';
import { statusModelDocument } from '@verity/status-model';
import { TestDatabase, createTestDatabase } from '../support/services';
import type { SandboxEffects, SandboxRequests, ServedStatusModel } from './cluster';
import { ChaosActions, InvariantReport, checkInvariants, compareStatusModel, noChaosActions } from './invariants';

/**
 * A pool of the test's own. The database is dropped WITH (FORCE) after it, and a connection still closing then is
 * terminated by the server: that error is no finding of the test, and unheard it would fail the whole file.
 */
function quietPool(url: string): Pool {
  const pool = new Pool({ connectionString: url, max: 2 });
  pool.on('error', () => undefined);
  return pool;
}

/** The model as the API serves it (GET /v1/status-model is this document). */
const servedModel = (): ServedStatusModel => JSON.parse(JSON.stringify(statusModelDocument())) as ServedStatusModel;

type WireEntry = SandboxRequests['requests'][number];
let wireSeq = 0;
/** One request as the provider logs it; `ref` is the reference (charges) or client_ref (messages). */
function request(kind: 'charge' | 'message' | 'read', ref: string, extra: Partial<WireEntry> = {}): WireEntry {
  wireSeq += 1;
  return {
    seq: wireSeq,
    // Before anything in the database: the fixtures' events are written at now().
    at: '2000-01-01T00:00:00.000Z',
    method: kind === 'read' ? 'GET' : 'POST',
    path: kind === 'message' ? '/v1/messages' : '/v1/charges',
    query: kind === 'read' ? `reference=${ref}` : null,
    idempotency_key: kind === 'charge' ? `verity-t-${ref}` : null,
    reference: kind === 'message' ? null : ref,
    client_ref: kind === 'message' ? ref : null,
    outcome: kind === 'read' ? 'read' : 'applied',
    fault: null,
    status: kind === 'read' ? 200 : 201,
    effect_id: null,
    returned_ids: null,
    ...extra,
  };
}

const wireLog = (requests: WireEntry[], dropped = 0): SandboxRequests => ({
  total: requests.length + dropped,
  dropped,
  requests,
});

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
    pool = quietPool(db.url);
    await pool.query(`INSERT INTO tenants (id, name) VALUES ('t', 'test') ON CONFLICT DO NOTHING`);
  });
  afterAll(async () => {
    await pool?.end();
    await db?.drop();
  });

  const actions: ChaosActions = noChaosActions();

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
    const okEvidence = { method: 'read_after_write', record: { id: 'ch_1', amount: 1, reference: 'ref-ok' } };
    // ok: a verified charge that exists, an acknowledged SMS that exists.
    await execution('exe_ok', 'failed');
    await operation('op_ok', 'exe_ok', 'sandbox.payments', 'ref-ok', 'VERIFIED', { evidence: okEvidence });
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
      dropped: 0,
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
    // What the wire saw: one request per sent operation, except the SMS sent twice; the verified charge was read back.
    const requests = wireLog([
      request('charge', 'ref-ok', { effect_id: 'ch_1' }),
      request('read', 'ref-ok', { returned_ids: ['ch_1'] }),
      request('charge', 'ref-failed', { effect_id: 'ch_2' }),
      request('message', 'sms-ok', { effect_id: 'm1' }),
      request('message', 'sms-twice', { effect_id: 'm2' }),
      request('message', 'sms-twice', { effect_id: 'm3' }),
    ]);
    report = await checkInvariants({
      pool,
      effects,
      requests,
      statusModel: servedModel(),
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
    // The same FAILED came after the provider acknowledged the charge, and no person decided it.
    expect(row('FAILED by the system after the provider acknowledged it')).toBe(1);
    expect(row('I2 event seq')).toBe(1);
    expect(row('I1 illegal transitions')).toBe(1);
    // The wire shows the SMS sent twice too; the ghost's "read-back evidence" names no record of the provider.
    expect(row('I3 more than one request at the wire')).toBe(1);
    expect(row("VERIFIED evidence not the provider's record")).toBe(1);
    expect(report.violations).toBe(9);
  });

  it('finds nothing wrong with the operations that kept their promises', () => {
    expect(row('ACKNOWLEDGED (no read-back) without an effect')).toBe(0);
    expect(row('CANCELLED with an effect')).toBe(0);
    expect(row('I3 sent more than once')).toBe(0);
    expect(row('I2 status without its event')).toBe(0);
    expect(row('effects never SENT by Verity')).toBe(0);
    expect(row("status model served ≠ the contract's table")).toBe(0);
    expect(row("idempotency key not the operation's own")).toBe(0);
    expect(row('requests at the wire with no SENT operation')).toBe(0);
    expect(report.table).toContain('9 invariant violation(s)');
  });
});

/** The reviewers' rows (I13): one decision per request or hold, nothing sent after a deny, as the log tells it. */
describe('chaos invariant checker: decisions by people', () => {
  let db: TestDatabase;
  let pool: Pool;
  let report: InvariantReport;
  beforeAll(async () => {
    db = await createTestDatabase('invdecide');
    pool = quietPool(db.url);
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
      ['op_cancelled_twice', 'CANCELLED', null], // a second CANCELLED written from PREPARED after the first
      ['op_granted_after_cancel', 'CANCELLED', null], // cancelled, then shown approved
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
      ['op_resolved_twice', 'operation.status_changed', 'SENT', 'UNKNOWN', { reason: 'CONNECTOR_ERROR' }],
      ['op_resolved_twice', 'operation.status_changed', 'UNKNOWN', 'MANUAL_REVIEW', { reason: 'CONNECTOR_ERROR' }],
      ['op_resolved_twice', 'operation.resolved', null, null, { status: 'FAILED' }],
      ['op_resolved_twice', 'operation.resolved', null, null, { status: 'VERIFIED' }],
      ['op_resolved_twice', 'operation.status_changed', 'MANUAL_REVIEW', 'VERIFIED', { actor: 'human' }],
      ['op_fine', 'approval.requested', null, null, {}],
      ['op_fine', 'approval.decided', null, null, { decision: 'approve' }],
      ['op_fine', 'operation.status_changed', 'PREPARED', 'SENT', {}],
      ['op_fine', 'operation.status_changed', 'SENT', 'UNKNOWN', { reason: 'CONNECTOR_ERROR' }],
      ['op_fine', 'operation.status_changed', 'UNKNOWN', 'MANUAL_REVIEW', { reason: 'CONNECTOR_ERROR' }],
      ['op_fine', 'operation.resolved', null, null, { status: 'VERIFIED' }],
      ['op_fine', 'operation.status_changed', 'MANUAL_REVIEW', 'VERIFIED', { actor: 'human' }],
      ['op_cancelled_twice', 'operation.status_changed', 'PREPARED', 'CANCELLED', {}],
      ['op_cancelled_twice', 'operation.status_changed', 'PREPARED', 'CANCELLED', {}],
      ['op_granted_after_cancel', 'approval.requested', null, null, {}],
      ['op_granted_after_cancel', 'operation.status_changed', 'PREPARED', 'CANCELLED', {}],
      ['op_granted_after_cancel', 'approval.decided', null, null, { decision: 'approve' }],
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
      effects: { total: 3, dropped: 0, charges: {}, messages, duplicates: [] },
      requests: wireLog(
        ['op_denied_sent', 'op_resolved_twice', 'op_fine'].map((id) =>
          request('message', `ref-${id}`, { effect_id: id }),
        ),
      ),
      statusModel: servedModel(),
      planned: [],
      accepted: [],
      notAccepted: [],
      actions: {
        ...noChaosActions(),
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

  it('counts a status event written from a status the operation had left, and a decision after it moved on', () => {
    expect(row('I2 a status event not from the status before it')).toMatchObject({
      violations: 1,
      examples: ['op_cancelled_twice: PREPARED → CANCELLED while CANCELLED'],
    });
    expect(row("a person's decision recorded while the operation was not open to it")).toMatchObject({
      violations: 1,
      examples: ['op_granted_after_cancel: approval.decided while CANCELLED'],
    });
  });

  it('accepts a human resolution with evidence as I6 evidence, and one decision per request or hold', () => {
    expect(row('I6 VERIFIED without read-after-write evidence')).toMatchObject({ violations: 0 });
    expect(report.violations).toBe(6);
  });
});

/**
 * The rows that read the wire and the contract: each planted bug below leaves the effects looking right (one charge
 * per reference, VERIFIED where a charge exists), so only the wire log, the contract's own table or the provider's
 * record can show it.
 */
describe('chaos invariant checker: the wire, the contract and the evidence', () => {
  let db: TestDatabase;
  let pool: Pool;
  let report: InvariantReport;
  const actions: ChaosActions = noChaosActions();
  const evidence = (id: string, reference: string, amount = 100) => ({
    method: 'read_after_write',
    record: { id, reference, amount, currency: 'EUR', status: 'succeeded' },
  });

  beforeAll(async () => {
    db = await createTestDatabase('invwire');
    pool = quietPool(db.url);
    await pool.query(`INSERT INTO tenants (id, name) VALUES ('t', 'test') ON CONFLICT DO NOTHING`);
    await pool.query(
      `INSERT INTO executions (id, tenant_id, agent_id, intent, status, deadline_at, event_seq)
       VALUES ('exe_w', 't', 'a', 'i', 'completed', now() + interval '1 hour', 0)`,
    );
    const ops: [id: string, status: string, ev: unknown, reason: string | null][] = [
      ['op_good', 'VERIFIED', evidence('ch_good', 'ref-good'), null], // sent once, read back: fine
      ['op_resent', 'VERIFIED', evidence('ch_resent', 'ref-resent'), null], // re-sent UNKNOWN, key absorbed it
      ['op_newkey', 'VERIFIED', evidence('ch_newkey', 'ref-newkey'), null], // a key of its own per attempt
      ['op_madeup', 'VERIFIED', evidence('ch_madeup', 'ref-madeup'), null], // "read back", never read
      ['op_amount', 'VERIFIED', evidence('ch_amount', 'ref-amount', 999), null], // evidence of another amount
      ['op_invented', 'VERIFIED', evidence('ch_invented', 'ref-invented'), null], // an id the provider never made
      ['op_cancelled', 'CANCELLED', null, null], // never SENT, yet a request reached the wire
      ['op_unknown_sent', 'ACKNOWLEDGED', null, null], // UNKNOWN → SENT in the log
      ['op_held_unreach', 'VERIFIED', evidence('ch_held', 'ref-held'), 'SOURCE_UNREACHABLE'], // system re-check: legal
      ['op_held_mismatch', 'FAILED', null, 'INTEGRITY_MISMATCH'], // system FAILED of a mismatch hold: illegal twice
    ];
    for (const [id, status, ev, reason] of ops) {
      await pool.query(
        `INSERT INTO operations (id, execution_id, tenant_id, key, position, connector, action, params, status,
                                 terminal_reason, verification_method, attempt, evidence)
         VALUES ($1, 'exe_w', 't', $1, 0, 'sandbox.payments', 'charge', $2, $3, $4, 'read_after_write', 1, $5)`,
        [
          id,
          JSON.stringify({ reference: id.replace('op_', 'ref-'), amount: 100, currency: 'EUR' }),
          status,
          status === 'FAILED' ? reason : null,
          ev === null ? null : JSON.stringify(ev),
        ],
      );
    }
    // Fix the one whose reference differs from its id pattern.
    await pool.query(`UPDATE operations SET params = jsonb_set(params, '{reference}', '"ref-held"') WHERE id = $1`, [
      'op_held_unreach',
    ]);
    type Move = [op: string, from: string, to: string, data?: Record<string, unknown>];
    const verified = (op: string): Move[] => [
      [op, 'PREPARED', 'SENT'],
      [op, 'SENT', 'ACKNOWLEDGED'],
      [op, 'ACKNOWLEDGED', 'VERIFIED'],
    ];
    const moves: Move[] = [
      ...verified('op_good'),
      ['op_resent', 'PREPARED', 'SENT'],
      ['op_resent', 'SENT', 'UNKNOWN', { reason: 'CONNECTOR_ERROR' }],
      ['op_resent', 'UNKNOWN', 'RECONCILING'],
      ['op_resent', 'RECONCILING', 'VERIFIED'],
      ...verified('op_newkey'),
      ...verified('op_madeup'),
      ...verified('op_amount'),
      ...verified('op_invented'),
      ['op_cancelled', 'PREPARED', 'CANCELLED'],
      ['op_unknown_sent', 'PREPARED', 'SENT'],
      ['op_unknown_sent', 'SENT', 'UNKNOWN', { reason: 'CONNECTOR_ERROR' }],
      ['op_unknown_sent', 'UNKNOWN', 'SENT'],
      ['op_unknown_sent', 'SENT', 'ACKNOWLEDGED'],
      ['op_held_unreach', 'PREPARED', 'SENT'],
      ['op_held_unreach', 'SENT', 'ACKNOWLEDGED'],
      ['op_held_unreach', 'ACKNOWLEDGED', 'MANUAL_REVIEW', { reason: 'SOURCE_UNREACHABLE' }],
      ['op_held_unreach', 'MANUAL_REVIEW', 'VERIFIED', { actor: 'system' }],
      ['op_held_mismatch', 'PREPARED', 'SENT'],
      ['op_held_mismatch', 'SENT', 'ACKNOWLEDGED'],
      ['op_held_mismatch', 'ACKNOWLEDGED', 'MANUAL_REVIEW', { reason: 'INTEGRITY_MISMATCH' }],
      ['op_held_mismatch', 'MANUAL_REVIEW', 'FAILED', { actor: 'system' }],
    ];
    const log: [string | null, string, string | null, string | null, Record<string, unknown>][] = [
      [null, 'execution.created', null, 'created', {}],
      [null, 'execution.status_changed', 'created', 'validating', {}],
      [null, 'execution.status_changed', 'validating', 'resolving_context', {}],
      [null, 'execution.status_changed', 'resolving_context', 'planning', {}],
      [null, 'execution.status_changed', 'planning', 'running', {}],
      ...moves.map(([op, from, to, data]): [string, string, string, string, Record<string, unknown>] => [
        op,
        'operation.status_changed',
        from,
        to,
        { actor: 'system', ...data },
      ]),
      [null, 'execution.status_changed', 'running', 'validating_output', {}],
      [null, 'execution.status_changed', 'validating_output', 'completed', {}],
    ];
    for (const [i, [operationId, type, from, to, data]] of log.entries()) {
      await pool.query(
        `INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, from_status, to_status, data)
         VALUES ($1, 'exe_w', 't', $2, $3, $4, $5, $6, $7)`,
        [`evt_w_${i}`, i + 1, operationId, type, from, to, JSON.stringify(data)],
      );
    }
    await pool.query(`UPDATE executions SET event_seq = $1 WHERE id = 'exe_w'`, [log.length]);

    const charges: SandboxEffects['charges'] = {};
    for (const ref of [
      'ref-good',
      'ref-resent',
      'ref-newkey',
      'ref-madeup',
      'ref-amount',
      'ref-invented',
      'ref-held',
    ]) {
      charges[ref] = { count: 1, ids: [`ch_${ref.slice(4)}`], amounts: [100] };
    }
    charges['ref-invented'].ids = ['ch_real_one'];
    charges['ref-unknown_sent'] = { count: 1, ids: ['ch_unknown_sent'], amounts: [100] };
    const requests = wireLog([
      request('charge', 'ref-good', { effect_id: 'ch_good' }),
      request('read', 'ref-good', { returned_ids: ['ch_good'] }),
      request('charge', 'ref-resent', { fault: 'timeout_after_commit', status: null, effect_id: 'ch_resent' }),
      request('charge', 'ref-resent', { outcome: 'replayed', effect_id: 'ch_resent' }),
      request('read', 'ref-resent', { returned_ids: ['ch_resent'] }),
      request('charge', 'ref-newkey', { idempotency_key: 'verity-t-ref-newkey-1700000000000' }),
      request('read', 'ref-newkey', { returned_ids: ['ch_newkey'] }),
      request('charge', 'ref-madeup', { effect_id: 'ch_madeup' }),
      request('read', 'ref-madeup', { returned_ids: [] }), // the replica lagged; the "evidence" was made up
      // Observation read it later: after the VERIFIED, so it cannot have been the evidence.
      request('read', 'ref-madeup', { returned_ids: ['ch_madeup'], at: '2999-01-01T00:00:00.000Z' }),
      request('charge', 'ref-amount'),
      request('read', 'ref-amount', { returned_ids: ['ch_amount'] }),
      request('charge', 'ref-invented'),
      request('read', 'ref-invented', { returned_ids: ['ch_real_one'] }),
      request('charge', 'ref-cancelled', { outcome: 'dropped', fault: 'drop_before_commit', status: null }),
      request('charge', 'ref-unknown_sent'),
      request('charge', 'ref-unknown_sent', { outcome: 'replayed' }),
      request('charge', 'ref-held'),
      request('read', 'ref-held', { returned_ids: ['ch_held'] }),
      request('charge', 'ref-held_mismatch', { outcome: 'applied' }),
    ]);
    charges['ref-held_mismatch'] = { count: 1, ids: ['ch_hm'], amounts: [100] };
    report = await checkInvariants({
      pool,
      effects: { total: Object.keys(charges).length, dropped: 0, charges, messages: {}, duplicates: [] },
      requests,
      statusModel: servedModel(),
      planned: [],
      accepted: [],
      notAccepted: [],
      actions,
      options: { operations: 0, faultProbability: 0, seed: 0 },
    });
  });
  afterAll(async () => {
    await pool?.end();
    await db?.drop();
  });

  const row = (prefix: string) => report.rows.find((r) => r.label.startsWith(prefix))!;
  const examples = (prefix: string) => (row(prefix).examples ?? []).join(' | ');

  it('counts a re-send the Idempotency-Key absorbed: one effect, two requests at the wire', () => {
    expect(row('duplicate effects').violations).toBe(0);
    expect(row('I3 sent more than once').violations).toBe(1); // the UNKNOWN → SENT one, from the log
    expect(row('I3 more than one request at the wire').violations).toBe(2);
    expect(examples('I3 more than one request at the wire')).toMatch(/op_resent.*applied, replayed.*op_unknown_sent/);
  });

  it('counts a key that is not the operation’s own (a new key per attempt)', () => {
    expect(row("idempotency key not the operation's own").violations).toBe(1);
    expect(examples("idempotency key not the operation's own")).toContain('op_newkey');
  });

  it('counts a request at the wire for an operation that was never SENT', () => {
    expect(row('requests at the wire with no SENT operation').violations).toBe(1);
    expect(examples('requests at the wire with no SENT operation')).toContain('ref-cancelled');
  });

  it('counts VERIFIED evidence not read before the VERIFIED, of another amount, or an id the provider never made', () => {
    expect(row("VERIFIED evidence not the provider's record").violations).toBe(3);
    const found = examples("VERIFIED evidence not the provider's record");
    expect(found).toMatch(/op_madeup: no read at the wire returned ch_madeup before it was VERIFIED/);
    expect(found).toMatch(/op_amount: amount 999, provider 100, requested 100/);
    expect(found).toMatch(/op_invented: id ch_invented is not a charge of ref-invented/);
  });

  it('checks I1 against the contract: UNKNOWN → SENT and a system FAILED of a mismatch hold are refused', () => {
    expect(row('I1 illegal transitions').violations).toBe(4);
    const found = examples('I1 illegal transitions');
    expect(found).toContain('op_unknown_sent: UNKNOWN → SENT is not a move of the contract');
    expect(found).toContain('op_held_mismatch: MANUAL_REVIEW → FAILED by system (held for INTEGRITY_MISMATCH)');
    expect(found).toContain('op_held_mismatch: MANUAL_REVIEW → FAILED while held for INTEGRITY_MISMATCH');
    // The provider acknowledged that charge: a record of the effect is on file, so FAILED is refused to anyone.
    expect(found).toContain('op_held_mismatch: MANUAL_REVIEW → FAILED after the provider acknowledged it');
    // The system's re-check of a hold for an unreachable source (docs/decisions.md) is legal.
    expect(found).not.toContain('op_held_unreach');
  });

  it('finds the served status model equal to the contract, and this run otherwise clean', () => {
    expect(row("status model served ≠ the contract's table").violations).toBe(0);
    expect(row('wire log incomplete').violations).toBe(0);
    // The system FAILED of a mismatch hold also names a charge that exists: FAILED with an effect.
    expect(row('FAILED with an effect').violations).toBe(1);
    // … and came after the provider acknowledged the charge, with no person deciding it.
    expect(row('FAILED by the system after the provider acknowledged it').violations).toBe(1);
    expect(report.violations).toBe(1 + 2 + 1 + 1 + 3 + 4 + 1 + 1);
  });
});

describe('the status model compared with the contract', () => {
  it('agrees with the model as it is', () => {
    expect(compareStatusModel(servedModel())).toEqual([]);
  });

  it('finds a planted row (UNKNOWN → SENT), a row gone, a human-only move opened to the system or to an acknowledged effect, an execution move', () => {
    const planted = servedModel();
    const rows = planted.operation.transitions;
    rows.push({ ...rows.find((r) => r.from === 'PREPARED' && r.to === 'SENT')!, from: 'UNKNOWN' });
    planted.operation.transitions = rows.filter((r) => !(r.from === 'RECONCILING' && r.to === 'FAILED'));
    const humanFailed = planted.operation.transitions.find((r) => r.from === 'MANUAL_REVIEW' && r.to === 'FAILED')!;
    humanFailed.human_only = false;
    humanFailed.refused_when_acknowledged = false;
    humanFailed.refused_when_effect_shown = false;
    planted.execution.transitions.find((t) => t.from === 'created')!.to.push('running');
    expect(compareStatusModel(planted)).toEqual([
      'operation MANUAL_REVIEW → FAILED: human_only false; refused_when_acknowledged false; refused_when_effect_shown false',
      'operation UNKNOWN → SENT: allowed by the model, not by the contract',
      'operation RECONCILING → FAILED: missing from the model',
      'execution created → running: not in the contract',
    ]);
  });

  it('a run checked against a served model with UNKNOWN → SENT fails, and says so on its own row', async () => {
    const planted = servedModel();
    const rows = planted.operation.transitions;
    rows.push({ ...rows.find((r) => r.from === 'PREPARED' && r.to === 'SENT')!, from: 'UNKNOWN' });
    const db = await createTestDatabase('invmodel');
    const pool = quietPool(db.url);
    try {
      const report = await checkInvariants({
        pool,
        effects: { total: 2, dropped: 2, charges: {}, messages: {}, duplicates: [] },
        requests: wireLog([], 3),
        statusModel: planted,
        planned: [],
        accepted: [],
        notAccepted: [],
        actions: noChaosActions(),
        options: { operations: 0, faultProbability: 0, seed: 0 },
      });
      const row = (prefix: string) => report.rows.find((r) => r.label.startsWith(prefix))!;
      expect(row("status model served ≠ the contract's table")).toMatchObject({
        violations: 1,
        examples: ['operation UNKNOWN → SENT: allowed by the model, not by the contract'],
      });
      // A wire log the provider had to cut short cannot vouch for "one request per operation".
      expect(row('wire log incomplete').violations).toBe(1);
      // Nor can effects it had to forget vouch for "no duplicates".
      expect(row('effects incomplete')).toMatchObject({
        violations: 1,
        examples: ['the provider kept 0 of 2 effects'],
      });
      expect(report.violations).toBe(3);
    } finally {
      await pool.end();
      await db.drop();
    }
  });
});
