import type { EntityManager } from 'typeorm';
import { useTestDatabase } from '../../../test/support/test-database';
import { chargeOperation, insertTestExecution } from '../../../test/support/fixtures';
import { lockWaiters, waitForLockWaiter } from '../../../test/support/lock-waits';
import { sentFromPrepared } from '../../../test/support/sends';
import { withSessions } from '../../../test/support/sessions';
import { upsertConnectorSettings } from './connector-settings.repository';
import {
  CapExceeded,
  SpendPrefill,
  SpendingCapRow,
  backfillSpend,
  commitWithinSpendingCaps,
  describeCapExceeded,
  lockSpendingCaps,
  prefillSpend,
  writeSpendPrefill,
  settingsVersionOf,
  spendingUsage,
} from './entities';
import { transaction } from './sql';
import { TransitionService, type TransitionResult } from './transition.service';

/**
 * A cap with a currency, where it is enforced: an operation whose currency is another one is refused under the cap's
 * lock (rule `currency_mismatch`), nothing committed and nothing in the ledger; one in the cap's currency is sent and
 * counted. The usage of the window counts every ledger row (also one sent before the cap had a currency).
 */
describe('spending caps with a currency (real Postgres)', () => {
  const db = useTestDatabase('capcurrency', ['acme']);
  const cap: SpendingCapRow = { period: 'day', max_amount: 1000, amount_field: 'amount', currency: 'EUR' };

  async function charge(amount: number, currency: string) {
    const op = chargeOperation({ key: `c-${currency}`, params: { amount, currency, reference: `ref-${currency}` } });
    await insertTestExecution(db.dataSource.manager, 'acme', { operations: [op] });
    return op;
  }

  async function commitUnderCap(
    operationId: string,
    amountOf: Parameters<typeof commitWithinSpendingCaps>[1]['amountOf'],
  ): Promise<{ committed: boolean; result: Awaited<ReturnType<typeof commitWithinSpendingCaps>> }> {
    let committed = false;
    const result = await commitWithinSpendingCaps(
      db.dataSource,
      { tenantId: 'acme', connector: 'sandbox.payments', operationId, caps: [cap], amountOf },
      async () => {
        committed = true;
        return { won: true } as TransitionResult;
      },
    );
    return { committed, result };
  }

  const ledger = async () =>
    ((await db.dataSource.query(`SELECT operation_id FROM connector_spend`)) as { operation_id: string }[]).map(
      (r) => r.operation_id,
    );

  it('refuses an amount in another currency before the commit, and writes nothing to the ledger', async () => {
    const kwd = await charge(300, 'KWD');
    const { committed, result } = await commitUnderCap(kwd.id, () => ({
      path: ['amount'],
      amount: 300,
      currencyMismatch: { field: 'currency', found: 'KWD' },
    }));
    expect(committed).toBe(false);
    expect(result).toEqual({
      exceeded: expect.objectContaining({
        rule: 'currency_mismatch',
        requested: 300,
        currency_found: { field: 'currency', value: 'KWD' },
      }),
    });
    expect(describeCapExceeded('sandbox.payments', (result as { exceeded: CapExceeded }).exceeded)).toBe(
      `spending cap on sandbox.payments counts params.amount in EUR; this operation's params.currency is "KWD", not EUR; not sent`,
    );
    expect(await ledger()).toEqual([]);
  });

  it('an amount unreadable is still refused as such first; a missing currency is named as missing', async () => {
    const missing = await charge(5, 'XXX');
    const unreadable = await commitUnderCap(missing.id, () => ({
      path: ['amount'],
      amount: null,
      currencyMismatch: { field: 'currency', found: 'XXX' },
    }));
    expect(unreadable.result).toMatchObject({ exceeded: { rule: 'amount_unreadable' } });
    const none = await commitUnderCap(missing.id, () => ({
      path: ['amount'],
      amount: 5,
      currencyMismatch: { field: 'money.ccy', found: undefined },
    }));
    expect(describeCapExceeded('sandbox.payments', (none.result as { exceeded: CapExceeded }).exceeded)).toMatch(
      /params\.money\.ccy is missing, not EUR; not sent$/,
    );
    expect(await ledger()).toEqual([]);
  });

  it('sends and counts one in the cap’s currency; the window’s usage counts every ledger row, whatever its currency', async () => {
    const eur = await charge(400, 'EUR');
    const { committed, result } = await commitUnderCap(eur.id, () => ({ path: ['amount'], amount: 400 }));
    expect(committed).toBe(true);
    expect(result).toEqual({ sent: { won: true } });
    expect(await ledger()).toEqual([eur.id]);
    // A row sent before the cap named its currency (here: written as the backfill of a new cap would) is counted too:
    // never under-counted.
    const earlier = await charge(250, 'KWD');
    await db.dataSource.query(`INSERT INTO connector_spend (operation_id, tenant_id, connector) VALUES ($1, $2, $3)`, [
      earlier.id,
      'acme',
      'sandbox.payments',
    ]);
    const usage = await spendingUsage(db.dataSource.manager, 'acme', 'sandbox.payments', cap, ['amount']);
    expect(usage).toMatchObject({ operations: 2, amount: 650 });
  });
});

/**
 * The amount cap adds and compares exactly: summed in doubles, an amount below the last digit of the window's usage
 * vanished (1000 + 1e-14 === 1000), so at a used-up cap of 1000 every charge of 1e-14 was sent, without end.
 */
describe('spending caps count amounts exactly (real Postgres)', () => {
  const db = useTestDatabase('capexact', ['acme']);
  const cap: SpendingCapRow = { period: 'day', max_amount: 1000, amount_field: 'amount' };

  async function sendUnderCap(key: string, amount: number): Promise<boolean> {
    const op = chargeOperation({ key, params: { amount, currency: 'EUR', reference: `ref-${key}` } });
    await insertTestExecution(db.dataSource.manager, 'acme', { operations: [op] });
    const result = await commitWithinSpendingCaps(
      db.dataSource,
      {
        tenantId: 'acme',
        connector: 'sandbox.payments',
        operationId: op.id,
        caps: [cap],
        amountOf: () => ({ path: ['amount'], amount }),
        failedSpendsNothing: true,
      },
      async () => ({ won: true }) as TransitionResult,
    );
    return 'sent' in result;
  }

  /** Sends `amount` under the cap (true when it went), then writes `after` to its row, as the send's answer would. */
  async function sendThen(key: string, amount: number, after: string): Promise<boolean> {
    const sent = await sendUnderCap(key, amount);
    await db.dataSource.query(`UPDATE operations SET ${after} WHERE key = $1`, [key]);
    return sent;
  }

  /** A send held INTEGRITY_MISMATCH on the amount, the source's record of the charge saying `recorded` (in EUR). */
  const heldMismatchedAt = (recorded: number) =>
    `status = 'MANUAL_REVIEW', attempt = 1, terminal_reason = 'INTEGRITY_MISMATCH',
     evidence = '{"mismatched": ["amount"], "record": {"amount": ${recorded}, "currency": "EUR"}}'`;

  /** The window's usage of the cap (`failedSpendsNothing`: the connector's word that a FAILED send charged nothing). */
  const usageOf = (failedSpendsNothing?: boolean) =>
    spendingUsage(db.dataSource.manager, 'acme', 'sandbox.payments', cap, ['amount'], failedSpendsNothing);

  beforeEach(async () => {
    await db.dataSource.query(`DELETE FROM connector_spend`);
  });

  it('counts no amount for a send whose own request committed nothing (FAILED) on the connector’s word, unless refuted; every send as one', async () => {
    // Declined: no money moved, so it leaves the room to the charge that follows it (a retry, a corrected request).
    expect(await sendThen('declined', 800, `status = 'FAILED', attempt = 1`)).toBe(true);
    expect(await sendUnderCap('after-decline', 800)).toBe(true);
    expect(await usageOf(true)).toMatchObject({ operations: 2, amount: 800 });
    // A connector whose FAILED rests on the operation's own declaration (http's reject_statuses) counts it all.
    expect(await usageOf(false)).toMatchObject({ operations: 2, amount: 1600 });
    // A FAILED refuted since — the provider acknowledged it after all, or a read showed the effect — counts again.
    expect(await sendThen('acknowledged', 100, `status = 'FAILED', attempt = 1, acknowledged_at = now()`)).toBe(true);
    expect(
      await sendThen(
        'shown',
        50,
        `status = 'FAILED', attempt = 1, obligation = '{"effect_shown_after_failed": {"result": "found", "at": "now"}}'`,
      ),
    ).toBe(true);
    expect(await usageOf(true)).toMatchObject({ operations: 4, amount: 950 });
    // An UNKNOWN may well have cost money: counted.
    expect(await sendThen('unknown', 50, `status = 'UNKNOWN', attempt = 1`)).toBe(true);
    expect(await sendUnderCap('over', 0.5)).toBe(false);
  });

  it('counts what a send was counted at, after the cap’s amount_field changed', async () => {
    expect(await sendUnderCap('before-the-change', 700)).toBe(true);
    // The admin now sums another member: the rows already in the window keep counting what they were sent with (700),
    // not what they carry at the new member (nothing), which would give the window its whole max_amount again.
    const moved: SpendingCapRow = { ...cap, amount_field: 'total' };
    const usage = await spendingUsage(db.dataSource.manager, 'acme', 'sandbox.payments', moved, ['total']);
    expect(usage).toMatchObject({ operations: 1, amount: 700 });
  });

  it('counts what the provider reported for a send held INTEGRITY_MISMATCH, not what was asked', async () => {
    // Asked 300; the source's record of the charge says 900 (read_fault amount_mismatch, a provider that rounds).
    expect(await sendThen('mismatched', 300, heldMismatchedAt(900))).toBe(true);
    expect(await usageOf()).toMatchObject({ operations: 1, amount: 900 });
    expect(await sendUnderCap('no-room', 200)).toBe(false);
    expect(await sendUnderCap('room', 100)).toBe(true);
  });

  it('counts what was asked for a send held INTEGRITY_MISMATCH whose provider reports less (fail closed)', async () => {
    // Asked 900; the source's record says 100. The record may be wrong (a target that scales or lies): counted 900.
    expect(await sendThen('mismatched-less', 900, heldMismatchedAt(100))).toBe(true);
    expect(await usageOf()).toMatchObject({ operations: 1, amount: 900 });
    expect(await sendUnderCap('past-asked', 200)).toBe(false);
  });

  it('does not let a read-back record of 0 lower what a verified send counts', async () => {
    // An http target whose read field is the amount answers 0 (hostile, or another scale): charged 900 as asked.
    expect(
      await sendThen('record-zero', 900, `status = 'VERIFIED', attempt = 1, evidence = '{"record": {"amount": 0}}'`),
    ).toBe(true);
    expect(await usageOf()).toMatchObject({ operations: 1, amount: 900 });
    expect(await sendUnderCap('second-900', 900)).toBe(false);
  });

  it('counts a released KNOWLEDGE_CONFLICT send at what it asked, not at the earlier charge its context read found', async () => {
    // The context read found a 1 EUR charge of the same reference (evidence.record is that charge); the hold was
    // released and the send charged 900.
    expect(
      await sendThen(
        'released',
        900,
        `status = 'ACKNOWLEDGED', attempt = 1, acknowledged_at = now(),
         evidence = '{"method": "context_read", "conflicts": ["an existing charge with this reference has a different amount, currency or status"], "record": {"amount": 1, "currency": "EUR", "status": "succeeded"}}'`,
      ),
    ).toBe(true);
    expect(await usageOf()).toMatchObject({ operations: 1, amount: 900 });
    expect(await sendUnderCap('next-999', 999)).toBe(false);
  });

  it('counts a send made just before its window rolls until the window has passed it, and not a moment longer', async () => {
    const sentAt = (key: string, ago: string) =>
      db.dataSource.query(
        `UPDATE connector_spend SET spent_at = clock_timestamp() - $2::interval
         WHERE operation_id = (SELECT id FROM operations WHERE key = $1)`,
        [key, ago],
      );
    expect(await sendUnderCap('day-old', 1000)).toBe(true);
    // Sent a day ago less a few seconds: still in the day's window, the cap is used up.
    await sentAt('day-old', '1 day - 5 seconds');
    expect(await sendUnderCap('inside', 0.01)).toBe(false);
    // A moment later it has rolled out of the window: the day's whole amount is free again, and no more than it.
    await sentAt('day-old', '1 day 00:00:00.001');
    expect(await sendUnderCap('rolled', 1000)).toBe(true);
    expect(await sendUnderCap('past-rolled', 0.01)).toBe(false);
  });

  it('sends up to the cap exactly, and nothing beyond it, however small', async () => {
    expect(await sendUnderCap('most', 999.9)).toBe(true);
    expect(await sendUnderCap('rest', 0.1)).toBe(true); // 999.9 + 0.1 is 1000 exactly: within the cap
    expect(await sendUnderCap('tiny', 1e-14)).toBe(false);
    expect(await sendUnderCap('tinier', 5e-324)).toBe(false);
    const usage = await usageOf();
    expect(usage).toMatchObject({ operations: 2, amount: 1000 });
  });
});

/**
 * A cap set (or re-set) after sends counts what they were sent with (the backfill), and an operation sent before any
 * cap could carry its amount as text: intake and dispatch refuse that only under a cap. A target that reads numbers from
 * text (JavaScript's Number, most form and query parsers) charged it; counted as nothing, the first window of the new
 * cap had room for all of its max_amount again.
 */
describe('a spending cap set after sends counts an amount they carried as decimal text (real Postgres)', () => {
  const db = useTestDatabase('captext', ['acme']);
  const cap: SpendingCapRow = { period: 'day', max_amount: 1000, amount_field: 'body.amount' };

  /** An http operation sent (and verified) before the tenant had a cap, with `amount` at body.amount. */
  async function sentBeforeTheCap(amount: unknown) {
    const op = chargeOperation({
      connector: 'http',
      action: 'request',
      params: { method: 'POST', url: 'https://pay.example/charges', body: { amount } },
    });
    await insertTestExecution(db.dataSource.manager, 'acme', { operations: [op] });
    await db.dataSource.query(
      `UPDATE operations SET status = 'VERIFIED', attempt = 1, sent_at = clock_timestamp() WHERE id = $1`,
      [op.id],
    );
    return op;
  }

  async function sendUnderCap(amount: number): Promise<Awaited<ReturnType<typeof commitWithinSpendingCaps>>> {
    const op = chargeOperation({
      connector: 'http',
      action: 'request',
      params: { method: 'POST', url: 'https://pay.example/charges', body: { amount } },
    });
    await insertTestExecution(db.dataSource.manager, 'acme', { operations: [op] });
    return commitWithinSpendingCaps(
      db.dataSource,
      {
        tenantId: 'acme',
        connector: 'http',
        operationId: op.id,
        caps: [cap],
        amountOf: () => ({ path: ['body', 'amount'], amount }),
      },
      async () => ({ won: true }) as TransitionResult,
    );
  }

  async function windowAmount(): Promise<number | null> {
    await backfillSpend(db.dataSource.manager, 'acme', 'http', 86_400);
    return (await spendingUsage(db.dataSource.manager, 'acme', 'http', cap, ['body', 'amount'])).amount;
  }

  beforeEach(async () => {
    await db.dataSource.query(`DELETE FROM connector_spend`);
    await db.dataSource.query(`DELETE FROM operations`);
  });

  it('counts a decimal amount written as text; text no number reads as, or too long to read, counts nothing and breaks nothing', async () => {
    await sentBeforeTheCap('900');
    await sentBeforeTheCap(' 0.5 ');
    await sentBeforeTheCap('-70'); // a negative amount never buys the cap back
    // Not a number, or a five-digit exponent, or longer than 4096 bytes and not made of a number's characters:
    // nothing, never an error.
    for (const unreadable of ['abc', '1e999999', 'x9'.repeat(2049), '1,000', '']) await sentBeforeTheCap(unreadable);
    await backfillSpend(db.dataSource.manager, 'acme', 'http', 86_400);
    const usage = await spendingUsage(db.dataSource.manager, 'acme', 'http', cap, ['body', 'amount']);
    expect(usage).toMatchObject({ operations: 8, amount: 900.5 });
    expect(await sendUnderCap(200)).toMatchObject({ exceeded: { rule: 'max_amount', requested: 200 } });
    expect(await sendUnderCap(99.5)).toMatchObject({ sent: { won: true } });
  });

  // What JavaScript's Number() (which an http target may read the amount with) reads as 500000: padded with any number
  // of zeros, or with any of the characters it skips around a number.
  it.each([
    ['leading zeros', '0'.repeat(31) + '500000'],
    ['thousands of leading zeros', '0'.repeat(4000) + '500000'],
    ['trailing zeros', '500000.' + '0'.repeat(31)],
    ['thousands of trailing zeros', '500000.' + '0'.repeat(4000)],
    ['zeros in front of the exponent', '5e' + '0'.repeat(40) + '5'],
    ['a thousand fraction digits before a last one', '500000.' + '0'.repeat(1000) + '1'],
    ['the point moved by a four-digit exponent', '0.' + '0'.repeat(1000) + '5e1006'],
    ['a thousand zeros taken back by the exponent', '5' + '0'.repeat(1000) + 'e-995'],
    ['no-break space', '\u00a0500000'],
    ['vertical tab', '\u000b500000'],
    ['form feed', '\f500000\f'],
    ['byte order mark', '\ufeff500000'],
    ['ideographic space and paragraph separator', '\u3000500000\u2029'],
  ])('counts text padded with %s as Number() reads it', async (_, text) => {
    expect(Number(text)).toBe(500000);
    await sentBeforeTheCap(text);
    expect(await windowAmount()).toBe(500000);
  });

  it('counts hostile text as its number or as nothing, and the window is still summed', async () => {
    const hostile = [
      'x'.repeat(250_000), // as long as a request body lets it be, and no number: nothing
      '1e99999',
      '1e-99999',
      '\u0665', // an Arabic-Indic five
      '\uff11\uff10', // full-width 10
      '1,000',
      '',
      ' ',
      '.',
      '1e',
      'NaN',
      'Infinity',
      '-Infinity',
      '\u180e5', // a Mongolian vowel separator: no longer a space to Number()
      '5 5',
      'x5',
      '1_000',
    ];
    for (const text of hostile) await sentBeforeTheCap(text);
    await sentBeforeTheCap('12e-3');
    await sentBeforeTheCap('+.5');
    await sentBeforeTheCap('5.');
    expect(await windowAmount()).toBe(5.512);
  });

  // Number() reads a hexadecimal, binary or octal integer (no sign, padding allowed): a target reading it charged that.
  it.each([
    ['hexadecimal', '0x1F4', 500],
    ['hexadecimal, upper-case prefix and padding', ' 0X1f4\u00a0', 500],
    ['binary', '0b111110100', 500],
    ['octal', '0o764', 500],
    ['hexadecimal with thousands of leading zeros', '0x' + '0'.repeat(4000) + '7A120', 500000],
  ])('counts %s text as Number() reads it', async (_, text, amount) => {
    expect(Number(text)).toBe(amount);
    await sentBeforeTheCap(text);
    expect(await windowAmount()).toBe(amount);
  });

  it('counts prefixed text Number() does not read as a number as nothing, and a huge one as past every cap', async () => {
    for (const text of ['0x', '-0x10', '+0x10', '0x1.8', '0b12', '0o8', '0x1g', '0x 1']) {
      expect(Number(text)).toBeNaN();
      await sentBeforeTheCap(text);
    }
    expect(await windowAmount()).toBe(0);
    await sentBeforeTheCap('0x' + 'f'.repeat(300));
    expect(Number('0x' + 'f'.repeat(300))).toBe(Infinity);
    expect(await windowAmount()).toBe(Number.MAX_VALUE);
  });

  // Past 4096 bytes the text is not taken apart; made of a number's characters it may be a number a target read
  // (Number() reads each of these as 500000 or more): past every cap, never nothing.
  it.each([
    ['5000 leading zeros', '0'.repeat(5000) + '500000'],
    ['5000 spaces', ' '.repeat(5000) + '500000'],
    ['10 000 digits', '7'.repeat(10_000)],
    ['as many digits as a request body holds', '5'.repeat(250_000)],
    ['5000 hexadecimal digits', '0x' + 'f'.repeat(5000)],
  ])('counts a number-like text past 4096 bytes (%s) as past every cap', async (_, text) => {
    expect(Number(text)).toBeGreaterThanOrEqual(500000);
    await sentBeforeTheCap(text);
    expect(await windowAmount()).toBe(Number.MAX_VALUE);
    expect(await sendUnderCap(1)).toMatchObject({ exceeded: { rule: 'max_amount' } });
  });

  it('shows a sum past a double as the largest number, and the refusal says more than it', async () => {
    await sentBeforeTheCap('1e999');
    expect(Number('1e999')).toBe(Infinity);
    expect(await windowAmount()).toBe(Number.MAX_VALUE);
    const refused = await sendUnderCap(1);
    expect(refused).toMatchObject({ exceeded: { rule: 'max_amount', usage: { amount: Number.MAX_VALUE } } });
    if (!('exceeded' in refused)) throw new Error('sent past a used-up cap');
    expect(JSON.parse(JSON.stringify(refused.exceeded.usage)).amount).toBe(Number.MAX_VALUE);
    expect(describeCapExceeded('http', refused.exceeded)).toContain(`to more than ${Number.MAX_VALUE}, above 1000`);
  });
});

/**
 * Setting a cap counts what was already sent in its window (the backfill). The long part is counted before the change
 * takes the caps' lock (`prefillSpend`: every send before its mark), so capped sends of the tenant do not wait for it;
 * under the lock only the sends since the mark are read. No send escapes the new cap: one in flight when the mark is
 * taken is waited for and counted by the prefill, one made after it is counted under the lock, and one after the
 * change's commit is judged by the cap.
 */
describe('a cap set while sends are made counts every one of them (real Postgres)', () => {
  const db = useTestDatabase('capbackfill', ['acme']);
  const transitions = new TransitionService();
  const CONNECTOR = 'sandbox.payments';
  const cap: SpendingCapRow = { period: 'day', max_operations: 10, max_amount: 1000, amount_field: 'amount' };

  async function ready(key: string, amount: number) {
    const op = chargeOperation({ key, params: { amount, currency: 'EUR', reference: `ref-${key}` } });
    const executionId = await insertTestExecution(db.dataSource.manager, 'acme', { operations: [op] });
    await db.dataSource.query(`UPDATE executions SET status = 'running' WHERE id = $1`, [executionId]);
    return op.id;
  }

  /** The SENT of a send, as the dispatcher commits it, from the settings it read (`version`; null: none). */
  const send = (tx: EntityManager, id: string, version: string | null = null) =>
    sentFromPrepared(
      transitions,
      tx,
      id,
      { kind: 'dispatch', approvalRequired: false, settingsVersion: version },
      { sent_at: 'now' },
    );

  const ledger = async () =>
    (
      (await db.dataSource.query(`SELECT operation_id FROM connector_spend ORDER BY operation_id`)) as {
        operation_id: string;
      }[]
    ).map((r) => r.operation_id);

  it('counts a send in flight at the mark, one made between the mark and the change, and reads only the latter under the lock', async () => {
    const before = await ready('before', 100);
    expect((await send(db.dataSource.manager, before)).won).toBe(true);
    // Sent a while ago: before the mark by more than the minute the backfill under the lock reads back past it.
    await db.dataSource.query(`UPDATE operations SET sent_at = sent_at - interval '5 minutes' WHERE id = $1`, [before]);
    const inFlight = await ready('in-flight', 200);
    const between = await ready('between', 300);
    const after = await ready('after', 450);

    // A send whose SENT statement is written, not yet committed, when the change begins: the mark waits for it.
    const sender = db.dataSource.createQueryRunner();
    await sender.connect();
    let prefill: SpendPrefill;
    try {
      await sender.startTransaction();
      expect((await send(sender.manager, inFlight)).won).toBe(true);
      let marked = false;
      const prefilling = prefillSpend(db.dataSource, 'acme', CONNECTOR, 86_400).finally(() => (marked = true));
      await waitForLockWaiter(db.dataSource, { unless: () => marked });
      expect(marked).toBe(false);
      await sender.commitTransaction();
      prefill = await prefilling;
    } finally {
      if (sender.isTransactionActive) await sender.rollbackTransaction();
      await sender.release();
    }
    // Read, not written: the change writes them (a change refused writes nothing).
    expect(prefill.ids.sort()).toEqual([before, inFlight].sort());
    expect(await ledger()).toEqual([]);

    // Sent after the prefill, before the change takes the lock: counted by the change's own backfill, which reads only
    // the sends since the mark (`before`, left out of the prefill's read here, is not read again: it is not scanned).
    expect((await send(db.dataSource.manager, between)).won).toBe(true);
    const withoutBefore: SpendPrefill = {
      since: prefill.since,
      ids: prefill.ids.filter((id) => id !== before),
    };
    await transaction(db.dataSource, async (tx) => {
      await lockSpendingCaps(tx, 'acme', CONNECTOR);
      await upsertConnectorSettings(tx, 'acme', CONNECTOR, { spendingCaps: [cap], by: 'key_admin' });
      await writeSpendPrefill(tx, 'acme', CONNECTOR, withoutBefore);
      await backfillSpend(tx, 'acme', CONNECTOR, 86_400, withoutBefore.since);
    });
    expect((await ledger()).sort()).toEqual([inFlight, between].sort());
    expect(await spendingUsage(db.dataSource.manager, 'acme', CONNECTOR, cap, ['amount'])).toMatchObject({
      operations: 2,
      amount: 500,
    });

    // After the change, a send (from the settings with the cap) is judged by the cap: 500 + 450 fits, and it is counted.
    const [{ version }] = (await db.dataSource.query(
      `SELECT ${settingsVersionOf('s')} AS version FROM tenant_connector_settings s WHERE tenant_id = 'acme'`,
    )) as { version: string }[];
    const capped = await commitWithinSpendingCaps(
      db.dataSource,
      {
        tenantId: 'acme',
        connector: CONNECTOR,
        operationId: after,
        caps: [cap],
        amountOf: () => ({ path: ['amount'], amount: 450 }),
      },
      (tx) => send(tx, after, version),
    );
    expect(capped).toMatchObject({ sent: { won: true } });
    expect(await spendingUsage(db.dataSource.manager, 'acme', CONNECTOR, cap, ['amount'])).toMatchObject({
      operations: 3,
      amount: 950,
    });
  });

  it('writes what the prefill read at each send’s last sent_at, and only sends: one sent again since counts from then', async () => {
    const resent = await ready('resent', 100);
    // From the settings as they stand (none, or the cap an earlier case set): run alone or after it.
    const [settings] = (await db.dataSource.query(
      `SELECT ${settingsVersionOf('s')} AS version FROM tenant_connector_settings s WHERE tenant_id = 'acme'`,
    )) as { version: string }[];
    expect((await send(db.dataSource.manager, resent, settings?.version ?? null)).won).toBe(true);
    await db.dataSource.query(`UPDATE operations SET sent_at = sent_at - interval '1 hour' WHERE id = $1`, [resent]);
    const prefill = await prefillSpend(db.dataSource, 'acme', CONNECTOR, 86_400);
    expect(prefill.ids).toContain(resent);
    // Its sent_at moved after the prefill read it (the model never sends an operation twice, but the row is written at
    // sent_at as it stands when written, not as read): its window starts there.
    await db.dataSource.query(`UPDATE operations SET sent_at = now() WHERE id = $1`, [resent]);
    const [{ sent_at: lastSent }] = (await db.dataSource.query(`SELECT sent_at FROM operations WHERE id = $1`, [
      resent,
    ])) as { sent_at: Date }[];
    await transaction(db.dataSource, (tx) => writeSpendPrefill(tx, 'acme', CONNECTOR, prefill));
    const [{ spent_at: spentAt }] = (await db.dataSource.query(
      `SELECT spent_at FROM connector_spend WHERE operation_id = $1`,
      [resent],
    )) as { spent_at: Date }[];
    expect(spentAt.toISOString()).toBe(lastSent.toISOString());
  });

  it('lets two caps changes of one connector take turns: one’s backfill never waits for rows the other wrote before the caps’ lock', async () => {
    // B's prefill reads the window before `x` is sent, A's after: `x` is A's prefill row, and since B's mark, B's to
    // backfill under the caps' lock.
    const prefillB = await prefillSpend(db.dataSource, 'acme', CONNECTOR, 86_400);
    const x = await ready('x', 100);
    const [settings] = (await db.dataSource.query(
      `SELECT ${settingsVersionOf('s')} AS version FROM tenant_connector_settings s WHERE tenant_id = 'acme'`,
    )) as { version: string }[];
    expect((await send(db.dataSource.manager, x, settings?.version ?? null)).won).toBe(true);
    const prefillA = await prefillSpend(db.dataSource, 'acme', CONNECTOR, 86_400);
    expect(prefillA.ids).toContain(x);
    expect(prefillB.ids).not.toContain(x);

    const failures = await withSessions(db.dataSource, ['a', 'b'], async ({ a, b }) => {
      /** A caps change as the API makes it: the prefill's rows, then the caps' lock, then the sends since the mark. */
      const change = async (tx: typeof a, prefill: SpendPrefill, beforeLock: () => Promise<void> = async () => {}) => {
        await writeSpendPrefill(tx.manager, 'acme', CONNECTOR, prefill);
        await beforeLock();
        await lockSpendingCaps(tx.manager, 'acme', CONNECTOR);
        await backfillSpend(tx.manager, 'acme', CONNECTOR, 86_400, prefill.since);
        await tx.commitTransaction();
      };
      await a.startTransaction();
      await b.startTransaction();
      let aWrote!: () => void;
      const aHasWritten = new Promise<void>((resolve) => (aWrote = resolve));
      let aGoes!: () => void;
      const aMayLock = new Promise<void>((resolve) => (aGoes = resolve));
      const changingA = change(a, prefillA, async () => {
        aWrote();
        await aMayLock;
      });
      await aHasWritten;
      // B starts while A holds `x` uncommitted: B waits (for A's row under the caps' lock it holds, or for its turn).
      let bDone = false;
      const changingB = change(b, prefillB).finally(() => (bDone = true));
      await waitForLockWaiter(db.dataSource, { unless: () => bDone });
      expect(bDone).toBe(false);
      // Then A takes the caps' lock.
      aGoes();
      const results = await Promise.allSettled([changingA, changingB]);
      return results.flatMap((r) =>
        r.status === 'rejected' ? [(r.reason as { code?: string }).code ?? String(r.reason)] : [],
      );
    });
    // Postgres found no deadlock (40P01): neither change was aborted, and `x` is counted once.
    expect(failures).toEqual([]);
    expect(await lockWaiters(db.dataSource)).toBe(0);
    expect((await ledger()).filter((id) => id === x)).toEqual([x]);
  });
});

/**
 * Hexadecimal, octal and binary text is read with a bounded cost: up to the significant digits a double can hold below
 * Infinity for the base (256, 342, 1024) the exact value, as the decimal reading counts an exact value (also one just
 * past `Number.MAX_VALUE`, past every cap either way); past them `Infinity` without reading the digits.
 */
describe('verity_amount_of reads prefixed digits exactly up to a double’s reach, past every cap beyond (real Postgres)', () => {
  const db = useTestDatabase('capdigits', ['acme']);
  const amountOf = async (text: string): Promise<string | null> => {
    const [{ amount }] = (await db.dataSource.query(
      `SELECT trim_scale(verity_amount_of(to_jsonb($1::text)))::text AS amount`,
      [text],
    )) as { amount: string | null }[];
    return amount;
  };
  const pattern = (digits: string, n: number) =>
    Array.from({ length: n }, (_, i) => digits[(i * 7 + 3) % digits.length]).join('');

  it.each([
    ['0x', 16, '0123456789abcdefABCDEF'.slice(0, 16), 256],
    ['0o', 8, '01234567', 342],
    ['0b', 2, '01', 1024],
  ])('reads %s digits exactly up to the bound, and Infinity past it', async (prefix, _base, digits, bound) => {
    const exact = (text: string) => BigInt(text.trim()).toString();
    const top = digits[digits.length - 1];
    const cases = [
      prefix + '1',
      prefix + top,
      prefix + '1' + '0'.repeat(bound - 1), // a power of the base at the bound: Number() reads it exactly
      prefix + top.repeat(bound), // the largest at the bound: past Number.MAX_VALUE (Infinity to Number())
      prefix + '0'.repeat(3000) + top.repeat(bound), // leading zeros are not significant
      prefix + '1' + pattern(digits, bound - 1),
      prefix + pattern(digits, 61),
      ' ' + prefix + pattern(digits, 100) + '\u00a0',
    ];
    for (const text of cases) expect([text, await amountOf(text)]).toEqual([text, exact(text)]);
    expect(Number(prefix + '1' + '0'.repeat(bound - 1))).toBe(Number(exact(prefix + '1' + '0'.repeat(bound - 1))));
    expect(Number(exact(prefix + top.repeat(bound)))).toBe(Infinity);
    // Past the bound: Infinity (Number() reads Infinity too), read without taking the digits apart.
    for (const text of [prefix + '1' + '0'.repeat(bound), prefix + top.repeat(4000 / (prefix === '0b' ? 1 : 2))]) {
      expect(Number(text)).toBe(Infinity);
      expect(await amountOf(text)).toBe('Infinity');
    }
    expect(await amountOf(prefix + '0'.repeat(4000))).toBe('0');
  });
});
