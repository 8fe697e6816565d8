import { OperationStatus, TerminalReason } from './operation';
import {
  DENIAL,
  HOLD_REASONS,
  TENANT_APPROVAL_KEYS,
  approvalRuleFor,
  approvalRuleMatch,
  currencyMismatch,
  decimalPlaces,
  describeFoundAmount,
  describeFoundCurrency,
  needsApproval,
  releaseGrantsApproval,
  approvalDecidable,
  paramAt,
  lookUpParam,
  foldedMemberName,
  tenantApprovalRules,
  shownApprovalState,
  approvalRequestWaits,
} from './policy';

describe('approval rules', () => {
  const payments = { connector: 'sandbox.payments', amount_above: 5000 };

  it('asks for approval above the threshold only, strictly', () => {
    expect(approvalRuleFor({ connector: 'sandbox.payments', params: { amount: 6000 } }, [payments])).toBe(payments);
    expect(approvalRuleFor({ connector: 'sandbox.payments', params: { amount: 5000 } }, [payments])).toBeNull();
    expect(approvalRuleFor({ connector: 'sandbox.payments', params: { amount: 10 } }, [payments])).toBeNull();
  });

  it('applies to its connector only', () => {
    expect(approvalRuleFor({ connector: 'sandbox.sms', params: { amount: 9999 } }, [payments])).toBeNull();
  });

  it('a rule without a threshold asks for every operation of the connector', () => {
    const all = { connector: 'sandbox.sms' };
    expect(approvalRuleFor({ connector: 'sandbox.sms', params: {} }, [payments, all])).toBe(all);
  });

  it('reads the amount at a dot path, and ignores an operation with nothing there', () => {
    const nested = { connector: 'http', amount_above: 100, amount_field: 'body.total' };
    expect(approvalRuleFor({ connector: 'http', params: { body: { total: 101 } } }, [nested])).toBe(nested);
    expect(approvalRuleFor({ connector: 'http', params: { body: { total: 100 } } }, [nested])).toBeNull();
    // The field is not there (no body, a null body, a body without it): no amount, nothing to compare.
    expect(approvalRuleFor({ connector: 'http', params: {} }, [nested])).toBeNull();
    expect(approvalRuleFor({ connector: 'http', params: { body: null } }, [nested])).toBeNull();
    expect(approvalRuleFor({ connector: 'http', params: { method: 'GET', body: {} } }, [nested])).toBeNull();
  });

  it.each<[string, unknown, string]>([
    ['an array', [{ total: 9999999 }], '[{"total":9999999}] (an array)'],
    ['a JSON string', '{"total":9999999}', '"{\\"total\\":9999999}" (a string)'],
    ['a number', 101, '101'],
  ])('a path that runs into %s hides whatever amount it carries: it needs approval (fail safe)', (_, body, shown) => {
    const nested = { connector: 'http', amount_above: 100, amount_field: 'body.total' };
    expect(approvalRuleMatch({ connector: 'http', params: { body } }, [nested])).toEqual({
      rule: nested,
      reason: 'amount_unreadable',
      detail: `params.body is ${shown}, so params.body.total cannot be read and compared with the approval threshold on http (100)`,
    });
  });

  describe('fails closed on an amount it cannot compare', () => {
    const rule = { connector: 'http', amount_above: 5000, amount_field: 'body.amount' };
    const http = (amount: unknown) => ({ connector: 'http', params: { body: { amount } } });

    it.each<[string, unknown, string]>([
      ['a numeric string', '9999999', '"9999999" (a string)'],
      ['a small numeric string', '1', '"1" (a string)'],
      ['an array', [9999999], '[9999999] (an array)'],
      ['an object', { value: 9999999 }, '{"value":9999999} (an object)'],
      ['a boolean', true, 'true (a boolean)'],
      ['null', null, 'null'],
      ['a negative number', -9999999, '-9999999'],
      ['a small negative number', -1, '-1'],
    ])('%s at the field needs approval (amount_unreadable)', (_, amount, shown) => {
      expect(approvalRuleMatch(http(amount), [rule])).toEqual({
        rule,
        reason: 'amount_unreadable',
        detail: `params.body.amount is ${shown}, not a finite number >= 0, so it cannot be compared with the approval threshold on http (5000)`,
      });
      expect(needsApproval({ requiresApproval: false, ...http(amount) }, [rule])).toBe(true);
    });

    it('a finite number >= 0 is compared as before; a missing field is not caught', () => {
      expect(approvalRuleMatch(http(9999999), [rule])?.reason).toBe('amount_above');
      expect(approvalRuleFor(http(0), [rule])).toBeNull();
      expect(approvalRuleFor(http(5000), [rule])).toBeNull();
      expect(approvalRuleFor({ connector: 'http', params: { body: {} } }, [rule])).toBeNull();
      expect(approvalRuleFor({ connector: 'http', params: { url: 'https://x.test' } }, [rule])).toBeNull();
    });

    it.each<[string, Record<string, unknown>, string, string]>([
      ['upper case', { AMOUNT: 9999999 }, 'body.AMOUNT', ''],
      ['another case, under a currency', { Amount: 1, currency: 'EUR' }, 'body.Amount', ' EUR'],
      ['a Kelvin sign', { ['\u212Aey']: 1 }, 'body.\u212Aey', ''],
    ])(
      'a body naming the field only in %s needs approval (a target binding names ignoring case reads it)',
      (_, body, at, unit) => {
        const field = Object.keys(body)[0].normalize('NFKC').toLowerCase();
        const spelled = { ...rule, amount_field: `body.${field}`, ...(unit && { currency: unit.trim() }) };
        expect(approvalRuleMatch({ connector: 'http', params: { body } }, [spelled])).toEqual({
          rule: spelled,
          reason: 'amount_unreadable',
          detail: `params.${at} names params.body.${field} in another case: a target that reads member names ignoring case would take it as the amount, which cannot be compared with the approval threshold on http (5000${unit}) under another spelling`,
        });
      },
    );

    it('names the currency of a threshold that has one, and a long value is cut short', () => {
      const eur = { ...rule, currency: 'EUR' };
      expect(approvalRuleMatch(http('1'), [eur])?.detail).toBe(
        'params.body.amount is "1" (a string), not a finite number >= 0, so it cannot be compared with the approval threshold on http (5000 EUR)',
      );
      expect(describeFoundAmount('9'.repeat(100))).toBe(`"${'9'.repeat(39)}… (a string)`);
    });

    // The detail is stored in jsonb (the approval request's event), which refuses half a character: a cut inside an
    // emoji left a record that could not be written.
    it('cuts a long value before a character it would halve, never inside it', () => {
      const emoji = '\u{1f600}';
      expect(describeFoundAmount(`${'9'.repeat(38)}${emoji}9`)).toBe(`"${'9'.repeat(38)}… (a string)`);
      expect(describeFoundAmount(`${'9'.repeat(37)}${emoji}9`)).toBe(`"${'9'.repeat(37)}${emoji}… (a string)`);
      expect(describeFoundCurrency(`${'E'.repeat(19)}${emoji}`)).toBe(`"${'E'.repeat(19)}"`);
    });
  });

  it('no rules, no approval', () => {
    expect(approvalRuleFor({ connector: 'sandbox.payments', params: { amount: 1e9 } }, [])).toBeNull();
  });

  describe('a threshold with a currency', () => {
    const eur = { connector: 'sandbox.payments', amount_above: 10000, currency: 'EUR' };
    const pay = (params: Record<string, unknown>) => ({ connector: 'sandbox.payments', params });
    /** A threshold in EUR on an http call, with the amount and the currency read at the fields given. */
    const eurOnHttp = (amount_above: number, amount_field: string, currency_field: string) => ({
      connector: 'http',
      amount_above,
      amount_field,
      currency: 'EUR',
      currency_field,
    });
    const call = (body: Record<string, unknown>) => ({ connector: 'http', params: { body } });

    it('an amount in another currency (or none, or not a code) needs approval however small: it cannot be compared', () => {
      for (const currency of ['KWD', 'eur', 'EUR ', 978, null, { code: 'EUR' }, undefined]) {
        const match = approvalRuleMatch(pay({ amount: 9999, currency }), [eur]);
        expect([currency, match?.rule, match?.reason]).toEqual([currency, eur, 'currency_mismatch']);
        expect(match?.detail).toMatch(
          /^the approval threshold on sandbox\.payments is 10000 EUR; params\.currency is /,
        );
      }
      expect(approvalRuleMatch(pay({ amount: 9999, currency: 'KWD' }), [eur])?.detail).toBe(
        'the approval threshold on sandbox.payments is 10000 EUR; params.currency is "KWD", not EUR, so params.amount (9999) cannot be compared with it',
      );
      expect(approvalRuleMatch(pay({ amount: 1 }), [eur])?.detail).toMatch(/params\.currency is missing, not EUR/);
    });

    it('thresholds in several currencies: an amount is compared with the one in its own currency', () => {
      const usd = { connector: 'sandbox.payments', amount_above: 12000, currency: 'USD' };
      expect(approvalRuleMatch(pay({ amount: 50, currency: 'EUR' }), [eur, usd])).toBeNull();
      expect(approvalRuleMatch(pay({ amount: 11000, currency: 'USD' }), [eur, usd])).toBeNull();
      expect(approvalRuleMatch(pay({ amount: 13000, currency: 'USD' }), [eur, usd])).toMatchObject({
        rule: usd,
        reason: 'amount_above',
      });
      expect(approvalRuleMatch(pay({ amount: 11000, currency: 'EUR' }), [eur, usd])).toMatchObject({
        rule: eur,
        reason: 'amount_above',
      });
      // In none of them: it cannot be compared at all.
      expect(approvalRuleMatch(pay({ amount: 50, currency: 'KWD' }), [eur, usd])).toMatchObject({
        rule: eur,
        reason: 'currency_mismatch',
      });
    });

    it('an amount in a rule currency elsewhere in the params does not excuse another amount in none', () => {
      // Two amounts of one http call, each with its own threshold in EUR: a decoy `amount` in EUR must not let a
      // `total` in GBP through uncompared (red team: the 1,000,000 GBP call went out without a reviewer).
      const onAmount = eurOnHttp(1000, 'body.amount', 'body.currency');
      const onTotal = { ...onAmount, amount_field: 'body.total', currency_field: 'body.total_currency' };
      const decoy = call({ amount: 1, currency: 'EUR', total: 1_000_000, total_currency: 'GBP' });
      expect(approvalRuleMatch(decoy, [onAmount, onTotal])).toMatchObject({
        rule: onTotal,
        reason: 'currency_mismatch',
      });
      expect(approvalRuleMatch(decoy, [onTotal, onAmount])).toMatchObject({
        rule: onTotal,
        reason: 'currency_mismatch',
      });
      // Both amounts in their rules' currency and under the thresholds: nothing to approve.
      expect(
        approvalRuleMatch(call({ amount: 1, currency: 'EUR', total: 2, total_currency: 'EUR' }), [onAmount, onTotal]),
      ).toBeNull();
      // One amount at one currency field with thresholds in two currencies still compares per currency.
      const onAmountUsd = { ...onAmount, currency: 'USD', amount_above: 5000 };
      expect(approvalRuleMatch(call({ amount: 4000, currency: 'USD' }), [onAmount, onAmountUsd])).toBeNull();
      // The same amount read with another currency field is another measurement: no excuse either.
      const otherField = { ...onAmount, currency: 'GBP', currency_field: 'body.ccy' };
      expect(approvalRuleMatch(call({ amount: 1, currency: 'GBP', ccy: 'GBP' }), [onAmount, otherField])).toMatchObject(
        { rule: onAmount, reason: 'currency_mismatch' },
      );
    });

    it('an amount in its currency is compared with the threshold as before', () => {
      expect(approvalRuleFor(pay({ amount: 9999, currency: 'EUR' }), [eur])).toBeNull();
      expect(approvalRuleFor(pay({ amount: 10000, currency: 'EUR' }), [eur])).toBeNull();
      expect(approvalRuleMatch(pay({ amount: 10001, currency: 'EUR' }), [eur])).toEqual({
        rule: eur,
        reason: 'amount_above',
        detail: 'params.amount (10001 EUR) is above the approval threshold on sandbox.payments (10000 EUR)',
      });
    });

    it('reads the currency at currency_field; an operation without an amount is still not its business', () => {
      const nested = eurOnHttp(100, 'body.total', 'body.ccy');
      expect(approvalRuleFor(call({ total: 50, ccy: 'EUR' }), [nested])).toBeNull();
      expect(approvalRuleFor(call({ total: 50, ccy: 'USD' }), [nested])).toBe(nested);
      // `currency` at the top level is not where this rule reads it.
      expect(approvalRuleFor({ connector: 'http', params: { currency: 'EUR', body: { total: 50 } } }, [nested])).toBe(
        nested,
      );
      expect(approvalRuleFor(call({ ccy: 'USD' }), [nested])).toBeNull();
    });

    it('without a currency, amounts of any currency are compared as one unit (as before)', () => {
      const plain = { connector: 'sandbox.payments', amount_above: 10000 };
      expect(approvalRuleFor(pay({ amount: 9999, currency: 'KWD' }), [plain])).toBeNull();
      expect(approvalRuleMatch(pay({ amount: 10001, currency: 'KWD' }), [plain])?.detail).toBe(
        'params.amount (10001) is above the approval threshold on sandbox.payments (10000)',
      );
      expect(approvalRuleMatch(pay({}), [{ connector: 'sandbox.payments' }])).toMatchObject({
        reason: 'every_operation',
      });
    });

    it('currencyMismatch: exactly the code, or the field and what is there', () => {
      const at = (values: Record<string, unknown>) => (path: string) => values[path];
      expect(currencyMismatch({}, at({ currency: 'KWD' }))).toBeNull();
      expect(currencyMismatch({ currency: 'EUR' }, at({ currency: 'EUR' }))).toBeNull();
      expect(currencyMismatch({ currency: 'EUR' }, at({ currency: 'KWD' }))).toEqual({
        field: 'currency',
        found: 'KWD',
      });
      expect(currencyMismatch({ currency: 'EUR', currency_field: 'ccy' }, at({ currency: 'EUR' }))).toEqual({
        field: 'ccy',
        found: undefined,
      });
      expect(describeFoundCurrency(undefined)).toBe('missing');
      expect(describeFoundCurrency('KWD')).toBe('"KWD"');
      expect(describeFoundCurrency(978)).toBe('not a string (978)');
      expect(describeFoundCurrency('x'.repeat(50))).toBe(`"${'x'.repeat(20)}"`);
    });

    it('decimalPlaces: the digits after the point of the shortest form, exponent forms included', () => {
      const cases: [number, number][] = [
        [100, 0],
        [100.01, 2],
        [100.005, 3],
        [0.004, 3],
        [-0.25, 2],
        [1e-7, 7],
        [1.5e-7, 8],
        [5e-324, 324],
        [1e21, 0],
        [1.5e21, 0],
      ];
      expect(cases.map(([value]) => [value, decimalPlaces(value)])).toEqual(cases);
    });
  });

  it('paramAt walks objects only', () => {
    expect(paramAt({ a: { b: 1 } }, 'a.b')).toBe(1);
    expect(paramAt({ a: null }, 'a.b')).toBeUndefined();
    expect(paramAt({ a: [1] }, 'a.b')).toBeUndefined();
  });

  it('lookUpParam tells a missing field from a path blocked by a value that is not an object', () => {
    expect(lookUpParam({ a: { b: 0 } }, 'a.b')).toEqual({ kind: 'value', value: 0 });
    expect(lookUpParam({ a: { b: null } }, 'a.b')).toEqual({ kind: 'value', value: null });
    expect(lookUpParam({ a: {} }, 'a.b')).toEqual({ kind: 'missing' });
    expect(lookUpParam({ a: null }, 'a.b.c')).toEqual({ kind: 'missing' });
    expect(lookUpParam({ a: { b: 'x' } }, 'a.b.c')).toEqual({ kind: 'blocked', at: 'a.b', value: 'x' });
    expect(lookUpParam({ a: [1] }, 'a.b')).toEqual({ kind: 'blocked', at: 'a', value: [1] });
    // Missing in this spelling, there in another case: a member a case-insensitive target binds to the path.
    expect(lookUpParam({ A: { b: 1 } }, 'a.b')).toEqual({ kind: 'other_case', at: 'A', name: 'A' });
    expect(lookUpParam({ a: { B: 1, c: 2 } }, 'a.b')).toEqual({ kind: 'other_case', at: 'a.B', name: 'B' });
    expect(lookUpParam({ a: { ſt: 1 } }, 'a.st')).toEqual({ kind: 'other_case', at: 'a.ſt', name: 'ſt' });
    expect(lookUpParam({ a: { bb: 1 } }, 'a.b')).toEqual({ kind: 'missing' });
    expect(paramAt({ A: 1 }, 'a')).toBeUndefined();
    // And in a spelling a target that normalises names reads as the path's: spaces at either end, NFKC, invisible ones.
    for (const name of ['b ', '\uff42', 'b\u200b', '\u00adB']) {
      expect(lookUpParam({ a: { [name]: 1 } }, 'a.b')).toEqual({ kind: 'other_case', at: `a.${name}`, name });
    }
  });

  it('folds a member name as the loosest target reads it', () => {
    expect(foldedMemberName('Amount')).toBe('amount');
    expect(foldedMemberName(' \uff21mount\u3000')).toBe('amount');
    expect(foldedMemberName('am\u200bo\u2060u\ufeffnt\u00ad')).toBe('amount');
    expect(foldedMemberName('am ount')).toBe('am ount');
  });

  it('lookUpParam reads own members only: an inherited name is no field of the params', () => {
    for (const name of ['constructor', 'toString', '__proto__', 'hasOwnProperty']) {
      expect(lookUpParam({ body: { amount: 1 } }, `body.${name}`)).toEqual({ kind: 'missing' });
      expect(lookUpParam({}, name)).toEqual({ kind: 'missing' });
    }
    // Sent as a member (JSON.parse makes even `__proto__` an own member): read as sent.
    expect(lookUpParam(JSON.parse('{"body":{"constructor":5}}'), 'body.constructor')).toEqual({
      kind: 'value',
      value: 5,
    });
    const rule = { connector: 'http', amount_above: 100, amount_field: 'body.constructor' };
    expect(approvalRuleMatch({ connector: 'http', params: { body: { amount: 1 } } }, [rule])).toBeNull();
  });
});

describe('hold reasons', () => {
  it('are exactly the reasons a MANUAL_REVIEW can carry', () => {
    expect([...HOLD_REASONS].sort()).toEqual(
      [
        TerminalReason.CONNECTOR_ERROR,
        TerminalReason.FIELD_MISSING,
        TerminalReason.INTEGRITY_MISMATCH,
        TerminalReason.KNOWLEDGE_CONFLICT,
        TerminalReason.SOURCE_UNREACHABLE,
        TerminalReason.STALE_REPLICA,
      ].sort(),
    );
  });
});

describe('a tenant approval policy', () => {
  const declarations = [{ connector: 'pay', amountField: 'total' }];

  it('uses the tenant rules when it has any, and ignores the older threshold then', () => {
    const rules = [{ connector: 'sms' }];
    expect(tenantApprovalRules({ approvalRules: rules, approvalAmountAbove: 10 }, declarations)).toEqual(rules);
  });

  it('applies the older threshold to every connector that declares where its amount is', () => {
    expect(tenantApprovalRules({ approvalAmountAbove: 10 }, declarations)).toEqual([
      { connector: 'pay', amount_above: 10, amount_field: 'total' },
    ]);
    expect(tenantApprovalRules({ approvalAmountAbove: 10 }, [])).toEqual([]);
  });

  it('has no rules without settings', () => {
    expect(tenantApprovalRules(null, declarations)).toEqual([]);
    expect(tenantApprovalRules({}, declarations)).toEqual([]);
  });

  it('needs approval when the agent asked for it or a rule says so', () => {
    const rules = tenantApprovalRules({ approvalAmountAbove: 10 }, declarations);
    expect(needsApproval({ requiresApproval: true, connector: 'sms', params: {} }, rules)).toBe(true);
    expect(needsApproval({ requiresApproval: false, connector: 'pay', params: { total: 11 } }, rules)).toBe(true);
    expect(needsApproval({ requiresApproval: false, connector: 'pay', params: { total: 10 } }, rules)).toBe(false);
    expect(needsApproval({ requiresApproval: false, connector: 'sms', params: { total: 99 } }, rules)).toBe(false);
  });

  it('is read from the approval keys alone: the keys the send guard compares are those the rules are read from', () => {
    const read = new Set<string>();
    const recording = (settings: Record<string, unknown>) =>
      new Proxy(settings, {
        get(target, key) {
          if (typeof key === 'string') read.add(key);
          return Reflect.get(target, key) as unknown;
        },
      });
    // Every path through the rules: none set, the older threshold, rules (which replace the threshold).
    for (const settings of [{}, { approvalAmountAbove: 10 }, { approvalRules: [{ connector: 'sms' }] }]) {
      tenantApprovalRules(recording(settings), declarations);
    }
    expect([...read].sort()).toEqual([...TENANT_APPROVAL_KEYS].sort());
  });

  it('cancels a denied operation for its own reason', () => {
    expect(DENIAL).toEqual({ to: OperationStatus.CANCELLED, reason: TerminalReason.DENIED });
  });
});

describe('releaseGrantsApproval: a reviewer’s release of a held operation grants its approval where one is owed', () => {
  it.each([
    [false, null, false],
    [true, null, true],
    [false, { state: 'requested' }, true],
    [false, { state: 'granted' }, true],
    [true, { state: 'granted' }, true],
  ])('required %s, on record %j → grants %s', (required, approval, grants) => {
    expect(releaseGrantsApproval(required, approval)).toBe(grants);
  });
});

describe('approvalDecidable: a reviewer decides the approval of an operation that asks for one or needs one', () => {
  it.each([
    [false, null, false],
    [true, null, true],
    [false, { state: 'requested' }, true],
    [true, { state: 'requested' }, true],
  ])('required %s, on record %j → decidable %s', (required, approval, decidable) => {
    expect(approvalDecidable(required, approval)).toBe(decidable);
  });
});

describe('shownApprovalState: a request that can no longer be decided is withdrawn', () => {
  it('shows a request withdrawn once the operation is not PREPARED, and decisions as they are', () => {
    expect(shownApprovalState(OperationStatus.PREPARED, 'requested')).toBe('requested');
    for (const status of [OperationStatus.CANCELLED, OperationStatus.MANUAL_REVIEW]) {
      expect(shownApprovalState(status, 'requested')).toBe('withdrawn');
    }
    expect(shownApprovalState(OperationStatus.CANCELLED, 'denied')).toBe('denied');
    expect(shownApprovalState(OperationStatus.VERIFIED, 'granted')).toBe('granted');
    expect(shownApprovalState(OperationStatus.PREPARED, 'granted')).toBe('granted');
  });

  it('shows a PREPARED request withdrawn once its execution’s deadline has passed (an approve is refused then)', () => {
    expect(shownApprovalState(OperationStatus.PREPARED, 'requested', true)).toBe('withdrawn');
    expect(shownApprovalState(OperationStatus.PREPARED, 'requested', false)).toBe('requested');
    // A decision stays what it was.
    expect(shownApprovalState(OperationStatus.PREPARED, 'granted', true)).toBe('granted');
  });

  it('judges only a PREPARED request still on record against the deadline (approvalRequestWaits)', () => {
    expect(approvalRequestWaits(OperationStatus.PREPARED, 'requested')).toBe(true);
    expect(approvalRequestWaits(OperationStatus.MANUAL_REVIEW, 'requested')).toBe(false);
    expect(approvalRequestWaits(OperationStatus.PREPARED, 'granted')).toBe(false);
    expect(approvalRequestWaits(OperationStatus.PREPARED, undefined)).toBe(false);
  });
});
