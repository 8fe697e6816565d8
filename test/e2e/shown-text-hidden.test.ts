import { DEMO, Stack } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { getOperation, heldUnsentCharge, resetSandbox, submit, waitForApprovalRequest } from './dispatcher-helpers';
import type { FieldError } from '@verity/sdk';
import { HIDDEN_IN_A_WORD, expectHiddenRefused } from '../support/hidden-text';

/**
 * Text a person reads before deciding — the tenant policy's `obligation_owner` and `escalation_target` (shown with each
 * held operation in the review queue), a reviewer's resolution `evidence`, a denial's or a cancellation's `reason`
 * (shown to the next reviewer in the operation's history) — may not hold a bidi control (U+202E, U+2066–U+2069), an
 * invisible character (U+200B, U+FEFF, U+00AD…) or a control character beyond tab and line breaks: `\u202Eraeb-yap`
 * is shown as `pay-bear` reversed, a zero-width space makes one name read as another. Refused with the rule a webhook
 * URL and an API key's label obey: 400 naming the field, rule `invalid_format`, the message naming the character, and
 * nothing written (no change entry, no event, no transition). Evidence and reasons keep their line breaks and tabs.
 */
describe('text shown to a person who decides, holding characters that hide or reorder it', () => {
  let stack: Stack;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'shown-text-hidden' });
    // Charges above 5000 wait for approval (the held charge of the resolution below is 1250: it does not).
    const put = await http(stack.apiUrl, 'PUT', '/v1/admin/policy', {
      key: DEMO.admin,
      body: { approval_rules: [{ connector: 'sandbox.payments', amount_above: 5000 }] },
    });
    expect(put.status).toBe(200);
  }, 120_000);
  afterAll(async () => stack?.stop());
  afterEach(async () => resetSandbox(stack));

  const written = async () =>
    (
      (await stack.db.dataSource.query(
        `SELECT (SELECT count(*) FROM admin_changes)::int AS changes,
                (SELECT count(*) FROM events)::int AS events,
                (SELECT count(*) FROM executions)::int AS executions,
                (SELECT string_agg(id || ':' || status, ',' ORDER BY id) FROM operations) AS operations`,
      )) as { changes: number; events: number; executions: number; operations: string }[]
    )[0];

  const hidden: [string, string][] = [['\u202Eraeb-yap', 'U+202E'], ...HIDDEN_IN_A_WORD];

  describe.each(['obligation_owner', 'escalation_target'])('policy %s', (field) => {
    it.each(hidden.map(([value, named]) => [named, value]))(
      'a value holding %s is refused (400 invalid_format naming it), no change written',
      async (named, value) => {
        const before = await written();
        const policyBefore = await http(stack.apiUrl, 'GET', '/v1/admin/policy', { key: DEMO.admin });
        const put = await http<{ errors: FieldError[] }>(stack.apiUrl, 'PUT', '/v1/admin/policy', {
          key: DEMO.admin,
          body: { [field]: value },
        });
        expectHiddenRefused(put, field, named);
        expect(await written()).toEqual(before);
        expect((await http(stack.apiUrl, 'GET', '/v1/admin/policy', { key: DEMO.admin })).body).toEqual(
          policyBefore.body,
        );
      },
    );

    it('a line break in it is refused too (one line: it is a name)', async () => {
      const put = await http<{ errors: FieldError[] }>(stack.apiUrl, 'PUT', '/v1/admin/policy', {
        key: DEMO.admin,
        body: { [field]: 'pay\nteam' },
      });
      expectHiddenRefused(put, field, 'U+000A');
    });
  });

  it('a reason to deny, a reason to cancel holding one are refused (nothing decided, nothing cancelled)', async () => {
    const reference = unique('hidden-deny');
    const created = await submit(stack, [charge(reference, { params: { amount: 6000, currency: 'EUR', reference } })]);
    const op = (await waitForApprovalRequest(stack, created.id)).execution.operations[0];
    for (const [value, named] of hidden) {
      const before = await written();
      const denied = await http<{ errors: FieldError[] }>(stack.apiUrl, 'POST', `/v1/operations/${op.id}/approval`, {
        key: DEMO.reviewer,
        body: { decision: 'deny', reason: value },
      });
      expectHiddenRefused(denied, 'reason', named);
      const cancelled = await http<{ errors: FieldError[] }>(
        stack.apiUrl,
        'POST',
        `/v1/executions/${created.id}/cancel`,
        { key: DEMO.reviewer, body: { reason: value } },
      );
      expectHiddenRefused(cancelled, 'reason', named);
      expect(await written()).toEqual(before);
    }
    expect((await getOperation(stack, op.id)).approval?.state).toBe('requested');
    // Line breaks and tabs are a reason's own.
    const denied = await http(stack.apiUrl, 'POST', `/v1/operations/${op.id}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'deny', reason: 'amount too high\n\tsee ticket 12' },
    });
    expect(denied.status).toBe(200);
  });

  it('resolution evidence holding one is refused (the operation stays held); evidence of several lines is taken', async () => {
    const { held } = await heldUnsentCharge(stack, unique('hidden-evidence'));
    for (const [value, named] of hidden) {
      const before = await written();
      const resolved = await http<{ errors: FieldError[] }>(stack.apiUrl, 'POST', `/v1/operations/${held.id}/resolve`, {
        key: DEMO.reviewer,
        body: { status: 'FAILED', evidence: `provider dashboard: ${value}` },
      });
      expectHiddenRefused(resolved, 'evidence', named);
      expect(await written()).toEqual(before);
    }
    expect((await getOperation(stack, held.id)).status).toBe('MANUAL_REVIEW');
    const resolved = await http(stack.apiUrl, 'POST', `/v1/operations/${held.id}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'FAILED', evidence: 'provider dashboard:\n\tno charge for this reference\r\n' },
    });
    expect(resolved.status).toBe(200);
  });
});
