import { ConnectorRegistry } from '@verity/connectors';
import { SUBMISSION_EXAMPLE } from '../openapi-examples';
import { ConnectorSettingsInputSchema } from '@verity/connectors';
import { PolicyInputSchema } from '../admin/policy.schema';
import { LIMITS, Submission, capAmountErrors, validateSubmission, zodErrors } from './submission';

const registry = new ConnectorRegistry();

function charge(key: string, extra: Record<string, unknown> = {}) {
  return {
    key,
    connector: 'sandbox.payments',
    action: 'charge',
    params: { amount: 100, currency: 'EUR', reference: `ref-${key}` },
    ...extra,
  };
}

function errorsOf(body: unknown) {
  const result = validateSubmission(body, registry);
  return 'errors' in result ? result.errors : [];
}

describe('validateSubmission', () => {
  it('accepts the docs/contract.md §5 example shape', () => {
    // The README's submission with the fields §5 spells out that it leaves to their defaults.
    const [chargeOp, notify] = SUBMISSION_EXAMPLE.operations;
    const result = validateSubmission(
      {
        ...SUBMISSION_EXAMPLE,
        deadline_seconds: 600,
        operations: [
          {
            ...chargeOp,
            irreversible: true,
            requires_approval: false,
            verification_method: 'read_after_write',
            expected_state: { charged: false },
            depends_on: [],
          },
          notify,
        ],
      },
      registry,
    );
    expect(result).toHaveProperty('ok');
  });

  it('refuses irreversible: false on a connector declared irreversible (irreversible_floor)', () => {
    const errors = errorsOf({ agent_id: 'a', intent: 'i', operations: [charge('c', { irreversible: false })] });
    expect(errors).toEqual([
      expect.objectContaining({ field: 'operations[0].irreversible', rule: 'irreversible_floor' }),
    ]);
    expect(errorsOf({ agent_id: 'a', intent: 'i', operations: [charge('c', { irreversible: true })] })).toEqual([]);
  });

  it('names unknown fields at every level instead of dropping them', () => {
    const errors = errorsOf({
      agent_id: 'a',
      intent: 'i',
      tenant_id: 'x',
      operations: [charge('c', { status: 'VERIFIED' })],
    });
    expect(errors).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ field: 'tenant_id', rule: 'unknown_field' }),
        expect.objectContaining({ field: 'operations[0].status', rule: 'unknown_field' }),
      ]),
    );
  });

  it('rejects an unknown connector and an unknown action with the catalogue rule', () => {
    expect(errorsOf({ agent_id: 'a', intent: 'i', operations: [charge('c', { connector: 'nope' })] })).toEqual([
      expect.objectContaining({ field: 'operations[0].connector', rule: 'known_connector' }),
    ]);
    expect(errorsOf({ agent_id: 'a', intent: 'i', operations: [charge('c', { action: 'refund' })] })).toEqual([
      expect.objectContaining({ field: 'operations[0].action', rule: 'known_action' }),
    ]);
  });

  it("checks params against the connector's schema", () => {
    const errors = errorsOf({
      agent_id: 'a',
      intent: 'i',
      operations: [charge('c', { params: { amount: -1, currency: 'euro', reference: 'r' } })],
    });
    expect(errors.map((e) => e.field).sort()).toEqual(['operations[0].params.amount', 'operations[0].params.currency']);
  });

  it('refuses duplicate keys, unknown and self dependencies, and cycles', () => {
    const other = { params: { amount: 100, currency: 'EUR', reference: 'ref-other' } };
    expect(errorsOf({ agent_id: 'a', intent: 'i', operations: [charge('x'), charge('x', other)] })).toEqual([
      expect.objectContaining({ field: 'operations[1].key', rule: 'unique' }),
    ]);
    expect(errorsOf({ agent_id: 'a', intent: 'i', operations: [charge('x', { depends_on: ['ghost'] })] })).toEqual([
      expect.objectContaining({ field: 'operations[0].depends_on[0]', rule: 'known_key' }),
    ]);
    expect(errorsOf({ agent_id: 'a', intent: 'i', operations: [charge('x', { depends_on: ['x'] })] })).toEqual([
      expect.objectContaining({ rule: 'no_self_dependency' }),
    ]);
    const cycle = errorsOf({
      agent_id: 'a',
      intent: 'i',
      operations: [
        charge('a', { depends_on: ['c'] }),
        charge('b', { depends_on: ['a'] }),
        charge('c', { depends_on: ['b'] }),
      ],
    });
    expect(cycle).toEqual([expect.objectContaining({ field: 'operations', rule: 'acyclic' })]);
    expect(cycle[0].message).toMatch(/a -> c -> b -> a|c -> b -> a -> c|b -> a -> c -> b/);
  });

  it('refuses a second operation naming the same provider effect (duplicate_reference), naming the first', () => {
    const same = (key: string, amount = 100) =>
      charge(key, { params: { amount, currency: 'EUR', reference: 'order-7' } });
    const errors = errorsOf({
      agent_id: 'a',
      intent: 'i',
      operations: [same('first'), charge('other'), same('second', 250), same('third')],
    });
    expect(errors).toEqual([
      {
        field: 'operations[2].params.reference',
        rule: 'duplicate_reference',
        message:
          'operation "first" already names this sandbox.payments reference: the provider would take both as one effect (the second a replay of the first); give each its own reference, or submit one operation',
      },
      expect.objectContaining({ field: 'operations[3].params.reference', rule: 'duplicate_reference' }),
    ]);
    expect(errors[1].message).toMatch(/^operation "first" already names/);
    // Distinct references, and a connector that names no provider effect (SMS: every send is its own), pass.
    const sms = (key: string) => ({
      key,
      connector: 'sandbox.sms',
      action: 'send',
      params: { to: '+15550100', body: 'x', client_ref: 'same' },
    });
    expect(
      errorsOf({ agent_id: 'a', intent: 'i', operations: [charge('a'), charge('b'), sms('s1'), sms('s2')] }),
    ).toEqual([]);
    // Params the schema refuses are reported as such, not as a duplicate.
    const bad = charge('bad', { params: { amount: -1, currency: 'EUR', reference: 'order-7' } });
    expect(errorsOf({ agent_id: 'a', intent: 'i', operations: [same('first'), bad] }).map((e) => e.rule)).toEqual([
      'too_small',
    ]);
    // The same reference with a trailing space would reach the provider as the same key (a header loses the space):
    // refused as a reference no header carries.
    const spaced = charge('spaced', { params: { amount: 100, currency: 'EUR', reference: 'order-7 ' } });
    expect(errorsOf({ agent_id: 'a', intent: 'i', operations: [same('first'), spaced] })).toEqual([
      expect.objectContaining({ field: 'operations[1].params.reference', rule: 'invalid_format' }),
    ]);
  });

  it('refuses read_after_write on a connector that cannot read back', () => {
    const errors = errorsOf({
      agent_id: 'a',
      intent: 'i',
      operations: [
        {
          key: 's',
          connector: 'sandbox.sms',
          action: 'send',
          params: { to: '+15550100', body: 'x' },
          verification_method: 'read_after_write',
        },
      ],
    });
    expect(errors).toEqual([expect.objectContaining({ rule: 'read_back_available' })]);
  });

  it('caps operations, deadline and free-form JSON', () => {
    const many = Array.from({ length: LIMITS.operations + 1 }, (_, i) => charge(`k${i}`));
    expect(errorsOf({ agent_id: 'a', intent: 'i', operations: many })).toEqual([
      expect.objectContaining({ field: 'operations', rule: 'too_big' }),
    ]);
    expect(errorsOf({ agent_id: 'a', intent: 'i', deadline_seconds: 0, operations: [charge('c')] })).toEqual([
      expect.objectContaining({ field: 'deadline_seconds', rule: 'too_small' }),
    ]);
    let deep: unknown = 'x';
    for (let i = 0; i < LIMITS.json.depth + 2; i += 1) deep = [deep];
    const errors = errorsOf({ agent_id: 'a', intent: 'i', operations: [charge('c', { expected_state: { deep } })] });
    expect(errors).toEqual([expect.objectContaining({ rule: 'max_depth' })]);
    expect(errors[0].field.startsWith('operations[0].expected_state.deep')).toBe(true);
  });

  it('refuses criteria that name no operation', () => {
    expect(
      errorsOf({
        agent_id: 'a',
        intent: 'i',
        operations: [charge('c')],
        criteria: [{ key: 'k', operation: 'ghost', expect_status: 'VERIFIED' }],
      }),
    ).toEqual([expect.objectContaining({ field: 'criteria[0].operation', rule: 'known_key' })]);
  });
});

describe('capAmountErrors: amounts a tenant’s cap could not count, at intake', () => {
  const submission = (...ops: ReturnType<typeof charge>[]) =>
    ({ agent_id: 'a', intent: 'i', operations: ops }) as Submission;
  const eurCap = { period: 'day', max_amount: 1000, amount_field: 'amount', currency: 'EUR' };
  const caps = (cap: object) => new Map([['sandbox.payments', [cap as typeof eurCap]]]);

  it('refuses an amount in another currency than the cap’s (currency_mismatch, naming the currency field)', () => {
    const kwd = charge('kwd', { params: { amount: 999, currency: 'KWD', reference: 'r1' } });
    const eur = charge('eur', { params: { amount: 999, currency: 'EUR', reference: 'r2' } });
    expect(capAmountErrors(submission(eur, kwd), caps(eurCap))).toEqual([
      {
        field: 'operations[1].params.currency',
        rule: 'currency_mismatch',
        message: `the tenant's spending cap on sandbox.payments (per day) counts params.amount in EUR: params.currency must be EUR (it is "KWD")`,
      },
    ]);
    const custom = { ...eurCap, currency_field: 'reference' };
    expect(capAmountErrors(submission(eur), caps(custom))).toEqual([
      expect.objectContaining({ field: 'operations[0].params.reference', rule: 'currency_mismatch' }),
    ]);
  });

  it('names an unreadable amount first (one error per operation); a cap without a currency takes any (as before)', () => {
    const negative = charge('neg', { params: { amount: -5, currency: 'KWD', reference: 'r' } });
    expect(capAmountErrors(submission(negative), caps(eurCap))).toEqual([
      expect.objectContaining({ field: 'operations[0].params.amount', rule: 'positive_amount' }),
    ]);
    const kwd = charge('kwd', { params: { amount: 999, currency: 'KWD', reference: 'r1' } });
    const plain = { period: 'day', max_amount: 1000, amount_field: 'amount' };
    expect(capAmountErrors(submission(kwd), caps(plain))).toEqual([]);
  });
});

describe('zodErrors: one number out of range is one error', () => {
  // zod's int() also refuses a number beyond 2^53 ("expected int to be <=9007199254740991"): 1e300 was answered with
  // that and the field's own range, two errors for one field, the first naming a bound the field does not have.
  it.each([
    ['deadline_seconds', 1e300, `Too big: expected number to be <=${LIMITS.deadlineSeconds.max}`],
    ['deadline_seconds', -1e300, `Too small: expected number to be >=${LIMITS.deadlineSeconds.min}`],
  ])("a submission's %s of %d", (field, value, message) => {
    const errors = errorsOf({ agent_id: 'a', intent: 'b', [field]: value, operations: [charge('c')] });
    expect(errors).toEqual([{ field, rule: expect.any(String), message }]);
  });

  it.each([
    [1e300, 'at most 2592000 seconds (30 days)'],
    [-1e300, 'at least 1 second'],
    [2 ** 53 + 2, 'at most 2592000 seconds (30 days)'],
  ])('a policy due time of %d', (value, message) => {
    const parsed = PolicyInputSchema.safeParse({ obligation_due_seconds: { default: value } });
    expect(parsed.success).toBe(false);
    expect(zodErrors(parsed.error!)).toEqual([
      { field: 'obligation_due_seconds.default', rule: expect.any(String), message },
    ]);
  });

  it('still says "whole seconds" of a fraction, and both errors of two fields', () => {
    const parsed = PolicyInputSchema.safeParse({ obligation_due_seconds: { default: 1.5, SOURCE_UNREACHABLE: 1e300 } });
    expect(zodErrors(parsed.error!).map((e) => [e.field, e.message])).toEqual([
      ['obligation_due_seconds.default', 'whole seconds'],
      ['obligation_due_seconds.SOURCE_UNREACHABLE', 'at most 2592000 seconds (30 days)'],
    ]);
  });
});

describe('zodErrors: a value of the wrong type is one error', () => {
  // zod runs a length check on any value with a length, also after the type check refused it: agent_id: [] was told
  // "expected string" and "expected array to have >=1 items", as if the field took an array.
  it.each([
    ['agent_id', 'an empty array', [], 'Invalid input: expected string, received array'],
    ['intent', 'an array', ['x'], 'Invalid input: expected string, received array'],
    ['operations', 'a long string', 'x'.repeat(500), 'Invalid input: expected array, received string'],
  ])("a submission's %s of %s", (field, _what, value, message) => {
    const errors = errorsOf({ agent_id: 'a', intent: 'b', operations: [charge('c')], [field]: value });
    expect(errors).toEqual([{ field, rule: 'invalid_type', message }]);
  });

  it.each([
    ['allow_hosts', { allow_hosts: 'x'.repeat(500) }, 'Invalid input: expected array, received string'],
    ['allow_hosts[0].host', { allow_hosts: [{ host: [] }] }, 'Invalid input: expected string, received array'],
    ['secrets.A', { secrets: { A: Array(5000).fill('x') } }, 'Invalid input: expected string, received array'],
  ])('connector settings: %s', (field, body, message) => {
    const parsed = ConnectorSettingsInputSchema.safeParse(body);
    expect(zodErrors(parsed.error!)).toEqual([{ field, rule: 'invalid_type', message }]);
  });
});

describe('zodErrors: an empty string is one error', () => {
  // An empty key was told "expected string to have >=1 characters" and "letters, digits, ... only", an empty http URL
  // also "an absolute http:// or https:// URL": the format of nothing, beside the one fault (it is empty).
  it.each([
    ['operations[0].key', { key: '' }],
    ['operations[0].depends_on[0]', { depends_on: [''] }],
    ['operations[0].params.url', { connector: 'http', action: 'request', params: { method: 'GET', url: '' } }],
  ])('%s', (field, op) => {
    const errors = errorsOf({ agent_id: 'a', intent: 'b', operations: [{ ...charge('c'), ...op }] });
    expect(errors).toEqual([{ field, rule: 'too_small', message: expect.any(String) }]);
  });
});
