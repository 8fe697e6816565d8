import { createServer, request } from 'node:http';
import { endlessAnswerServer } from '../../../test/support/endless-answer';
import { serveDuringDescribe } from '../../../test/support/local-server';
import { SandboxPaymentsConnector } from './sandbox-payments.connector';

/** A charge of order-1 as the connector is given it once sent (ch_1, the provider's record of it). */
const SENT_CHARGE = {
  id: 'op_1',
  tenantId: 'demo',
  action: 'charge',
  params: { amount: 100, currency: 'EUR', reference: 'order-1' },
  expectedState: null,
  providerRef: { id: 'ch_1', version: 1 },
};

/**
 * The provider of the enclosing describe: every request answered `status` with the JSON `answer()` gives then (and the
 * `headers()` of that moment), whatever was asked.
 */
function providerAnswering(status: number, answer: () => string, headers: () => Record<string, string> = () => ({})) {
  return serveDuringDescribe(() =>
    createServer((req, res) => {
      req.resume();
      res.writeHead(status, { 'content-type': 'application/json', ...headers() }).end(answer());
    }),
  );
}

/**
 * SENT_CHARGE read from the provider at `sandboxUrl` each way the connector reads a charge list: its read-back, its
 * context read and its observation (as its kind and evidence).
 */
async function everyReadOf(sandboxUrl: string) {
  const connector = new SandboxPaymentsConnector();
  const env = () => ({ sandboxUrl, timeoutMs: 2000 });
  return [
    await connector.readBack(SENT_CHARGE, env()),
    await connector.readContext(SENT_CHARGE, env()),
    await connector.observe(SENT_CHARGE, null, env()).then((o) => ({ kind: o.observation, evidence: o.evidence })),
  ];
}

describe('sandbox.payments charge params', () => {
  const schema = new SandboxPaymentsConnector().actions.charge.params;
  const charge = (reference: unknown) => ({ amount: 100, currency: 'EUR', reference });

  const unprintable = /^printable characters only, as an HTTP header carries them: no control/;
  const spaced = 'no leading or trailing spaces (an HTTP header value loses them on the way)';
  it.each<[string, string, RegExp | string]>([
    ['CR LF', 'order-7\r\nx-injected: 1', unprintable],
    ['LF', 'order-7\n', unprintable],
    ['CR', 'order\r7', unprintable],
    ['tab', 'order\t7', unprintable],
    ['NUL', 'order\u00007', unprintable],
    ['DEL', 'order\u007f7', unprintable],
    ['a C1 control', 'order\u00857', unprintable],
    ['a character beyond U+00FF', 'order-€7', unprintable],
    // The header would reach the provider as another reference's key ("order-7 " as "order-7").
    ['a trailing space', 'order-7 ', spaced],
    ['a leading space', ' order-7', spaced],
    ['only spaces', '   ', spaced],
  ])('refuses a reference with %s (invalid_format, naming the reference)', (_, reference, message) => {
    const parsed = schema.safeParse(charge(reference));
    expect(parsed.success).toBe(false);
    expect(parsed.error?.issues).toEqual([
      expect.objectContaining({
        code: 'invalid_format',
        path: ['reference'],
        message: typeof message === 'string' ? message : expect.stringMatching(message),
      }),
    ]);
  });

  it('takes printable ASCII and Latin-1, and every reference it takes is a header value Node sends', () => {
    for (const reference of ['order-7', 'Order #7 / 2024', 'café-ñ-7', '~!@$%^&*()_+{}|:"<>?`-=[];\',./']) {
      expect(schema.safeParse(charge(reference)).success).toBe(true);
      // The connector's Idempotency-Key: Node validates header values when the request is built.
      const req = request('http://127.0.0.1:9/', { headers: { 'idempotency-key': `verity-demo-${reference}` } });
      req.on('error', () => undefined);
      req.destroy();
    }
  });
});

describe('sandbox.payments reads of a charge list whose entries are no charges', () => {
  const LIST = '{"data":[null,7,"ch_1",[]],"as_of_version":3}';
  const provider = providerAnswering(200, () => LIST);

  it('reads nothing from it (unreadable), where it threw a TypeError on the first null', async () => {
    for (const read of await everyReadOf(provider.url)) {
      expect(read.kind === 'unreachable' || read.kind === 'unavailable').toBe(true);
      expect(read.evidence.error).toBe('unreadable response body');
    }
  });
});

describe('sandbox.payments reads of a charge list that reads two ways', () => {
  let answer = '';
  const provider = providerAnswering(200, () => answer);
  const charge = (fields: string) =>
    `{"data":[{"id":"ch_1","reference":"order-1",${fields},"version":1}],"as_of_version":1}`;

  // Each answer, read last-wins (JSON.parse), is the charge asked for, succeeded; read first-wins (a proxy's log, a
  // person reading the raw answer) or exactly, it is not.
  it.each([
    ['a status named twice', charge('"amount":100,"currency":"EUR","status":"failed","status":"succeeded"')],
    ['an amount named twice', charge('"amount":100000,"amount":100,"currency":"EUR","status":"succeeded"')],
    ['an amount a double rounds', charge('"amount":100.0000000000000001,"currency":"EUR","status":"succeeded"')],
    [
      'the charge list named twice',
      `{"data":[],"data":[{"id":"ch_1","reference":"order-1","amount":100,"currency":"EUR","status":"succeeded","version":1}],"as_of_version":1}`,
    ],
    ['an amount past a double', charge('"amount":1e400,"currency":"EUR","status":"succeeded"')],
  ])('reads nothing from %s (unreadable), neither a verified charge nor one already made', async (_, body) => {
    answer = body;
    for (const read of await everyReadOf(provider.url)) {
      expect(read.kind === 'unreachable' || read.kind === 'unavailable').toBe(true);
      expect(read.evidence.error).toMatch(/^unreadable response body: /);
    }
  });

  it('still reads the same charge written once', async () => {
    answer = charge('"amount":100,"currency":"EUR","status":"succeeded"');
    await expect(
      new SandboxPaymentsConnector().readBack(SENT_CHARGE, { sandboxUrl: provider.url, timeoutMs: 2000 }),
    ).resolves.toMatchObject({ kind: 'found' });
  });
});

describe('sandbox.payments sends answered with JSON that reads two ways', () => {
  let answer = '';
  let replayed = false;
  const provider = providerAnswering(
    201,
    () => answer,
    (): Record<string, string> => (replayed ? { 'idempotent-replayed': 'true' } : {}),
  );

  const connector = new SandboxPaymentsConnector();
  const op = { ...SENT_CHARGE, providerRef: null };
  const env = () => ({ sandboxUrl: provider.url, timeoutMs: 2000 });

  it('keeps no reference from it: the id read (the last of two) could name another charge', async () => {
    replayed = false;
    answer = '{"id":"ch_2","id":"ch_1","reference":"order-1","amount":100,"currency":"EUR","version":1}';
    const outcome = await connector.send(op, env());
    expect(outcome).toMatchObject({ status: 'ACKNOWLEDGED', providerRef: {} });
    expect(outcome.status === 'ACKNOWLEDGED' && outcome.providerRef.id).toBeUndefined();
  });

  it('a replay of another charge is refused in a bounded detail, whatever the provider names it (it threw, or kept it whole)', async () => {
    replayed = true;
    for (const [id, amount, expected] of [
      ['{"toString":1}', '5000', { status: 'FAILED', reason: 'CONNECTOR_REJECTED' }],
      // An amount that is no number names no amount: whose charge is replayed is not said (unknown, for the read-back).
      ['"ch_1"', '{"toString":1,"valueOf":1}', { status: 'UNKNOWN', reason: 'CONNECTOR_ERROR' }],
      [`"${'c'.repeat(60_000)}"`, '5000', { status: 'FAILED', reason: 'CONNECTOR_REJECTED' }],
    ] as const) {
      answer = `{"id":${id},"reference":"order-1","amount":${amount},"currency":"EUR","version":1}`;
      const outcome = await connector.send(op, env());
      expect(outcome).toMatchObject(expected);
      expect(outcome.detail.length).toBeLessThan(1000);
    }
  });

  it('a replay of a charge of another reference and another amount is refused: no charge was made for this one', async () => {
    replayed = true;
    answer = '{"id":"ch_9","reference":"order-2","amount":5000,"currency":"EUR","version":1}';
    await expect(connector.send(op, env())).resolves.toMatchObject({
      status: 'FAILED',
      reason: 'CONNECTOR_REJECTED',
      detail: expect.stringContaining('order-2'),
    });
  });

  it("a replay of this request's charge named under another reference is no refusal: acknowledged, for the read-back to hold", async () => {
    // The key is this reference's and every attempt of this operation asks 100 EUR: the charge the provider holds for it
    // may be this operation's own, from an earlier attempt, echoed under a reference the provider cut or folded
    // (ORDER-1). "No charge was made" (FAILED) was not certain; the read-back finds it by id and holds it on the
    // reference (a mismatch), as it holds any acknowledged charge it reads under another reference.
    replayed = true;
    for (const reference of ['ORDER-1', 'order-2']) {
      answer = `{"id":"ch_9","reference":"${reference}","amount":100,"currency":"EUR","version":1}`;
      await expect(connector.send(op, env())).resolves.toMatchObject({
        status: 'ACKNOWLEDGED',
        providerRef: { id: 'ch_9', reference },
        detail: expect.stringContaining(reference),
      });
    }
  });

  it('a replay whose charge reads two ways is an unknown outcome, not "no charge was made" nor a replay of this one', async () => {
    replayed = true;
    for (const amounts of ['"amount":100,"amount":5000', '"amount":5000,"amount":100']) {
      answer = `{"id":"ch_1","reference":"order-1",${amounts},"currency":"EUR","version":1}`;
      await expect(connector.send(op, env())).resolves.toMatchObject({
        status: 'UNKNOWN',
        detail: expect.stringMatching(/reads two ways/),
      });
    }
  });
});

describe('sandbox.payments reads of a charge list that never ends', () => {
  const provider = endlessAnswerServer(200);
  const local = serveDuringDescribe(() => provider.server);

  it('reads nothing from it ("response too large"), answered at the size limit, the connection closed', async () => {
    const read = await new SandboxPaymentsConnector().readBack(
      { ...SENT_CHARGE, id: 'op_endless', params: { ...SENT_CHARGE.params, reference: 'order-endless' } },
      // Far beyond the test's own timeout: only a connector that stops reading at the limit answers within it.
      { sandboxUrl: local.url, timeoutMs: 60_000 },
    );
    expect(read).toMatchObject({ kind: 'unreachable', evidence: { error: 'response too large' } });
    await provider.closed[0];
  }, 20_000);
});

describe('sandbox.payments reads of the acknowledged charge under another reference', () => {
  // The charge the provider acknowledged (ch_1), listed for this reference's query, amount, currency and status as
  // asked — but the provider's record of it names another order's reference: not the charge of order-1.
  let reference = 'order-2';
  const provider = providerAnswering(
    200,
    () =>
      `{"data":[{"id":"ch_1","reference":${JSON.stringify(reference)},"amount":100,"currency":"EUR","status":"succeeded","version":1}],"as_of_version":1}`,
  );

  const connector = new SandboxPaymentsConnector();
  const env = () => ({ sandboxUrl: provider.url, timeoutMs: 2000 });

  it('is no verification: a mismatch on the reference (it was VERIFIED by the id alone)', async () => {
    reference = 'order-2';
    await expect(connector.readBack(SENT_CHARGE, env())).resolves.toMatchObject({
      kind: 'mismatch',
      fields: ['reference'],
      evidence: { record: { id: 'ch_1', reference: 'order-2' } },
    });
  });

  it('nor, once verified, a charge that converged: it reads differently from what was verified', async () => {
    reference = 'order-2';
    const observed = await connector.observe(SENT_CHARGE, { id: 'ch_1', version: 1 }, env());
    expect(observed).toMatchObject({ observation: 'degraded' });
  });

  it('still verifies the charge listed under its own reference', async () => {
    reference = 'order-1';
    await expect(connector.readBack(SENT_CHARGE, env())).resolves.toMatchObject({ kind: 'found' });
    await expect(connector.observe(SENT_CHARGE, { id: 'ch_1', version: 1 }, env())).resolves.toMatchObject({
      observation: 'converged',
    });
  });
});

describe('sandbox.payments reads, with no acknowledged id, of a list for this reference naming its charge otherwise', () => {
  // An unknown outcome (no id acknowledged), read back by reference: the provider lists, for order-1, a charge of
  // order-1's amount and currency under a reference it echoes folded (ORDER-1).
  const provider = providerAnswering(
    200,
    () =>
      '{"data":[{"id":"ch_1","reference":"ORDER-1","amount":100,"currency":"EUR","status":"succeeded","version":1}],"as_of_version":1}',
  );
  const connector = new SandboxPaymentsConnector();

  it('is no proof of absence (it read "absent", which fails the operation): a mismatch on the reference', async () => {
    await expect(
      connector.readBack({ ...SENT_CHARGE, providerRef: null }, { sandboxUrl: provider.url, timeoutMs: 2000 }),
    ).resolves.toMatchObject({ kind: 'mismatch', fields: ['reference'], evidence: { record: { id: 'ch_1' } } });
  });
});

describe('sandbox.payments observation of a list holding a newer charge of another reference', () => {
  // The verified charge of order-1, and a newer charge the list holds for order-2 (a provider that lists more than the
  // reference asked for): not "a newer charge for this reference".
  const provider = providerAnswering(
    200,
    () =>
      '{"data":[{"id":"ch_1","reference":"order-1","amount":100,"currency":"EUR","status":"succeeded","version":1},' +
      '{"id":"ch_2","reference":"order-2","amount":100,"currency":"EUR","status":"succeeded","version":2}],"as_of_version":2}',
  );

  it('is no supersession of the verified charge: it converged (it was "1 newer charge(s) for this reference")', async () => {
    const observed = await new SandboxPaymentsConnector().observe(
      SENT_CHARGE,
      { id: 'ch_1', version: 1 },
      { sandboxUrl: provider.url, timeoutMs: 2000 },
    );
    expect(observed).toMatchObject({ observation: 'converged' });
  });
});

describe('sandbox.payments reads of a charge list naming the acknowledged charge twice, differently', () => {
  // ch_1 listed twice: as asked (100 EUR), and as 5000 EUR. Read by its first entry it was VERIFIED, by its second a
  // mismatch: the answer reads two ways, as a member named twice does.
  let list = '';
  const provider = providerAnswering(200, () => list);
  const entry = (amount: number) =>
    `{"id":"ch_1","reference":"order-1","amount":${amount},"currency":"EUR","status":"succeeded","version":1}`;

  const connector = new SandboxPaymentsConnector();
  const env = () => ({ sandboxUrl: provider.url, timeoutMs: 2000 });

  it('reads nothing from it (unreadable), neither a verified charge nor a mismatch', async () => {
    for (const data of [`${entry(100)},${entry(5000)}`, `${entry(5000)},${entry(100)}`]) {
      list = `{"data":[${data}],"as_of_version":1}`;
      await expect(connector.readBack(SENT_CHARGE, env())).resolves.toMatchObject({
        kind: 'unreachable',
        evidence: { error: expect.stringMatching(/^unreadable response body: charge ch_1 listed twice/) },
      });
      const observed = await connector.observe(SENT_CHARGE, { id: 'ch_1', version: 1 }, env());
      expect(observed).toMatchObject({ observation: 'unavailable' });
    }
  });

  it('reads the same charge listed twice alike as the one charge it is', async () => {
    list = `{"data":[${entry(100)},${entry(100)}],"as_of_version":1}`;
    await expect(connector.readBack(SENT_CHARGE, env())).resolves.toMatchObject({ kind: 'found' });
  });
});
