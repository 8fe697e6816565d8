import { createApiKey, ensureTenant } from '@verity/persistence/api-keys';
import { DEMO, Stack } from '../support/stack';
import { charge, http, sms, unique } from '../support/http';
import { httpOp, startTarget } from './connectors-support';
import { Event, events, expectLegalHistory, resetSandbox, settle, submit, waitForOp } from './dispatcher-helpers';
import type { WireSchemas } from '@verity/sdk';

const OTHER_ADMIN = 'test-policy-other-tenant-admin-key';

type Policy = WireSchemas['Policy'];

/** A problem+json answer: the wire contract's own type. */
type ProblemBody = WireSchemas['Problem'];

interface Change {
  id: string;
  kind: 'policy' | 'connector_settings';
  connector: string | null;
  by: string;
  at: string;
  before: Record<string, unknown>;
  after: Record<string, unknown>;
}

/**
 * The tenant policy, set through `GET|PUT /v1/admin/policy` (admin role), decides which operations wait for approval
 * and who owns a recovery obligation, who is told when it is overdue, and by when it is due for each hold reason.
 */
describe('admin: tenant policy', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'apolicy', env: { OBLIGATION_DUE_MS: '600000' } });
    await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo-other', role: 'admin', key: OTHER_ADMIN });
  });
  afterAll(async () => stack?.stop());
  afterEach(async () => resetSandbox(stack));

  const policy = (method: 'GET' | 'PUT', body?: unknown, key = DEMO.admin) =>
    http<Policy & ProblemBody>(stack.apiUrl, method, '/v1/admin/policy', { key, body });

  it('shows the defaults until the tenant sets a policy', async () => {
    const got = await policy('GET');
    expect(got.status).toBe(200);
    expect(got.body).toEqual({
      obligation_owner: 'operations',
      escalation_target: 'on-call',
      obligation_due_seconds: null,
      effective: { obligation_due_seconds: { default: 600 } },
      approval_rules: [],
      updated_at: null,
      updated_by: null,
    });
  });

  it('refuses bad input with 400 naming the field and the rule, and writes nothing', async () => {
    const cases: [unknown, string, string][] = [
      [{ surprise: true }, 'surprise', 'unknown_field'],
      [{ obligation_owner: '' }, 'obligation_owner', 'too_small'],
      [
        { obligation_due_seconds: { SOURCE_UNREACHABLE: -5 } },
        'obligation_due_seconds.SOURCE_UNREACHABLE',
        'too_small',
      ],
      [
        { obligation_due_seconds: { SOURCE_UNREACHABLE: 1.5 } },
        'obligation_due_seconds.SOURCE_UNREACHABLE',
        'invalid_type',
      ],
      [
        { obligation_due_seconds: { SOURCE_UNREACHABLE: 'PT10M' } },
        'obligation_due_seconds.SOURCE_UNREACHABLE',
        'invalid_type',
      ],
      [
        { obligation_due_seconds: { CONNECTOR_REJECTED: 60 } },
        'obligation_due_seconds.CONNECTOR_REJECTED',
        'unknown_field',
      ],
      [{ obligation_due_seconds: { default: 31 * 24 * 3600 } }, 'obligation_due_seconds.default', 'too_big'],
      [{ approval_rules: [{ connector: 'nope' }] }, 'approval_rules[0].connector', 'unknown_connector'],
      [
        { approval_rules: [{ connector: 'sandbox.payments', amount_field: 'amount' }] },
        'approval_rules[0].amount_field',
        'requires_amount_above',
      ],
      [
        { approval_rules: [{ connector: 'sandbox.payments', amount_above: -1 }] },
        'approval_rules[0].amount_above',
        'too_small',
      ],
      // Bounded as a spending cap's max_amount is.
      [
        { approval_rules: [{ connector: 'sandbox.payments', amount_above: 1e300 }] },
        'approval_rules[0].amount_above',
        'too_big',
      ],
      [
        { approval_rules: [{ connector: 'sandbox.payments', amount_above: 1, amount_field: 'a..b' }] },
        'approval_rules[0].amount_field',
        'invalid_format',
      ],
      [{ approval_rules: [{ connector: 'sandbox.payments', extra: 1 }] }, 'approval_rules[0].extra', 'unknown_field'],
      // A threshold on a field no charge has (misspelled, or not a number) would never apply: refused.
      [
        { approval_rules: [{ connector: 'sandbox.payments', amount_above: 5, amount_field: 'amout' }] },
        'approval_rules[0].amount_field',
        'unknown_amount_field',
      ],
      [
        { approval_rules: [{ connector: 'sandbox.payments', amount_above: 5, amount_field: 'currency' }] },
        'approval_rules[0].amount_field',
        'unknown_amount_field',
      ],
      [
        { approval_rules: [{ connector: 'sandbox.sms', amount_above: 5 }] },
        'approval_rules[0].amount_field',
        'unknown_amount_field',
      ],
      // A threshold's currency: a code of three capitals, only with a threshold, read from a string field of a charge.
      [
        { approval_rules: [{ connector: 'sandbox.payments', amount_above: 5, currency: 'eur' }] },
        'approval_rules[0].currency',
        'invalid_format',
      ],
      [
        { approval_rules: [{ connector: 'sandbox.payments', amount_above: 5, currency: 'EURO' }] },
        'approval_rules[0].currency',
        'invalid_format',
      ],
      [
        { approval_rules: [{ connector: 'sandbox.payments', currency: 'EUR' }] },
        'approval_rules[0].currency',
        'requires_amount_above',
      ],
      [
        { approval_rules: [{ connector: 'sandbox.payments', amount_above: 5, currency_field: 'currency' }] },
        'approval_rules[0].currency_field',
        'requires_currency',
      ],
      [
        {
          approval_rules: [
            { connector: 'sandbox.payments', amount_above: 5, currency: 'EUR', currency_field: 'curency' },
          ],
        },
        'approval_rules[0].currency_field',
        'unknown_currency_field',
      ],
      [
        {
          approval_rules: [
            { connector: 'sandbox.payments', amount_above: 5, currency: 'EUR', currency_field: 'amount' },
          ],
        },
        'approval_rules[0].currency_field',
        'unknown_currency_field',
      ],
      // The API refuses these names as keys of every body, so no operation's params (not even http's open body) hold
      // one: a threshold on one was accepted and never applied, its amount "missing" on every operation.
      [
        { approval_rules: [{ connector: 'http', amount_above: 5, amount_field: 'body.constructor' }] },
        'approval_rules[0].amount_field',
        'unknown_amount_field',
      ],
      [
        { approval_rules: [{ connector: 'http', amount_above: 5, currency: 'EUR', currency_field: 'body.__proto__' }] },
        'approval_rules[0].currency_field',
        'unknown_currency_field',
      ],
    ];
    for (const [body, field, rule] of cases) {
      const res = await policy('PUT', body);
      expect({ body, status: res.status, type: res.headers.get('content-type') }).toEqual({
        body,
        status: 400,
        type: expect.stringContaining('application/problem+json'),
      });
      expect(res.body.errors).toEqual(expect.arrayContaining([expect.objectContaining({ field, rule })]));
    }
    expect((await policy('GET')).body.updated_at).toBeNull();
    const unknown = await policy('PUT', {
      approval_rules: [{ connector: 'sandbox.payments', amount_above: 5, currency: 'EUR', currency_field: 'curency' }],
    });
    expect(unknown.body.errors).toEqual([
      {
        field: 'approval_rules[0].currency_field',
        rule: 'unknown_currency_field',
        message: 'no action of sandbox.payments (charge) has a "curency" in its params',
      },
    ]);
  });

  it('only this tenant’s admin reads or changes it: reviewer and agent keys get 403, another tenant sees its own', async () => {
    for (const key of [DEMO.reviewer, DEMO.agent]) {
      expect((await policy('GET', undefined, key)).status).toBe(403);
      expect((await policy('PUT', { obligation_owner: 'intruder' }, key)).status).toBe(403);
    }
    const other = await policy('PUT', { obligation_owner: 'other-team' }, OTHER_ADMIN);
    expect(other.status).toBe(200);
    expect(other.body.obligation_owner).toBe('other-team');
    expect((await policy('GET')).body.obligation_owner).toBe('operations');
  });

  it('a policy set through the API drives approvals and obligations', async () => {
    const put = await policy('PUT', {
      obligation_owner: 'payments-team',
      escalation_target: 'pager:payments',
      obligation_due_seconds: { default: 120, FIELD_MISSING: 7200 },
      approval_rules: [{ connector: 'sandbox.payments', amount_above: 5000 }, { connector: 'sandbox.sms' }],
    });
    expect(put.status).toBe(200);
    expect(put.body).toMatchObject({
      obligation_owner: 'payments-team',
      escalation_target: 'pager:payments',
      obligation_due_seconds: { default: 120, FIELD_MISSING: 7200 },
      updated_by: expect.any(String),
    });
    // The other tenant's admin did not see or change this.
    expect((await policy('GET', undefined, OTHER_ADMIN)).body.obligation_owner).toBe('other-team');

    // Approvals: the large charge and the SMS wait for a reviewer; the small charge does not.
    const small = unique('pol-small');
    const large = unique('pol-large');
    const created = await submit(stack, [
      charge(small, { key: 'small' }),
      charge(large, { key: 'large', params: { amount: 6000, currency: 'EUR', reference: large } }),
      sms(unique('pol-sms')),
    ]);
    expect((await waitForOp(stack, created.id, 'small', (o) => o.status === 'VERIFIED')).approval).toBeNull();
    for (const key of ['large', 'notify']) {
      const waiting = await waitForOp(stack, created.id, key, (o) => o.approval?.state === 'requested');
      expect(waiting.status).toBe('PREPARED');
    }
    const log = await events(stack, created.id);
    expect(log.filter((e) => e.type === 'approval.requested').map((e) => e.data.policy)).toEqual([
      'tenant_policy',
      'tenant_policy',
    ]);
    expect(log.some((e) => e.type === 'execution.status_changed' && e.to_status === 'waiting_for_approval')).toBe(true);
    expect((await stack.effects()).charges[large]).toBeUndefined();

    // Obligations: owner, escalation target, and due_at from the time set for the hold's reason.
    await stack.setFaults({ read_fault: 'field_missing' });
    const heldRun = await submit(stack, [charge(unique('pol-held'))]);
    const held = await waitForOp(stack, heldRun.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    expect(held.terminal_reason).toBe('FIELD_MISSING');
    expect(held.recovery_obligation).toMatchObject({ owner: 'payments-team', escalation_target: 'pager:payments' });
    const heldAt = holdEvent(await events(stack, heldRun.id), held.id);
    const dueInSeconds = (Date.parse(String(held.recovery_obligation!.due_at)) - Date.parse(heldAt.created_at)) / 1000;
    expect(dueInSeconds).toBeGreaterThan(7200 - 60);
    expect(dueInSeconds).toBeLessThan(7200 + 60);
    expectLegalHistory(await events(stack, heldRun.id));

    // Reset: back to the defaults, and nothing needs approval any more.
    const reset = await policy('PUT', {
      obligation_owner: null,
      escalation_target: null,
      obligation_due_seconds: null,
      approval_rules: null,
    });
    expect(reset.body).toMatchObject({ obligation_owner: 'operations', approval_rules: [] });
    const later = await submit(stack, [sms(unique('pol-after'))]);
    expect((await settle(stack, later.id)).operations[0].approval).toBeNull();
  });

  it('a threshold in EUR: 9999 KWD waits for approval (it cannot be compared), 9999 EUR does not', async () => {
    const rule = { connector: 'sandbox.payments', amount_above: 10000, currency: 'EUR' };
    const put = await policy('PUT', { approval_rules: [rule] });
    expect(put.status).toBe(200);
    expect(put.body.approval_rules).toEqual([rule]);
    expect((await policy('GET')).body.approval_rules).toEqual([rule]);
    const kwdRef = unique('pol-kwd');
    const eurRef = unique('pol-eur');
    const kwd = await submit(stack, [charge(kwdRef, { params: { amount: 9999, currency: 'KWD', reference: kwdRef } })]);
    const eur = await submit(stack, [charge(eurRef, { params: { amount: 9999, currency: 'EUR', reference: eurRef } })]);
    try {
      expect((await waitForOp(stack, eur.id, 'charge', (o) => o.status === 'VERIFIED')).approval).toBeNull();
      const waiting = await waitForOp(stack, kwd.id, 'charge', (o) => o.approval?.state === 'requested');
      expect(waiting.status).toBe('PREPARED');
      const requested = (await events(stack, kwd.id)).find((e) => e.type === 'approval.requested');
      expect(requested?.data).toEqual({
        policy: 'tenant_policy',
        rule,
        reason: 'currency_mismatch',
        detail:
          'the approval threshold on sandbox.payments is 10000 EUR; params.currency is "KWD", not EUR, so params.amount (9999) cannot be compared with it',
      });
      expect((await events(stack, eur.id)).some((e) => e.type === 'approval.requested')).toBe(false);
      const effects = await stack.effects();
      expect(effects.charges[kwdRef]).toBeUndefined();
      expect(effects.charges[eurRef].count).toBe(1);
    } finally {
      await http(stack.apiUrl, 'POST', `/v1/executions/${kwd.id}/cancel`, { key: DEMO.agent, body: {} });
      await policy('PUT', { approval_rules: null });
    }
  });

  // The detail cuts the value at 40 characters; cut inside an emoji, the half left made the approval.requested event
  // unwritable (jsonb refuses it), and the operation never reached its reviewer.
  const HTTP_THRESHOLD = { connector: 'http', amount_above: 5000, amount_field: 'body.amount' };

  /**
   * A target of the tenant's own on loopback (allowlisted explicitly), whose log shows whether anything was sent, under a
   * threshold on http amounts at `body.amount`; both undone after `run`, which cancels what it submitted.
   */
  async function underHttpThreshold(run: (target: Awaited<ReturnType<typeof startTarget>>) => Promise<void>) {
    const target = await startTarget();
    try {
      const settings = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
        key: DEMO.admin,
        body: { allow_hosts: [{ host: '127.0.0.1', ports: [target.port], allow_private: true }] },
      });
      expect(settings.status).toBe(200);
      expect((await policy('PUT', { approval_rules: [HTTP_THRESHOLD] })).status).toBe(200);
      await run(target);
    } finally {
      await policy('PUT', { approval_rules: null });
      await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
        key: DEMO.admin,
        body: { allow_hosts: [] },
      });
      await target.close();
    }
  }

  it('a threshold asks approval of a string amount whose shown part ends inside an emoji', async () => {
    await underHttpThreshold(async (target) => {
      const amount = `${'9'.repeat(38)}\u{1f600}9`;
      const held = await submit(stack, [
        httpOp('charge', {
          method: 'POST',
          url: `${target.base}/orders`,
          body: { amount, reference: unique('pol-emoji') },
        }),
      ]);
      try {
        const waiting = await waitForOp(stack, held.id, 'charge', (o) => o.approval?.state === 'requested');
        expect(waiting.status).toBe('PREPARED');
        const requested = (await events(stack, held.id)).find((e) => e.type === 'approval.requested');
        expect(requested?.data).toMatchObject({
          reason: 'amount_unreadable',
          detail: `params.body.amount is "${'9'.repeat(38)}… (a string), not a finite number >= 0, so it cannot be compared with the approval threshold on http (5000)`,
        });
      } finally {
        await http(stack.apiUrl, 'POST', `/v1/executions/${held.id}/cancel`, { key: DEMO.agent, body: {} });
      }
    });
  });

  it('a threshold fails closed: a string amount waits for approval and is not sent; no amount at all is not caught', async () => {
    await underHttpThreshold(async (target) => {
      const ref = unique('pol-str');
      target.setState(ref, 'none');
      const post = httpOp('charge', {
        method: 'POST',
        url: `${target.base}/orders`,
        body: { amount: '9999999', currency: 'EUR', reference: ref },
      });
      const get = httpOp('look', { method: 'GET', url: `${target.base}/state/${ref}` });
      const held = await submit(stack, [post]);
      const read = await submit(stack, [get]);
      try {
        // No amount at the field (a GET has no body): nothing to compare, so the rule does not hold it.
        const looked = await waitForOp(stack, read.id, 'look', (o) => o.status === 'ACKNOWLEDGED');
        expect(looked.approval).toBeNull();
        const waiting = await waitForOp(stack, held.id, 'charge', (o) => o.approval?.state === 'requested');
        expect(waiting.status).toBe('PREPARED');
        const requested = (await events(stack, held.id)).find((e) => e.type === 'approval.requested');
        expect(requested?.data).toEqual({
          policy: 'tenant_policy',
          rule: HTTP_THRESHOLD,
          reason: 'amount_unreadable',
          detail:
            'params.body.amount is "9999999" (a string), not a finite number >= 0, so it cannot be compared with the approval threshold on http (5000)',
        });
        // Nothing was sent: the target saw the GET for this reference and no POST.
        await stack.sweepsPassed(2);
        const mentions = target.seen.filter((r) => r.url.includes(ref) || r.body.includes(ref));
        expect(mentions.map((r) => r.method)).toEqual(['GET']);
        expect((await waitForOp(stack, held.id, 'charge', () => true)).status).toBe('PREPARED');
      } finally {
        await http(stack.apiUrl, 'POST', `/v1/executions/${held.id}/cancel`, { key: DEMO.agent, body: {} });
      }
    });
  });

  it('the older tenant threshold shows as a rule, and PUT of other fields keeps it', async () => {
    await stack.db.dataSource.query(
      `UPDATE tenants SET settings = settings || '{"approvalAmountAbove": 5000}'::jsonb WHERE id = 'demo'`,
    );
    try {
      const kept = await policy('PUT', { obligation_owner: 'ops-2' });
      expect(kept.body.approval_rules).toEqual([
        { connector: 'sandbox.payments', amount_above: 5000, amount_field: 'amount' },
      ]);
      const replaced = await policy('PUT', { approval_rules: [] });
      expect(replaced.body.approval_rules).toEqual([]);
    } finally {
      await stack.db.dataSource.query(
        `UPDATE tenants SET settings = settings - 'approvalAmountAbove' - 'approvalRules' - 'obligationOwner' WHERE id = 'demo'`,
      );
    }
  });

  // The red team's finding: an admin lifts the approval rules, a large charge goes out with no reviewer, the rules are
  // restored a second later, and the policy looks as it was. `GET /v1/admin/changes` keeps every change on the record.
  const putPolicy = (body: unknown, key = DEMO.admin) => policy('PUT', body, key);
  const changes = (query = '', key = DEMO.admin) =>
    http<{ data: Change[]; next_cursor: string | null } & ProblemBody>(
      stack.apiUrl,
      'GET',
      `/v1/admin/changes${query}`,
      { key },
    );
  const allIds = async (key = DEMO.admin) => new Set((await changes('?limit=200', key)).body.data.map((c) => c.id));

  it('lift, submit, restore: both policy changes are listed, newest first, with who and the rules before and after', async () => {
    const rule = { connector: 'sandbox.payments', amount_above: 5000 };
    const set = await putPolicy({ approval_rules: [rule] });
    expect(set.status).toBe(200);
    const admin = set.body.updated_by!;
    const known = await allIds();

    const lifted = await putPolicy({ approval_rules: null });
    expect(lifted.status).toBe(200);
    const ref = unique('redteam');
    const run = await submit(stack, [charge(ref, { params: { amount: 9000, currency: 'EUR', reference: ref } })]);
    const sent = await waitForOp(stack, run.id, 'charge', (o) => o.status === 'VERIFIED');
    expect(sent.approval).toBeNull();
    expect((await stack.effects()).charges[ref].count).toBe(1);
    const restored = await putPolicy({ approval_rules: [rule] });
    expect(restored.status).toBe(200);
    // What the red team relied on: the policy itself looks as if nothing happened.
    expect(restored.body.approval_rules).toEqual([rule]);

    const listed = await changes();
    expect(listed.status).toBe(200);
    const fresh = listed.body.data.filter((c) => !known.has(c.id));
    expect(fresh).toEqual([
      {
        id: expect.stringMatching(/^chg_/),
        kind: 'policy',
        connector: null,
        by: admin,
        at: expect.any(String),
        before: expect.objectContaining({ approval_rules: null }),
        after: expect.objectContaining({ approval_rules: [rule] }),
      },
      {
        id: expect.stringMatching(/^chg_/),
        kind: 'policy',
        connector: null,
        by: admin,
        at: expect.any(String),
        before: expect.objectContaining({ approval_rules: [rule] }),
        after: expect.objectContaining({ approval_rules: null }),
      },
    ]);
    const [restore, lift] = fresh;
    // Only the lifted rules changed; everything else of the policy is the same on both sides.
    expect({ ...lift.before, approval_rules: null }).toEqual(lift.after);
    // The charge went out between the two: its SENT event lies between the changes' times (one database clock).
    const sentAt = (await events(stack, run.id)).find((e) => e.operation_id === sent.id && e.to_status === 'SENT');
    expect(sentAt).toBeDefined();
    const at = (e: unknown) => Date.parse(String((e as { created_at: string }).created_at));
    expect(Date.parse(lift.at)).toBeLessThanOrEqual(at(sentAt));
    expect(at(sentAt)).toBeLessThanOrEqual(Date.parse(restore.at));
    expect((await changes('?kind=policy&limit=2')).body.data.map((c) => c.id)).toEqual([restore.id, lift.id]);

    // Paged as every list: limit, then next_cursor until null.
    const first = await changes('?kind=policy&limit=1');
    expect(first.body.data.map((c) => c.id)).toEqual([restore.id]);
    const second = await changes(`?kind=policy&limit=1&cursor=${first.body.next_cursor}`);
    expect(second.body.data.map((c) => c.id)).toEqual([lift.id]);
  });

  it('is this tenant’s only: another tenant’s admin sees none of it; agent, reviewer and operator keys get 403', async () => {
    expect((await putPolicy({ obligation_owner: 'audited' })).status).toBe(200);
    const ours = await allIds();
    expect(ours.size).toBeGreaterThan(0);
    await ensureTenant(stack.db.dataSource.manager, 'demo-audit-third');
    const { key: thirdAdmin } = await createApiKey(stack.db.dataSource.manager, {
      tenantId: 'demo-audit-third',
      role: 'admin',
    });
    const third = await changes('', thirdAdmin);
    expect(third.status).toBe(200);
    expect(third.body).toEqual({ data: [], next_cursor: null });
    expect((await putPolicy({ obligation_owner: 'other-team' }, OTHER_ADMIN)).status).toBe(200);
    const other = await changes('?limit=200', OTHER_ADMIN);
    expect(other.body.data.length).toBeGreaterThan(0);
    expect(other.body.data.filter((c) => ours.has(c.id))).toEqual([]);
    expect(other.body.data.every((c) => c.after.obligation_owner === 'other-team')).toBe(true);
    // Our cursor gives nothing of ours to another tenant either.
    const paged = await changes(`?cursor=${[...ours][0]}`, thirdAdmin);
    expect(paged.body.data).toEqual([]);
    for (const key of [DEMO.agent, DEMO.reviewer, DEMO.operator]) {
      const refused = await changes('', key);
      expect({ key, status: refused.status, type: refused.headers.get('content-type') }).toEqual({
        key,
        status: 403,
        type: expect.stringContaining('application/problem+json'),
      });
    }
    expect((await http(stack.apiUrl, 'GET', '/v1/admin/changes')).status).toBe(401);
  });

  it('refuses bad query values with 400 naming the field', async () => {
    const cases: [string, string][] = [
      ['?limit=0', 'limit'],
      ['?limit=1e2', 'limit'],
      ['?kind=approval', 'kind'],
      ['?cursor=exe_0123', 'cursor'],
      ['?connector=%20http', 'connector'],
      ['?surprise=1', 'surprise'],
    ];
    for (const [query, field] of cases) {
      const res = await changes(query);
      expect({ query, status: res.status, type: res.headers.get('content-type') }).toEqual({
        query,
        status: 400,
        type: expect.stringContaining('application/problem+json'),
      });
      expect(res.body.errors).toEqual(expect.arrayContaining([expect.objectContaining({ field })]));
    }
    // Given empty, a parameter is not given (as on every list).
    expect((await changes('?kind=&connector=&cursor=&limit=')).status).toBe(200);
  });

  it('refuses a connector filter that names no connector (400 known_connector), not an empty list that reads "never changed"', async () => {
    for (const name of ['nope', 'sandbox.payment', 'HTTP']) {
      const res = await changes(`?connector=${name}`);
      expect({ name, status: res.status }).toEqual({ name, status: 400 });
      expect(res.body).toMatchObject({
        type: 'https://verity.dev/problems/validation-error',
        errors: [
          {
            field: 'connector',
            rule: 'known_connector',
            message: `unknown connector "${name}" (see GET /v1/connectors)`,
          },
        ],
      });
    }
    // A connector with no change on record is an empty list, not a refusal.
    const tenant = 'demo-audit-retired';
    await ensureTenant(stack.db.dataSource.manager, tenant);
    const { key } = await createApiKey(stack.db.dataSource.manager, { tenantId: tenant, role: 'admin' });
    expect((await changes('?connector=sandbox.sms', key)).body).toEqual({ data: [], next_cursor: null });
    // The history is append-only and outlives a connector a later release removes: its changes stay listed by name.
    const settings = { allow_hosts: [], spending_caps: [], secrets: [] };
    await stack.db.dataSource.query(
      `INSERT INTO admin_changes (id, tenant_id, kind, connector, changed_by, before, after)
       VALUES ('chg_retired0000000000000000', $1, 'connector_settings', 'retired.crm', 'key_gone', $2, $2)`,
      [tenant, JSON.stringify(settings)],
    );
    const retired = await changes('?connector=retired.crm', key);
    expect(retired.status).toBe(200);
    expect(retired.body.data.map((c) => [c.id, c.connector])).toEqual([['chg_retired0000000000000000', 'retired.crm']]);
    // Held by another tenant's history only, the name is as unknown to this one as any other.
    expect((await changes('?connector=retired.crm')).status).toBe(400);
  });

  it('refuses a connector filter with a kind whose changes name no connector (400), not an empty list that reads "never changed"', async () => {
    // A policy change (its approval rules name connectors) and a webhook change are recorded without a connector: asked
    // for with one, the list was always empty, which read as "the payments approval policy was never changed".
    expect((await putPolicy({ approval_rules: [{ connector: 'sandbox.payments', amount_above: 100 }] })).status).toBe(
      200,
    );
    for (const kind of ['policy', 'webhook_endpoint']) {
      const res = await changes(`?kind=${kind}&connector=sandbox.payments`);
      expect({ kind, status: res.status }).toEqual({ kind, status: 400 });
      expect(res.body).toMatchObject({
        type: 'https://verity.dev/problems/validation-error',
        errors: [{ field: 'connector', rule: 'only_with_connector_settings' }],
      });
    }
    // The connector's own settings changes are still listed by it, with or without the kind.
    expect((await changes('?kind=connector_settings&connector=sandbox.payments')).status).toBe(200);
    expect((await changes('?connector=sandbox.payments')).status).toBe(200);
    expect((await changes('?kind=policy')).body.data.length).toBeGreaterThan(0);
    expect((await putPolicy({ approval_rules: null })).status).toBe(200);
  });

  it('a change that is refused leaves no entry', async () => {
    const known = await allIds();
    expect((await putPolicy({ approval_rules: [{ connector: 'nope' }] })).status).toBe(400);
    expect((await putPolicy({ surprise: true })).status).toBe(400);
    const settings = (method: string, path: string, body?: unknown) =>
      http(stack.apiUrl, method, `/v1/admin/connector-settings/${path}`, { key: DEMO.admin, body });
    expect((await settings('PUT', 'sandbox.payments', { allow_hosts: [{ host: 'a.example' }] })).status).toBe(400);
    expect((await settings('PUT', 'sandbox.sms', { secrets: { token: 'x' } })).status).toBe(400);
    expect((await settings('PUT', 'nope', { allow_hosts: [] })).status).toBe(404);
    expect((await settings('DELETE', 'http/secrets/never_set')).status).toBe(404);
    expect([...(await allIds())].filter((id) => !known.has(id))).toEqual([]);
  });

  it('connector settings changes list the secret names, never a value', async () => {
    const SECRET = `sk_live_${unique('audit-secret')}`;
    const known = await allIds();
    const put = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: {
        allow_hosts: [{ host: 'api.example.com', ports: [443], secrets: ['audit_token'] }],
        spending_caps: [{ period: 'day', max_operations: 100 }],
        secrets: { audit_token: SECRET },
      },
    });
    expect(put.status).toBe(200);
    // A rotation: the same name, a new value. The names read alike before and after; when it was written does not.
    const rotated = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { secrets: { audit_token: `${SECRET}-rotated` } },
    });
    expect(rotated.status).toBe(200);
    const removed = await http(stack.apiUrl, 'DELETE', '/v1/admin/connector-settings/http/secrets/audit_token', {
      key: DEMO.admin,
    });
    expect(removed.status).toBe(204);
    const cleared = await http(stack.apiUrl, 'DELETE', '/v1/admin/connector-settings/http', { key: DEMO.admin });
    expect(cleared.status).toBe(204);

    const listed = await changes('?connector=http');
    expect(listed.text).not.toContain(SECRET);
    expect((await changes('?limit=200')).text).not.toContain(SECRET);
    const fresh = listed.body.data.filter((c) => !known.has(c.id));
    const writtenAt = (c: Change | undefined) =>
      (c?.after as { secrets_written_at?: Record<string, string> }).secrets_written_at?.audit_token ?? '';
    const [setAt, rotatedAt] = [writtenAt(fresh[3]), writtenAt(fresh[2])];
    expect(setAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
    expect(rotatedAt > setAt).toBe(true);
    const empty = {
      allow_hosts: [],
      spending_caps: [],
      secrets: [],
      read_back_binding: 'declared',
      secrets_written_at: {},
    };
    // The secrets an entry binds are recorded with it (names; the binding outlives the secret's deletion).
    const configured = {
      allow_hosts: [{ host: 'api.example.com', ports: [443], secrets: ['audit_token'] }],
      spending_caps: [{ period: 'day', max_operations: 100 }],
      read_back_binding: 'declared',
    };
    expect(fresh.map(({ kind, connector, before, after }) => ({ kind, connector, before, after }))).toEqual([
      {
        kind: 'connector_settings',
        connector: 'http',
        before: { ...configured, secrets: [], secrets_written_at: {} },
        after: empty,
      },
      {
        kind: 'connector_settings',
        connector: 'http',
        before: { ...configured, secrets: ['audit_token'], secrets_written_at: { audit_token: rotatedAt } },
        after: { ...configured, secrets: [], secrets_written_at: {} },
      },
      {
        kind: 'connector_settings',
        connector: 'http',
        before: { ...configured, secrets: ['audit_token'], secrets_written_at: { audit_token: setAt } },
        after: { ...configured, secrets: ['audit_token'], secrets_written_at: { audit_token: rotatedAt } },
      },
      {
        kind: 'connector_settings',
        connector: 'http',
        before: empty,
        after: { ...configured, secrets: ['audit_token'], secrets_written_at: { audit_token: setAt } },
      },
    ]);
    expect(new Set(fresh.map((c) => c.by)).size).toBe(1);
    expect((await changes('?kind=connector_settings&connector=http')).body.data).toEqual(listed.body.data);
    expect((await changes('?kind=connector_settings')).body.data.every((c) => c.kind === 'connector_settings')).toBe(
      true,
    );
  });
});

describe('admin: a policy read and written back pins no default', () => {
  let stack: Stack;
  const ADMIN = 'test-policy-round-trip-admin-key';
  beforeAll(async () => {
    stack = await Stack.start({
      label: 'apolicyrt',
      dispatchers: 0,
      reconcilers: 0,
      env: { OBLIGATION_DUE_MS: '600000' },
    });
    await ensureTenant(stack.db.dataSource.manager, 'round-trip');
    await createApiKey(stack.db.dataSource.manager, { tenantId: 'round-trip', role: 'admin', key: ADMIN });
  });
  afterAll(async () => stack?.stop());

  const policy = (url: string, method: 'GET' | 'PUT', body?: unknown, headers: Record<string, string> = {}) =>
    http<Policy & ProblemBody>(url, method, '/v1/admin/policy', { key: ADMIN, body, headers });
  /** What a GET shows the tenant set: its body without the members a PUT does not take. */
  const settingsOf = (shown: Policy) => {
    const { effective: _effective, updated_at: _at, updated_by: _by, ...settings } = shown;
    return settings;
  };
  const stored = async () =>
    (
      (await stack.db.dataSource.query(`SELECT settings FROM tenants WHERE id = 'round-trip'`)) as {
        settings: { obligationDueSeconds?: Record<string, number> } | null;
      }[]
    )[0].settings?.obligationDueSeconds;

  it('GET → PUT of the same settings → another configured default: the tenant’s effective due time follows it', async () => {
    // Nothing set: the tenant's due times are null, what applies is under `effective`.
    const untouched = await policy(stack.apiUrl, 'GET');
    expect(untouched.status).toBe(200);
    expect(untouched.body.obligation_due_seconds).toBeNull();
    expect(untouched.body.effective).toEqual({ obligation_due_seconds: { default: 600 } });
    expect((await policy(stack.apiUrl, 'PUT', settingsOf(untouched.body))).status).toBe(200);
    expect(await stored()).toBeUndefined();

    // One reason's due time set; the GET pasted back (If-Match its ETag) as a PUT.
    expect((await policy(stack.apiUrl, 'PUT', { obligation_due_seconds: { SOURCE_UNREACHABLE: 60 } })).status).toBe(
      200,
    );
    const got = await policy(stack.apiUrl, 'GET');
    expect(got.body.obligation_due_seconds).toEqual({ SOURCE_UNREACHABLE: 60 });
    expect(got.body.effective).toEqual({ obligation_due_seconds: { default: 600, SOURCE_UNREACHABLE: 60 } });
    const put = await policy(stack.apiUrl, 'PUT', settingsOf(got.body), { 'if-match': got.headers.get('etag')! });
    expect(put.status).toBe(200);
    expect(put.headers.get('etag')).toBe(got.headers.get('etag'));
    expect(await stored()).toEqual({ SOURCE_UNREACHABLE: 60 });

    // The platform's default changes (an API configured with another): the tenant's default follows it.
    const renewed = await stack.startApi({ OBLIGATION_DUE_MS: '1200000' });
    const after = await policy(renewed, 'GET');
    expect({ own: after.body.obligation_due_seconds, effective: after.body.effective }).toEqual({
      own: { SOURCE_UNREACHABLE: 60 },
      effective: { obligation_due_seconds: { default: 1200, SOURCE_UNREACHABLE: 60 } },
    });
  });

  it('a tenant that set nothing: its GET sent back (If-Match) keeps the ETag and stores nothing; the whole GET is refused naming effective', async () => {
    const FRESH = 'test-policy-round-trip-fresh-admin-key';
    await ensureTenant(stack.db.dataSource.manager, 'round-trip-fresh');
    await createApiKey(stack.db.dataSource.manager, { tenantId: 'round-trip-fresh', role: 'admin', key: FRESH });
    const fresh = (method: 'GET' | 'PUT', body?: unknown, headers: Record<string, string> = {}) =>
      http<Policy & ProblemBody>(stack.apiUrl, method, '/v1/admin/policy', { key: FRESH, body, headers });
    const storedPolicy = async () =>
      (
        (await stack.db.dataSource.query(
          `SELECT settings - 'policyUpdatedAt' - 'policyUpdatedBy' AS settings FROM tenants WHERE id = 'round-trip-fresh'`,
        )) as { settings: Record<string, unknown> }[]
      )[0].settings;
    const got = await fresh('GET');
    expect(got.status).toBe(200);
    const etag = got.headers.get('etag')!;
    // The read-only members sent back are refused, each named, nothing written.
    const whole = await fresh('PUT', got.body, { 'if-match': etag });
    expect(whole.status).toBe(400);
    expect(whole.body.errors?.map((e) => [e.field, e.rule]).sort()).toEqual([
      ['effective', 'unknown_field'],
      ['updated_at', 'unknown_field'],
      ['updated_by', 'unknown_field'],
    ]);
    // Its settings sent back: the same policy, so the same version, and no value of the defaults stored as the tenant's.
    const put = await fresh('PUT', settingsOf(got.body), { 'if-match': etag });
    expect(put.status).toBe(200);
    expect(put.headers.get('etag')).toBe(etag);
    expect(await storedPolicy()).toEqual({});
    const again = await fresh('GET');
    expect({ etag: again.headers.get('etag'), settings: settingsOf(again.body) }).toEqual({
      etag,
      settings: settingsOf(got.body),
    });
  });
});

function holdEvent(log: Event[], opId: string): Event & { created_at: string } {
  const found = log.find((e) => e.operation_id === opId && e.to_status === 'MANUAL_REVIEW');
  if (!found) throw new Error('no MANUAL_REVIEW event');
  return found as Event & { created_at: string };
}
