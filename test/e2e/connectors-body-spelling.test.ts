import { Stack } from '../support/stack';
import { unique } from '../support/http';
import {
  Call,
  TargetServer,
  allowLoopbackPort,
  approvalAboveFifty,
  deniedAfter,
  httpOp,
  recordingClient,
  settled,
  startTarget,
} from './connectors-support';

/**
 * A spending cap and an approval threshold on `http` read the amount at one spelling of one path of the JSON body
 * (`body.amount`). A target may read the body otherwise: Go's encoding/json and ASP.NET bind member names ignoring case
 * (the last of `amount` and `AMOUNT` wins), and a server told the body is a form (`Content-Type`) parses
 * `amount=...` out of a string value. Either way the target would charge an amount neither the cap nor the threshold
 * ever saw: such an operation is refused at intake (400 naming the field; nothing written, nothing sent).
 */
describe('http: a body the target would read otherwise than the cap and the threshold', () => {
  let stack: Stack;
  let call: Call;
  let target: TargetServer;

  const table = async (name: string) =>
    ((await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM ${name}`)) as { n: number }[])[0].n;
  const written = async () => ({ executions: await table('executions'), operations: await table('operations') });
  const posts = () => target.seen.filter((s) => s.method === 'POST').length;
  const submit = (params: Record<string, unknown>) =>
    call<{ errors?: { field: string; rule: string; message: string }[] }>('POST', '/v1/executions', {
      body: { agent_id: 'a', intent: 'pay', operations: [httpOp('pay', params)] },
    });

  beforeAll(async () => {
    target = await startTarget();
    stack = await Stack.start({ label: 'connspell' });
    ({ call } = recordingClient(stack));
    await allowLoopbackPort(call, target.port, {
      spending_caps: [{ period: 'day', max_amount: 100, amount_field: 'body.amount' }],
    });
    await approvalAboveFifty(call);
  });
  afterAll(async () => {
    await stack?.stop();
    await target?.close();
  });

  it('refuses a body naming the capped amount twice in two cases (a case-insensitive target takes the last)', async () => {
    const before = await written();
    for (const [body, field] of [
      [{ id: unique('pay'), amount: 1, AMOUNT: 1_000_000 }, 'operations[0].params.body.AMOUNT'],
      // Nested too, and by Unicode case folding: Go folds U+017F (long s) to "s" and U+212A (Kelvin sign) to "k".
      [{ amount: 1, order: { cost: 1, coſt: 9 } }, 'operations[0].params.body.order.co\u017ft'],
      [{ amount: 1, items: [{ sku: 'a', Kind: 'x', kind: 'y' }] }, 'operations[0].params.body.items[0].kind'],
    ] as const) {
      const refused = await submit({ method: 'POST', url: `${target.base}/orders`, body });
      expect({ body, status: refused.status }).toEqual({ body, status: 400 });
      expect(refused.body.errors).toEqual([
        expect.objectContaining({ field, rule: 'duplicate_key', message: expect.stringMatching(/ignoring case/) }),
      ]);
    }
    expect(await written()).toEqual(before);
    expect(posts()).toBe(0);
  });

  /**
   * Red team (hostile pass 4): names equal once normalised were kept apart — `"amount "` (a trailing space), a
   * full-width `ａｍｏｕｎｔ` (NFKC: `amount`), `amo\u200bunt` (a zero-width space), a soft hyphen — while the cap read
   * `amount` only. A target that trims, NFKC-normalises or drops invisible characters in names charges the other one.
   */
  it('refuses a body naming the capped amount twice once names are normalised (spaces, NFKC, invisible characters)', async () => {
    const before = await written();
    for (const other of [
      'amount ',
      ' amount',
      'amount\u00a0',
      '\uff41\uff4d\uff4f\uff55\uff4e\uff54',
      'amo\u200bunt',
      '\u00adamount',
      'amount\u2060',
      '\ufeffamount',
      'AMOUNT\u200d',
    ]) {
      const body = { id: unique('pay'), amount: 1, [other]: 1_000_000 };
      const refused = await submit({ method: 'POST', url: `${target.base}/orders`, body });
      expect({ other, status: refused.status }).toEqual({ other, status: 400 });
      expect(refused.body.errors).toEqual([
        expect.objectContaining({
          field: `operations[0].params.body.${other}`,
          rule: 'duplicate_key',
          message: expect.stringMatching(/ignoring case/),
        }),
      ]);
    }
    expect(await written()).toEqual(before);
    expect(posts()).toBe(0);
  });

  it('refuses the retry of an operation accepted before with such a body (nothing written)', async () => {
    // Held for approval (above the threshold), then given the body an operation accepted before the rule may have.
    const accepted = await submit({
      method: 'POST',
      url: `${target.base}/orders`,
      body: { id: unique('pay'), amount: 60 },
    });
    const opId = await deniedAfter(call, accepted, (id) =>
      stack.db.dataSource.query(
        `UPDATE operations SET params = jsonb_set(params, '{body,amount\u200b}', '1000000') WHERE id = $1`,
        [id],
      ),
    );
    const before = await written();
    const retried = await call<{ errors: { field: string; rule: string }[] }>('POST', `/v1/operations/${opId}/retry`);
    expect(retried.status).toBe(400);
    expect(retried.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(retried.body.errors).toEqual([
      expect.objectContaining({ field: expect.stringMatching(/^params\.body\.amount\u200b?$/), rule: 'duplicate_key' }),
    ]);
    expect(await written()).toEqual(before);
    expect(posts()).toBe(0);
  });

  it('refuses a Content-Type that would have the JSON body read as something else than JSON', async () => {
    const before = await written();
    // A form parser reads `amount=1000000` out of the memo: {"amount":1,"memo":"&amount=1000000&x="} as a form.
    const body = { id: unique('pay'), amount: 1, memo: '&amount=1000000&x=' };
    for (const value of [
      'application/x-www-form-urlencoded',
      'text/plain',
      'multipart/form-data; boundary=x',
      'application/json; charset=utf-16',
      'application/jsonp',
    ]) {
      const refused = await submit({
        method: 'POST',
        url: `${target.base}/orders`,
        headers: { 'Content-Type': value },
        body,
      });
      expect({ value, status: refused.status }).toEqual({ value, status: 400 });
      expect(refused.body.errors).toEqual([
        expect.objectContaining({ field: 'operations[0].params.headers.Content-Type', rule: 'json_content_type' }),
      ]);
    }
    expect(await written()).toEqual(before);
    expect(posts()).toBe(0);
  });

  it('still sends a body whose names differ otherwise than by case, with a JSON Content-Type of its own', async () => {
    const id = unique('pay');
    const body = { id, amount: 20, amount_total: 20, items: [{ kind: 'a' }, { Kind: 'b' }] };
    const accepted = await submit({
      method: 'POST',
      url: `${target.base}/orders`,
      headers: { 'content-type': 'application/vnd.api+json; charset=UTF-8' },
      body,
    });
    expect(accepted.status).toBe(201);
    const done = await settled(call, (accepted.body as { id: string }).id);
    expect(done.operations[0].status).toBe('ACKNOWLEDGED');
    const received = target.seen.filter((s) => s.method === 'POST');
    expect(received.map((s) => [s.headers['content-type'], JSON.parse(s.body) as unknown])).toEqual([
      ['application/vnd.api+json; charset=UTF-8', body],
    ]);
  });
});
