import { request as httpRequest } from 'node:http';
import { SANDBOX_ACCOUNT_HEADER } from '@verity/connectors';
import { connect } from 'node:net';
import { waitFor } from '../../../test/support/stack';
import { loadConfig } from '@verity/platform';
import {
  ACCOUNT_HEADER,
  DEFAULT_SANDBOX_PORT,
  MAX_BODY_BYTES,
  startSandboxProvider,
  type Charge,
  type ChargeList,
  type EffectsReport,
  type ErrorBody,
  type FaultConfig,
  type SandboxProvider,
  type WireLog,
  type WireRequest,
} from './sandbox-provider';

interface Result<T = unknown> {
  status: number;
  headers: Headers;
  body: T;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function call<T = unknown>(
  base: string,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<Result<T>> {
  const response = await fetch(`${base}${path}`, {
    method,
    headers: body === undefined ? headers : { 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await response.text();
  return {
    status: response.status,
    headers: response.headers,
    body: (text === '' ? undefined : JSON.parse(text)) as T,
  };
}

interface RawOutcome {
  data: string;
  /** How the server ended the connection: a FIN ('end'), an RST ('error' with code), or not at all ('open'). */
  ending: 'end' | 'error' | 'open';
  code?: string;
}

/**
 * Speaks HTTP/1.1 over a bare TCP socket, to see exactly what the server does to the connection. `openUntil`: how long
 * the client waits for the server before it reports the connection 'open' — a number of milliseconds (a client giving
 * up), or a wait for what shows the server has passed the point where it would have answered or closed (given
 * whether the connection has ended meanwhile, to stop looking).
 */
function raw(
  port: number,
  method: string,
  path: string,
  body?: unknown,
  openUntil: number | ((settled: () => boolean) => Promise<unknown>) = 2_000,
): Promise<RawOutcome> {
  return new Promise((resolve) => {
    const payload = body === undefined ? '' : JSON.stringify(body);
    const socket = connect(port, '127.0.0.1');
    let data = '';
    let settled = false;
    const finish = (outcome: RawOutcome) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(outcome);
    };
    const timer =
      typeof openUntil === 'number' ? setTimeout(() => finish({ data, ending: 'open' }), openUntil) : undefined;
    if (typeof openUntil === 'function') {
      // (It stops looking once the connection has ended otherwise; a wait that fails is reported as the ending.)
      void openUntil(() => settled).then(
        () => finish({ data, ending: 'open' }),
        (error: Error) => finish({ data, ending: 'error', code: `the wait failed: ${error.message}` }),
      );
    }
    socket.on('data', (chunk) => (data += chunk.toString('utf8')));
    socket.on('end', () => finish({ data, ending: 'end' }));
    socket.on('error', (error: NodeJS.ErrnoException) => finish({ data, ending: 'error', code: error.code }));
    socket.write(
      `${method} ${path} HTTP/1.1\r\nHost: sandbox\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`,
    );
  });
}

const charge = (reference: string, amount = 1250) => ({ amount, currency: 'EUR', reference });

describe('sandbox provider', () => {
  const acme = { [ACCOUNT_HEADER]: 'acme' };
  const umbrella = { [ACCOUNT_HEADER]: 'umbrella' };
  let provider: SandboxProvider;
  let base: string;
  const api = <T = unknown>(method: string, path: string, body?: unknown, headers?: Record<string, string>) =>
    call<T>(base, method, path, body, headers);
  const effects = async () => (await api<EffectsReport>('GET', '/__effects')).body;
  /**
   * A wait (for `raw`) until the wire log holds one more request `fault` hit than now: the provider has then done all it
   * does with it (it logs a request once it has answered it, or decided not to), whatever the time that took.
   */
  const nextHitOf = async (fault: string) => {
    const hits = async () =>
      (await api<WireLog>('GET', '/__requests')).body.requests.filter((r) => r.fault === fault).length;
    const before = await hits();
    return (settled: () => boolean) =>
      waitFor(
        async () => settled() || (await hits()) > before,
        (done) => done,
        Infinity,
        10,
      );
  };
  const setFaults = async (config: unknown) => {
    const result = await api<FaultConfig>('PUT', '/__faults', config);
    expect(result.status).toBe(200);
    return result.body;
  };

  beforeAll(async () => {
    provider = await startSandboxProvider({ port: 0 });
    base = provider.url;
  });
  afterAll(() => provider.close());
  beforeEach(async () => {
    expect((await api('POST', '/__reset')).status).toBe(204);
  });

  describe('basics', () => {
    it('listens on an ephemeral port and reports its url', () => {
      expect(provider.port).toBeGreaterThan(0);
      expect(provider.url).toBe(`http://127.0.0.1:${provider.port}`);
    });

    it('answers /health', async () => {
      const result = await api('GET', '/health');
      expect(result.status).toBe(200);
      expect(result.body).toEqual({ status: 'ok' });
      expect(result.headers.get('content-type')).toMatch(/^application\/json/);
    });

    it('answers unknown routes with a JSON 404', async () => {
      for (const [method, path] of [
        ['GET', '/nope'],
        ['DELETE', '/v1/charges'],
        ['GET', '/__nope'],
        ['POST', '/v1/charges/ch_1'],
      ]) {
        const result = await api<ErrorBody>(method, path);
        expect(result.status).toBe(404);
        expect(result.body.error.code).toBe('not_found');
        expect(typeof result.body.error.message).toBe('string');
      }
    });

    it('answers a body that is not JSON with a JSON 400', async () => {
      for (const path of ['/v1/charges', '/v1/messages']) {
        const result = await api<ErrorBody>('POST', path, '{"amount": 1,');
        expect(result.status).toBe(400);
        expect(result.body.error.code).toBe('invalid_json');
      }
      const faults = await api<ErrorBody>('PUT', '/__faults', 'not json');
      expect(faults.status).toBe(400);
      expect((await effects()).total).toBe(0);
    });

    it('answers a body over 1 MiB with 413 and commits nothing', async () => {
      const reference = 'x'.repeat(MAX_BODY_BYTES);
      const result = await api<ErrorBody>('POST', '/v1/charges', charge(reference));
      expect(result.status).toBe(413);
      expect(result.body.error.code).toBe('payload_too_large');
      expect((await effects()).total).toBe(0);
      // A body just under the limit is accepted.
      const fits = await api<Charge>('POST', '/v1/charges', charge('y'.repeat(MAX_BODY_BYTES - 100)));
      expect(fits.status).toBe(201);
    });

    it('answers a body over 1 MiB with 413 over node:http with chunked encoding too', async () => {
      const status = await new Promise<number>((resolve, reject) => {
        const req = httpRequest(`${base}/v1/messages`, { method: 'POST' }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        });
        req.on('error', reject);
        const chunk = Buffer.alloc(256 * 1024, 'a');
        for (let i = 0; i < 5; i += 1) req.write(chunk);
        req.end();
      });
      expect(status).toBe(413);
    });
  });

  describe('POST /v1/charges', () => {
    it('creates a charge with a version bumped on every committed write', async () => {
      const first = await api<Charge>('POST', '/v1/charges', charge('order-1'));
      expect(first.status).toBe(201);
      expect(first.body).toEqual({
        id: expect.stringMatching(/^ch_[0-9a-f]+$/),
        reference: 'order-1',
        amount: 1250,
        currency: 'EUR',
        status: 'succeeded',
        version: 1,
      });
      await api('POST', '/v1/messages', { to: '+15550100', body: 'hi' });
      const second = await api<Charge>('POST', '/v1/charges', charge('order-2', 99));
      expect(second.body.version).toBe(3);
      expect(second.body.id).not.toBe(first.body.id);
    });

    it.each([
      ['no body', undefined],
      ['an array', [1]],
      ['a missing amount', { currency: 'EUR', reference: 'r' }],
      ['a zero amount', charge('r', 0)],
      ['a negative amount', charge('r', -5)],
      ['a fractional amount', charge('r', 1.5)],
      ['a string amount', { amount: '10', currency: 'EUR', reference: 'r' }],
      ['a 2-letter currency', { amount: 1, currency: 'EU', reference: 'r' }],
      ['a numeric currency', { amount: 1, currency: 978, reference: 'r' }],
      ['an empty reference', charge('')],
      ['a missing reference', { amount: 1, currency: 'EUR' }],
    ])('rejects %s with 400 invalid_request and commits nothing', async (_name, body) => {
      const result = await api<ErrorBody>('POST', '/v1/charges', body);
      expect(result.status).toBe(400);
      expect(result.body.error.code).toBe('invalid_request');
      expect(result.body.error.message.length).toBeGreaterThan(0);
      expect((await effects()).total).toBe(0);
    });

    it('declines a reference starting with decline- with 402 and commits nothing', async () => {
      const result = await api<ErrorBody>('POST', '/v1/charges', charge('decline-order-9'));
      expect(result.status).toBe(402);
      expect(result.body.error.code).toBe('card_declined');
      expect(await effects()).toEqual({ total: 0, dropped: 0, charges: {}, messages: {}, duplicates: [] });
      // Nothing was committed, so the version did not move.
      expect((await api<Charge>('POST', '/v1/charges', charge('ok'))).body.version).toBe(1);
    });

    it('replays the same charge for the same Idempotency-Key, even with a different body', async () => {
      const headers = { 'Idempotency-Key': 'key-1' };
      const first = await api<Charge>('POST', '/v1/charges', charge('order-1'), headers);
      const again = await api<Charge>('POST', '/v1/charges', charge('order-1'), headers);
      const changed = await api<Charge>('POST', '/v1/charges', charge('order-other', 7), headers);
      const declinedBody = await api<Charge>('POST', '/v1/charges', charge('decline-x'), headers);
      for (const replay of [again, changed, declinedBody]) {
        expect(replay.status).toBe(201);
        expect(replay.body).toEqual(first.body);
        expect(replay.headers.get('idempotent-replayed')).toBe('true');
      }
      expect(first.headers.get('idempotent-replayed')).toBeNull();
      const report = await effects();
      expect(report.total).toBe(1);
      expect(report.charges).toEqual({ 'order-1': { count: 1, ids: [first.body.id], amounts: [1250] } });
      expect(report.duplicates).toEqual([]);
    });

    it('does not remember a declined request under its Idempotency-Key', async () => {
      const headers = { 'Idempotency-Key': 'key-d' };
      expect((await api('POST', '/v1/charges', charge('decline-1'), headers)).status).toBe(402);
      expect((await api('POST', '/v1/charges', charge('fine'), headers)).status).toBe(201);
    });

    it('commits a second effect for a different key or no key, and lists the duplicate', async () => {
      const a = await api<Charge>('POST', '/v1/charges', charge('order-7'), { 'Idempotency-Key': 'a' });
      const b = await api<Charge>('POST', '/v1/charges', charge('order-7', 1300), { 'Idempotency-Key': 'b' });
      const c = await api<Charge>('POST', '/v1/charges', charge('order-7', 1400));
      await api('POST', '/v1/charges', charge('order-8'));
      const report = await effects();
      expect(report.total).toBe(4);
      expect(report.charges['order-7']).toEqual({
        count: 3,
        ids: [a.body.id, b.body.id, c.body.id],
        amounts: [1250, 1300, 1400],
      });
      expect(report.charges['order-8'].count).toBe(1);
      expect(report.duplicates).toEqual([{ kind: 'charge', key: 'order-7', count: 3 }]);
    });

    it('reads the account from the header the payments connector sends', () => {
      expect(ACCOUNT_HEADER).toBe(SANDBOX_ACCOUNT_HEADER);
    });

    /**
     * Two accounts' effects of one reference (acme's and umbrella's, already made) are no duplicate; a second in one
     * account (acme's, made here) is.
     */
    async function expectDuplicateWithinAnAccountOnly(
      kind: 'charge' | 'message',
      key: string,
      again: () => Promise<unknown>,
    ): Promise<void> {
      const report = await effects();
      expect((kind === 'charge' ? report.charges : report.messages)[key].count).toBe(2);
      expect(report.duplicates).toEqual([]);
      await again();
      expect((await effects()).duplicates).toEqual([{ kind, key, count: 2 }]);
    }

    it('scopes Idempotency-Keys to the account: the same key in another account is another request', async () => {
      const ours = await api<Charge>('POST', '/v1/charges', charge('order-9'), { 'Idempotency-Key': 'k', ...acme });
      const theirs = await api<Charge>('POST', '/v1/charges', charge('order-9'), {
        'Idempotency-Key': 'k',
        ...umbrella,
      });
      const ourRetry = await api<Charge>('POST', '/v1/charges', charge('order-9'), { 'Idempotency-Key': 'k', ...acme });
      expect(theirs.body.id).not.toBe(ours.body.id);
      expect(theirs.headers.get('idempotent-replayed')).toBeNull();
      expect(ourRetry.body).toEqual(ours.body);
      expect(ourRetry.headers.get('idempotent-replayed')).toBe('true');
      await expectDuplicateWithinAnAccountOnly('charge', 'order-9', () =>
        api('POST', '/v1/charges', charge('order-9'), acme),
      );
    });

    it("counts a message's client_ref per account, as the SMS connector sends it: two tenants' refs are no duplicate", async () => {
      const sms = (clientRef: string) => ({ to: '+15550100', body: 'Paid', client_ref: clientRef });
      await api('POST', '/v1/messages', sms('order-5-sms'), acme);
      await api('POST', '/v1/messages', sms('order-5-sms'), umbrella);
      await expectDuplicateWithinAnAccountOnly('message', 'order-5-sms', () =>
        api('POST', '/v1/messages', sms('order-5-sms'), acme),
      );
    });

    it('keeps a reference named __proto__ as an ordinary key', async () => {
      await api('POST', '/v1/charges', charge('__proto__'));
      const report = await effects();
      expect(Object.keys(report.charges)).toEqual(['__proto__']);
      expect(report.charges['__proto__'].count).toBe(1);
    });
  });

  describe('GET /v1/charges', () => {
    it('lists charges by reference with as_of_version from the primary when there is no lag', async () => {
      const one = await api<Charge>('POST', '/v1/charges', charge('order-1'));
      await api('POST', '/v1/charges', charge('order-2'));
      await api('POST', '/v1/messages', { to: '+1', body: 'x' });
      const list = await api<ChargeList>('GET', '/v1/charges?reference=order-1');
      expect(list.status).toBe(200);
      expect(list.body).toEqual({ data: [one.body], as_of_version: 3 });
      const none = await api<ChargeList>('GET', '/v1/charges?reference=missing');
      expect(none.body).toEqual({ data: [], as_of_version: 3 });
      const all = await api<ChargeList>('GET', '/v1/charges');
      expect(all.body.data).toHaveLength(2);
    });

    it("reads only the caller's account: another account's charge of the same reference is not listed or got", async () => {
      const ours = await api<Charge>('POST', '/v1/charges', charge('order-1'), acme);
      const shared = await api<Charge>('POST', '/v1/charges', charge('order-1'));
      const list = (headers: Record<string, string>) =>
        api<ChargeList>('GET', '/v1/charges?reference=order-1', undefined, headers);
      expect((await list(acme)).body.data).toEqual([ours.body]);
      expect((await list(umbrella)).body.data).toEqual([]);
      expect((await list({})).body.data).toEqual([shared.body]);
      expect((await api('GET', `/v1/charges/${ours.body.id}`, undefined, acme)).status).toBe(200);
      expect((await api('GET', `/v1/charges/${ours.body.id}`, undefined, umbrella)).status).toBe(404);
      expect((await api('GET', `/v1/charges/${ours.body.id}`)).status).toBe(404);
    });

    it('reports as_of_version 0 when nothing was written', async () => {
      expect((await api('GET', '/v1/charges?reference=r')).body).toEqual({ data: [], as_of_version: 0 });
    });

    it('gets one charge by id, or 404', async () => {
      const created = await api<Charge>('POST', '/v1/charges', charge('order-1'));
      const found = await api<Charge>('GET', `/v1/charges/${created.body.id}`);
      expect(found.status).toBe(200);
      expect(found.body).toEqual(created.body);
      const missing = await api<ErrorBody>('GET', '/v1/charges/ch_nope');
      expect(missing.status).toBe(404);
      expect(missing.body.error.code).toBe('not_found');
    });

    /**
     * Runs `scenario` until one run made its reads within `lagMs` of the first write they must not show (`hiddenFrom`,
     * taken just before that write): whether a write is still hidden depends on how soon it is read, and a run that a
     * loaded machine made slower than the lag proves nothing. The scenario answers the assertions to make once judged.
     */
    async function readWithinLag(
      lagMs: number,
      scenario: () => Promise<{ hiddenFrom: number; judge: () => Promise<void> }>,
    ): Promise<void> {
      for (let run = 0; run < 5; run += 1) {
        expect((await api('POST', '/__reset')).status).toBe(204);
        const { hiddenFrom, judge } = await scenario();
        if (performance.now() - hiddenFrom < lagMs) return judge();
      }
      throw new Error(`no run read its writes within ${lagMs} ms of making them`);
    }

    it('serves reads from a replica that shows only writes at least replica_lag_ms old', async () => {
      await readWithinLag(400, async () => {
        const hiddenFrom = performance.now();
        const before = await api<Charge>('POST', '/v1/charges', charge('order-1'));
        await sleep(50);
        await setFaults({ replica_lag_ms: 400 });
        const fresh = await api<Charge>('POST', '/v1/charges', charge('order-1', 2000));
        await api('POST', '/v1/messages', { to: '+1', body: 'x', client_ref: 'm-1' });
        const early = await api<ChargeList>('GET', '/v1/charges?reference=order-1');
        const freshById = await api('GET', `/v1/charges/${fresh.body.id}`);
        return {
          hiddenFrom,
          judge: async () => {
            // Even the first write is younger than the lag, so the replica has nothing yet.
            expect(early.body).toEqual({ data: [], as_of_version: 0 });
            expect(freshById.status).toBe(404);
            // The primary (ground truth) sees everything at once.
            expect((await effects()).charges['order-1'].count).toBe(2);

            // Ages only grow: after this every write is older than the lag, however slow the machine.
            await sleep(450);
            const late = await api<ChargeList>('GET', '/v1/charges?reference=order-1');
            expect(late.body).toEqual({ data: [before.body, fresh.body], as_of_version: 3 });
            expect((await api('GET', `/v1/charges/${fresh.body.id}`)).status).toBe(200);
          },
        };
      });
    });

    it('reports the highest replica-visible version while newer writes are still hidden', async () => {
      await readWithinLag(300, async () => {
        await api('POST', '/v1/charges', charge('old'));
        await setFaults({ replica_lag_ms: 300 });
        await sleep(350);
        const hiddenFrom = performance.now();
        await api('POST', '/v1/charges', charge('new'));
        const list = await api<ChargeList>('GET', '/v1/charges');
        return {
          hiddenFrom,
          judge: async () => {
            expect(list.body.as_of_version).toBe(1);
            expect(list.body.data.map((c) => c.reference)).toEqual(['old']);
            // Removing the lag makes the replica the primary again.
            await setFaults({ replica_lag_ms: 0 });
            expect((await api<ChargeList>('GET', '/v1/charges')).body.as_of_version).toBe(2);
          },
        };
      });
    });

    it('read_fault unavailable answers 503 on reads only', async () => {
      const created = await api<Charge>('POST', '/v1/charges', charge('order-1'));
      await setFaults({ read_fault: 'unavailable' });
      for (const path of ['/v1/charges?reference=order-1', `/v1/charges/${created.body.id}`]) {
        const result = await api<ErrorBody>('GET', path);
        expect(result.status).toBe(503);
        expect(result.body.error.code).toBe('unavailable');
      }
      expect((await api('POST', '/v1/charges', charge('order-2'))).status).toBe(201);
      expect((await effects()).total).toBe(2);
    });

    it('read_fault field_missing drops status from each charge read', async () => {
      const created = await api<Charge>('POST', '/v1/charges', charge('order-1'));
      await api('POST', '/v1/charges', charge('order-1'));
      await setFaults({ read_fault: 'field_missing' });
      const list = await api<ChargeList>('GET', '/v1/charges?reference=order-1');
      expect(list.body.data).toHaveLength(2);
      for (const item of list.body.data) {
        expect(item).not.toHaveProperty('status');
        expect(item.amount).toBe(1250);
      }
      const one = await api<Partial<Charge>>('GET', `/v1/charges/${created.body.id}`);
      expect(one.body).not.toHaveProperty('status');
      // The write path is unaffected.
      expect((await api<Charge>('POST', '/v1/charges', charge('order-3'))).body.status).toBe('succeeded');
    });

    it('read_fault record_lost answers reads up to date but without any charge; the effect stays recorded', async () => {
      const created = await api<Charge>('POST', '/v1/charges', charge('order-1'));
      await setFaults({ read_fault: 'record_lost' });
      const list = await api<ChargeList>('GET', '/v1/charges?reference=order-1');
      expect(list.status).toBe(200);
      expect(list.body.data).toEqual([]);
      // Not a lagging replica: its version is the primary's, so the absence looks current.
      expect(list.body.as_of_version).toBeGreaterThanOrEqual(created.body.version);
      expect((await api('GET', `/v1/charges/${created.body.id}`)).status).toBe(404);
      expect((await effects()).charges['order-1'].count).toBe(1);
    });

    it('read_fault amount_mismatch reports amount + 1 on reads, never in /__effects', async () => {
      const created = await api<Charge>('POST', '/v1/charges', charge('order-1', 500));
      await setFaults({ read_fault: 'amount_mismatch' });
      const list = await api<ChargeList>('GET', '/v1/charges?reference=order-1');
      expect(list.body.data).toEqual([{ ...created.body, amount: 501 }]);
      expect((await api<Charge>('GET', `/v1/charges/${created.body.id}`)).body.amount).toBe(501);
      expect((await effects()).charges['order-1'].amounts).toEqual([500]);
    });
  });

  describe('POST /v1/messages', () => {
    it('queues every POST as a new effect, grouped by client_ref', async () => {
      const first = await api<{ id: string; status: string }>('POST', '/v1/messages', {
        to: '+15550100',
        body: 'Paid',
        client_ref: 'order-1-sms',
      });
      expect(first.status).toBe(202);
      expect(first.body).toEqual({ id: expect.stringMatching(/^msg_[0-9a-f]+$/), status: 'queued' });
      const second = await api<{ id: string }>('POST', '/v1/messages', {
        to: '+15550101',
        body: 'Paid',
        client_ref: 'order-1-sms',
      });
      expect(second.body.id).not.toBe(first.body.id);
      await api('POST', '/v1/messages', { to: '+1', body: 'a' });
      await api('POST', '/v1/messages', { to: '+2', body: 'b', client_ref: null });
      const report = await effects();
      expect(report.total).toBe(4);
      expect(report.messages).toEqual({
        'order-1-sms': { count: 2, ids: [first.body.id, second.body.id], to: ['+15550100', '+15550101'] },
        '(none)': { count: 2, ids: [expect.any(String), expect.any(String)], to: ['+1', '+2'] },
      });
      // Messages without a client_ref are different intents, not duplicates.
      expect(report.duplicates).toEqual([{ kind: 'message', key: 'order-1-sms', count: 2 }]);
    });

    it('ignores Idempotency-Key: messages have no provider idempotency', async () => {
      const headers = { 'Idempotency-Key': 'same' };
      await api('POST', '/v1/messages', { to: '+1', body: 'x', client_ref: 'c' }, headers);
      await api('POST', '/v1/messages', { to: '+1', body: 'x', client_ref: 'c' }, headers);
      expect((await effects()).messages['c'].count).toBe(2);
    });

    it.each([
      ['no body', undefined],
      ['a missing to', { body: 'x' }],
      ['an empty to', { to: '', body: 'x' }],
      ['a numeric body', { to: '+1', body: 5 }],
      ['an empty client_ref', { to: '+1', body: 'x', client_ref: '' }],
      ['a numeric client_ref', { to: '+1', body: 'x', client_ref: 7 }],
    ])('rejects %s with 400 invalid_request', async (_name, body) => {
      const result = await api<ErrorBody>('POST', '/v1/messages', body);
      expect(result.status).toBe(400);
      expect(result.body.error.code).toBe('invalid_request');
      expect((await effects()).total).toBe(0);
    });
  });

  describe('/__faults', () => {
    it('starts empty and round-trips a config with defaults filled in', async () => {
      expect((await api('GET', '/__faults')).body).toEqual({ rules: [], replica_lag_ms: 0, read_fault: null });
      const stored = await setFaults({
        rules: [
          { method: 'POST', path: '/v1/charges', fault: 'reject' },
          { method: 'GET', path: '/v1/charges', fault: 'timeout_after_commit', probability: 0.25, count: 3 },
        ],
        replica_lag_ms: 100,
        read_fault: 'field_missing',
      });
      const expected: FaultConfig = {
        rules: [
          { method: 'POST', path: '/v1/charges', fault: 'reject', probability: 1, count: null },
          { method: 'GET', path: '/v1/charges', fault: 'timeout_after_commit', probability: 0.25, count: 3 },
        ],
        replica_lag_ms: 100,
        read_fault: 'field_missing',
      };
      expect(stored).toEqual(expected);
      expect((await api('GET', '/__faults')).body).toEqual(expected);
      // The GET output is valid PUT input.
      expect(await setFaults(expected)).toEqual(expected);
    });

    it('replaces the whole config on every PUT', async () => {
      await setFaults({ rules: [{ method: 'POST', path: '/v1/charges', fault: 'reject' }], replica_lag_ms: 50 });
      expect(await setFaults({ read_fault: 'unavailable' })).toEqual({
        rules: [],
        replica_lag_ms: 0,
        read_fault: 'unavailable',
      });
    });

    it.each([
      ['a non-object body', []],
      ['an unknown top-level field', { rules: [], replicaLagMs: 5 }],
      ['rules not an array', { rules: {} }],
      ['a rule that is not an object', { rules: ['x'] }],
      ['an unknown fault', { rules: [{ method: 'POST', path: '/v1/charges', fault: 'explode' }] }],
      ['a lower-case method', { rules: [{ method: 'post', path: '/v1/charges', fault: 'reject' }] }],
      ['a relative path', { rules: [{ method: 'POST', path: 'v1/charges', fault: 'reject' }] }],
      ['a path with a query', { rules: [{ method: 'GET', path: '/v1/charges?reference=x', fault: 'reject' }] }],
      ['a control path', { rules: [{ method: 'POST', path: '/__reset', fault: 'reject' }] }],
      ['a probability above 1', { rules: [{ method: 'POST', path: '/x', fault: 'reject', probability: 1.5 }] }],
      ['a negative probability', { rules: [{ method: 'POST', path: '/x', fault: 'reject', probability: -0.1 }] }],
      ['a string probability', { rules: [{ method: 'POST', path: '/x', fault: 'reject', probability: '1' }] }],
      ['a negative count', { rules: [{ method: 'POST', path: '/x', fault: 'reject', count: -1 }] }],
      ['a fractional count', { rules: [{ method: 'POST', path: '/x', fault: 'reject', count: 1.5 }] }],
      ['an unknown rule field', { rules: [{ method: 'POST', path: '/x', fault: 'reject', prob: 1 }] }],
      ['a negative lag', { replica_lag_ms: -1 }],
      ['a string lag', { replica_lag_ms: '10' }],
      ['an unknown read_fault', { read_fault: 'slow' }],
    ])('rejects %s with 400 and keeps the previous config', async (_name, body) => {
      await setFaults({ replica_lag_ms: 7 });
      const result = await api<ErrorBody>('PUT', '/__faults', body);
      expect(result.status).toBe(400);
      expect(result.body.error.code).toBe('invalid_request');
      expect((await api<FaultConfig>('GET', '/__faults')).body.replica_lag_ms).toBe(7);
    });
  });

  describe('write faults', () => {
    const rule = (fault: string, extra: Record<string, unknown> = {}, path = '/v1/charges', method = 'POST') => ({
      rules: [{ method, path, fault, ...extra }],
    });

    it('timeout_after_commit commits, then never answers', async () => {
      await setFaults(rule('timeout_after_commit'));
      await expect(
        fetch(`${base}/v1/charges`, {
          method: 'POST',
          body: JSON.stringify(charge('order-t')),
          signal: AbortSignal.timeout(300),
        }),
      ).rejects.toMatchObject({ name: 'TimeoutError' });
      expect((await effects()).charges['order-t'].count).toBe(1);
    });

    it('timeout_after_commit holds the raw socket open with no bytes written', async () => {
      await setFaults(rule('timeout_after_commit'));
      const outcome = await raw(
        provider.port,
        'POST',
        '/v1/charges',
        charge('order-t'),
        await nextHitOf('timeout_after_commit'),
      );
      expect(outcome).toEqual({ data: '', ending: 'open' });
      expect((await effects()).total).toBe(1);
    });

    it('a retry with the same Idempotency-Key after a timeout recovers the committed charge', async () => {
      await setFaults(rule('timeout_after_commit', { count: 1 }));
      const headers = { 'content-type': 'application/json', 'Idempotency-Key': 'k-timeout' };
      await expect(
        fetch(`${base}/v1/charges`, {
          method: 'POST',
          headers,
          body: JSON.stringify(charge('order-t')),
          signal: AbortSignal.timeout(200),
        }),
      ).rejects.toBeDefined();
      const retry = await api<Charge>('POST', '/v1/charges', charge('order-t'), { 'Idempotency-Key': 'k-timeout' });
      expect(retry.status).toBe(201);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect((await effects()).charges['order-t'].ids).toEqual([retry.body.id]);
    });

    it('reset_after_commit commits, then resets the connection (RST)', async () => {
      await setFaults(rule('reset_after_commit'));
      const outcome = await raw(provider.port, 'POST', '/v1/charges', charge('order-r'));
      expect(outcome).toEqual({ data: '', ending: 'error', code: 'ECONNRESET' });
      expect((await effects()).charges['order-r'].count).toBe(1);
    });

    it('reset_after_commit surfaces as a failed fetch', async () => {
      await setFaults(rule('reset_after_commit'));
      await expect(api('POST', '/v1/charges', charge('order-r'))).rejects.toThrow();
      expect((await effects()).total).toBe(1);
    });

    it.each([
      {
        name: 'error_after_commit commits, then answers 500 internal_error',
        fault: 'error_after_commit',
        reference: 'order-e',
        answer: { status: 500, code: 'internal_error' },
        committed: (report: EffectsReport) => expect(report.charges['order-e'].count).toBe(1),
      },
      {
        name: 'reject answers 422 rejected and commits nothing',
        fault: 'reject',
        reference: 'order-j',
        answer: { status: 422, code: 'rejected' },
        committed: (report: EffectsReport) => expect(report.total).toBe(0),
      },
    ])('$name', async ({ fault, reference, answer, committed }) => {
      await setFaults(rule(fault));
      const result = await api<ErrorBody>('POST', '/v1/charges', charge(reference));
      expect(result.status).toBe(answer.status);
      expect(result.body.error.code).toBe(answer.code);
      committed(await effects());
    });

    it('drop_before_commit closes the connection with no response and commits nothing', async () => {
      await setFaults(rule('drop_before_commit'));
      const outcome = await raw(provider.port, 'POST', '/v1/charges', charge('order-d'));
      // A FIN, not an RST: the request was read in full, so the kernel has nothing unread to reset over.
      expect(outcome).toEqual({ data: '', ending: 'end' });
      await expect(api('POST', '/v1/charges', charge('order-d'))).rejects.toThrow();
      expect((await effects()).total).toBe(0);
    });

    it('reject wins over a decline, and stores no idempotency key', async () => {
      await setFaults(rule('reject', { count: 1 }));
      const headers = { 'Idempotency-Key': 'k-rej' };
      expect((await api('POST', '/v1/charges', charge('order-j'), headers)).status).toBe(422);
      const after = await api('POST', '/v1/charges', charge('order-j'), headers);
      expect(after.status).toBe(201);
      expect(after.headers.get('idempotent-replayed')).toBeNull();
    });

    it('does not spend a fault on a malformed request', async () => {
      await setFaults(rule('reject', { count: 1 }));
      expect((await api('POST', '/v1/charges', { amount: -1 })).status).toBe(400);
      expect((await api<FaultConfig>('GET', '/__faults')).body.rules[0].count).toBe(1);
      expect((await api('POST', '/v1/charges', charge('order-1'))).status).toBe(422);
    });

    it('probability 0 never fires and leaves the count alone', async () => {
      await setFaults(rule('reject', { probability: 0, count: 5 }));
      for (let i = 0; i < 20; i += 1) {
        expect((await api('POST', '/v1/charges', charge(`p0-${i}`))).status).toBe(201);
      }
      expect((await api<FaultConfig>('GET', '/__faults')).body.rules[0].count).toBe(5);
      expect((await effects()).total).toBe(20);
    });

    it('probability 1 always fires', async () => {
      await setFaults(rule('reject', { probability: 1 }));
      for (let i = 0; i < 20; i += 1) {
        expect((await api('POST', '/v1/charges', charge(`p1-${i}`))).status).toBe(422);
      }
      expect((await effects()).total).toBe(0);
    });

    it('a count is exhausted after n firings, and GET /__faults shows what remains', async () => {
      await setFaults(rule('error_after_commit', { count: 2 }));
      expect((await api('POST', '/v1/charges', charge('c-1'))).status).toBe(500);
      expect((await api<FaultConfig>('GET', '/__faults')).body.rules[0].count).toBe(1);
      expect((await api('POST', '/v1/charges', charge('c-2'))).status).toBe(500);
      expect((await api('POST', '/v1/charges', charge('c-3'))).status).toBe(201);
      expect((await api<FaultConfig>('GET', '/__faults')).body.rules[0].count).toBe(0);
      expect((await effects()).total).toBe(3);
    });

    it('count 0 never fires', async () => {
      await setFaults(rule('reject', { count: 0 }));
      expect((await api('POST', '/v1/charges', charge('c-0'))).status).toBe(201);
    });

    it('the first matching rule whose draw succeeds fires; an exhausted rule falls through to the next', async () => {
      await setFaults({
        rules: [
          { method: 'POST', path: '/v1/charges', fault: 'reject', probability: 0 },
          { method: 'POST', path: '/v1/charges', fault: 'error_after_commit', count: 1 },
          { method: 'POST', path: '/v1/charges', fault: 'reject', count: 1 },
        ],
      });
      expect((await api('POST', '/v1/charges', charge('f-1'))).status).toBe(500);
      expect((await api('POST', '/v1/charges', charge('f-2'))).status).toBe(422);
      expect((await api('POST', '/v1/charges', charge('f-3'))).status).toBe(201);
      expect((await api<FaultConfig>('GET', '/__faults')).body.rules.map((r) => r.count)).toEqual([null, 0, 0]);
    });

    it('matches on exact method and exact path, ignoring the query string', async () => {
      await setFaults({
        rules: [
          { method: 'POST', path: '/v1/charges/', fault: 'reject' },
          { method: 'GET', path: '/v1/messages', fault: 'reject' },
          { method: 'PUT', path: '/v1/charges', fault: 'reject' },
          { method: 'GET', path: '/v1/charges', fault: 'reject' },
        ],
      });
      expect((await api('POST', '/v1/charges', charge('m-1'))).status).toBe(201);
      expect((await api('POST', '/v1/messages', { to: '+1', body: 'x' })).status).toBe(202);
      expect((await api('GET', '/v1/charges?reference=m-1')).status).toBe(422);
    });

    it('applies to /v1/messages: timeout_after_commit still commits the message', async () => {
      await setFaults(rule('timeout_after_commit', {}, '/v1/messages'));
      const outcome = await raw(
        provider.port,
        'POST',
        '/v1/messages',
        { to: '+1', body: 'x', client_ref: 's' },
        await nextHitOf('timeout_after_commit'),
      );
      expect(outcome.ending).toBe('open');
      expect((await effects()).messages['s'].count).toBe(1);
      expect((await api('POST', '/v1/charges', charge('unaffected'))).status).toBe(201);
    });

    it('applies to /v1/messages: drop_before_commit and reject commit nothing', async () => {
      await setFaults(rule('drop_before_commit', { count: 1 }, '/v1/messages'));
      await expect(api('POST', '/v1/messages', { to: '+1', body: 'x', client_ref: 's' })).rejects.toThrow();
      await setFaults(rule('reject', { count: 1 }, '/v1/messages'));
      expect((await api('POST', '/v1/messages', { to: '+1', body: 'x', client_ref: 's' })).status).toBe(422);
      expect((await effects()).total).toBe(0);
    });

    it('applies to /v1/messages: reset and error after commit both commit', async () => {
      await setFaults({
        rules: [
          { method: 'POST', path: '/v1/messages', fault: 'reset_after_commit', count: 1 },
          { method: 'POST', path: '/v1/messages', fault: 'error_after_commit', count: 1 },
        ],
      });
      const reset = await raw(provider.port, 'POST', '/v1/messages', { to: '+1', body: 'x', client_ref: 's' });
      expect(reset.ending).toBe('error');
      expect((await api('POST', '/v1/messages', { to: '+1', body: 'x', client_ref: 's' })).status).toBe(500);
      const report = await effects();
      expect(report.messages['s'].count).toBe(2);
      expect(report.duplicates).toEqual([{ kind: 'message', key: 's', count: 2 }]);
    });

    it('applies transport faults to GET paths named by a rule', async () => {
      const created = await api<Charge>('POST', '/v1/charges', charge('g-1'));
      await setFaults({
        rules: [
          { method: 'GET', path: `/v1/charges/${created.body.id}`, fault: 'error_after_commit', count: 1 },
          { method: 'GET', path: '/v1/charges', fault: 'reset_after_commit', count: 1 },
          { method: 'GET', path: '/v1/charges', fault: 'timeout_after_commit', count: 1 },
          { method: 'GET', path: '/health', fault: 'drop_before_commit', count: 1 },
        ],
      });
      expect((await api('GET', `/v1/charges/${created.body.id}`)).status).toBe(500);
      expect((await raw(provider.port, 'GET', '/v1/charges?reference=g-1')).ending).toBe('error');
      const held = await nextHitOf('timeout_after_commit');
      expect((await raw(provider.port, 'GET', '/v1/charges?reference=g-1', undefined, held)).ending).toBe('open');
      expect((await raw(provider.port, 'GET', '/health')).ending).not.toBe('open');
      expect((await api('GET', '/v1/charges?reference=g-1')).status).toBe(200);
      expect((await effects()).total).toBe(1);
    });
  });

  describe('GET /__requests (the wire log)', () => {
    const wire = async () => (await api<WireLog>('GET', '/__requests')).body;
    const sends = async () => (await wire()).requests.filter((r) => r.method === 'POST');

    it('records every request with its key, reference and what became of it, replays and declines included', async () => {
      const first = await api<Charge>('POST', '/v1/charges', charge('w-1'), { 'Idempotency-Key': 'key-1' });
      const replay = await api<Charge>('POST', '/v1/charges', charge('w-1'), { 'Idempotency-Key': 'key-1' });
      await api('POST', '/v1/charges', charge('decline-w'), { 'Idempotency-Key': 'key-2' });
      const message = await api<{ id: string }>('POST', '/v1/messages', { to: '+1', body: 'x', client_ref: 'c-1' });
      await api('POST', '/v1/charges', { amount: -1 });
      await api('GET', '/v1/charges?reference=w-1');

      const log = await wire();
      expect(log).toMatchObject({ total: 6, dropped: 0 });
      const rows = log.requests.map(({ seq: _seq, at: _at, ...rest }) => rest);
      expect(rows).toEqual([
        {
          method: 'POST',
          path: '/v1/charges',
          query: null,
          idempotency_key: 'key-1',
          reference: 'w-1',
          client_ref: null,
          outcome: 'applied',
          fault: null,
          status: 201,
          effect_id: first.body.id,
          returned_ids: null,
        },
        expect.objectContaining({ idempotency_key: 'key-1', outcome: 'replayed', effect_id: first.body.id }),
        expect.objectContaining({ reference: 'decline-w', outcome: 'rejected', status: 402, effect_id: null }),
        expect.objectContaining({
          path: '/v1/messages',
          client_ref: 'c-1',
          idempotency_key: null,
          outcome: 'applied',
          status: 202,
          effect_id: message.body.id,
        }),
        expect.objectContaining({ path: '/v1/charges', outcome: 'invalid', status: 400, reference: null }),
        expect.objectContaining({
          method: 'GET',
          query: 'reference=w-1',
          reference: 'w-1',
          outcome: 'read',
          returned_ids: [first.body.id],
        }),
      ]);
      expect(replay.body.id).toBe(first.body.id);
      // Arrival order and time.
      expect(log.requests.map((r) => r.seq)).toEqual([...log.requests.map((r) => r.seq)].sort((a, b) => a - b));
      for (const r of log.requests) expect(Number.isNaN(Date.parse(r.at))).toBe(false);
      // The control plane (/__faults, /__effects, /__requests) is not the wire.
      expect(log.requests.some((r) => r.path.startsWith('/__'))).toBe(false);
    });

    it('records faults before and after commit: dropped and rejected did nothing, the others applied', async () => {
      for (const fault of ['drop_before_commit', 'reject', 'error_after_commit', 'reset_after_commit']) {
        await setFaults({ rules: [{ method: 'POST', path: '/v1/charges', fault, count: 1 }] });
        await fetch(`${base}/v1/charges`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': `k-${fault}` },
          body: JSON.stringify(charge(`f-${fault}`)),
        }).catch(() => undefined);
      }
      await setFaults({ rules: [{ method: 'POST', path: '/v1/charges', fault: 'timeout_after_commit', count: 1 }] });
      await expect(
        fetch(`${base}/v1/charges`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(charge('f-timeout')),
          signal: AbortSignal.timeout(300),
        }),
      ).rejects.toMatchObject({ name: 'TimeoutError' });

      const byRef = new Map((await sends()).map((r): [string | null, WireRequest] => [r.reference, r]));
      expect(byRef.get('f-drop_before_commit')).toMatchObject({
        outcome: 'dropped',
        fault: 'drop_before_commit',
        status: null,
        effect_id: null,
      });
      expect(byRef.get('f-reject')).toMatchObject({ outcome: 'rejected', fault: 'reject', status: 422 });
      expect(byRef.get('f-error_after_commit')).toMatchObject({
        outcome: 'applied',
        fault: 'error_after_commit',
        status: 500,
      });
      expect(byRef.get('f-reset_after_commit')).toMatchObject({
        outcome: 'applied',
        fault: 'reset_after_commit',
        status: null,
      });
      expect(byRef.get('f-timeout')).toMatchObject({ outcome: 'applied', fault: 'timeout_after_commit', status: null });
      const report = await effects();
      for (const ref of ['f-error_after_commit', 'f-reset_after_commit', 'f-timeout']) {
        expect(byRef.get(ref)!.effect_id).toBe(report.charges[ref].ids[0]);
      }
    });

    it('shows a re-send that the Idempotency-Key absorbed: one effect, two requests', async () => {
      await setFaults({ rules: [{ method: 'POST', path: '/v1/charges', fault: 'error_after_commit', count: 1 }] });
      expect((await api('POST', '/v1/charges', charge('again'), { 'Idempotency-Key': 'same' })).status).toBe(500);
      expect((await api('POST', '/v1/charges', charge('again'), { 'Idempotency-Key': 'same' })).status).toBe(201);
      expect((await effects()).charges.again.count).toBe(1);
      expect((await sends()).map((r) => [r.reference, r.outcome])).toEqual([
        ['again', 'applied'],
        ['again', 'replayed'],
      ]);
    });

    it('records a read the replica could not serve as a read', async () => {
      await setFaults({ read_fault: 'unavailable' });
      await api('GET', '/v1/charges?reference=x');
      expect((await wire()).requests).toEqual([
        expect.objectContaining({ method: 'GET', reference: 'x', outcome: 'read', status: 503, returned_ids: null }),
      ]);
    });

    it('is cleared by POST /__reset, and its seq keeps counting', async () => {
      await api('POST', '/v1/messages', { to: '+1', body: 'x' });
      const before = (await wire()).requests[0].seq;
      await api('POST', '/__reset');
      expect(await wire()).toEqual({ total: 0, dropped: 0, requests: [] });
      await api('POST', '/v1/messages', { to: '+1', body: 'y' });
      expect((await wire()).requests[0].seq).toBeGreaterThan(before);
    });
  });

  describe('POST /__reset', () => {
    it('clears effects, idempotency keys, faults and the version counter', async () => {
      await api('POST', '/v1/charges', charge('r-1'), { 'Idempotency-Key': 'k' });
      await api('POST', '/v1/messages', { to: '+1', body: 'x' });
      await setFaults({ rules: [{ method: 'POST', path: '/v1/messages', fault: 'reject' }], replica_lag_ms: 1000 });

      const reset = await api('POST', '/__reset');
      expect(reset.status).toBe(204);
      expect(reset.body).toBeUndefined();

      expect(await effects()).toEqual({ total: 0, dropped: 0, charges: {}, messages: {}, duplicates: [] });
      expect((await api('GET', '/__faults')).body).toEqual({ rules: [], replica_lag_ms: 0, read_fault: null });
      const again = await api<Charge>('POST', '/v1/charges', charge('r-1'), { 'Idempotency-Key': 'k' });
      expect(again.headers.get('idempotent-replayed')).toBeNull();
      expect(again.body.version).toBe(1);
      expect((await api('POST', '/v1/messages', { to: '+1', body: 'x' })).status).toBe(202);
      expect((await api<ChargeList>('GET', '/v1/charges')).body.as_of_version).toBe(2);
    });
  });
});

describe('sandbox provider lifecycle', () => {
  it('listens on port 4010 unless told otherwise, where the platform looks for it by default', () => {
    expect(DEFAULT_SANDBOX_PORT).toBe(4010);
    expect(loadConfig({}).SANDBOX_URL).toBe(`http://127.0.0.1:${DEFAULT_SANDBOX_PORT}`);
  });

  it('keeps the newest requests within its bound and says how many it dropped', async () => {
    const small = await startSandboxProvider({ port: 0, maxWireRequests: 3 });
    try {
      for (let i = 0; i < 5; i += 1) {
        await fetch(`${small.url}/v1/messages`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ to: '+1', body: 'x', client_ref: `m-${i}` }),
        });
      }
      const log = (await (await fetch(`${small.url}/__requests`)).json()) as WireLog;
      expect(log.total).toBe(5);
      expect(log.dropped).toBe(2);
      expect(log.requests.map((r) => r.client_ref)).toEqual(['m-2', 'm-3', 'm-4']);
    } finally {
      await small.close();
    }
  });

  it('keeps the newest effects within its bound: older ones are forgotten, counted, unreadable and unreplayable', async () => {
    const small = await startSandboxProvider({ port: 0, maxEffects: 3 });
    try {
      const key = (i: number) => ({ 'Idempotency-Key': `k-${i}` });
      const created: Charge[] = [];
      for (let i = 0; i < 4; i += 1) {
        created.push((await call<Charge>(small.url, 'POST', '/v1/charges', charge(`r-${i}`), key(i))).body);
      }
      await call(small.url, 'POST', '/v1/messages', { to: '+1', body: 'x', client_ref: 'm' });
      // Five effects committed, three kept: the two oldest charges are gone.
      const report = (await call<EffectsReport>(small.url, 'GET', '/__effects')).body;
      expect(report).toMatchObject({ total: 5, dropped: 2, duplicates: [] });
      expect(Object.keys(report.charges)).toEqual(['r-2', 'r-3']);
      expect(Object.keys(report.messages)).toEqual(['m']);
      expect((await call(small.url, 'GET', `/v1/charges/${created[0].id}`)).status).toBe(404);
      expect((await call<ChargeList>(small.url, 'GET', '/v1/charges?reference=r-0')).body).toEqual({
        data: [],
        as_of_version: 5,
      });
      expect((await call(small.url, 'GET', `/v1/charges/${created[3].id}`)).body).toEqual(created[3]);
      // A forgotten key no longer replays (a new charge, which forgets the next oldest); a kept one still does.
      const again = await call<Charge>(small.url, 'POST', '/v1/charges', charge('r-0'), key(0));
      expect(again.headers.get('idempotent-replayed')).toBeNull();
      expect(again.body.version).toBe(6);
      const replay = await call<Charge>(small.url, 'POST', '/v1/charges', charge('r-3'), key(3));
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.body).toEqual(created[3]);
      expect((await call<EffectsReport>(small.url, 'GET', '/__effects')).body).toMatchObject({ total: 6, dropped: 3 });
      expect((await call<ChargeList>(small.url, 'GET', '/v1/charges?reference=r-3')).body).toEqual({
        data: [created[3]],
        as_of_version: 6,
      });
      // Behind a lagging replica the kept effects are hidden; forgotten ones are older than any lag, so replicated.
      await call(small.url, 'PUT', '/__faults', { replica_lag_ms: 60_000 });
      expect((await call<ChargeList>(small.url, 'GET', '/v1/charges')).body).toEqual({ data: [], as_of_version: 3 });
      await call(small.url, 'POST', '/v1/messages', { to: '+1', body: 'x' });
      expect((await call<ChargeList>(small.url, 'GET', '/v1/charges')).body).toEqual({ data: [], as_of_version: 4 });
    } finally {
      await small.close();
    }
  });

  it('reports duplicates among the kept effects, and a forgotten charge no longer counts', async () => {
    const small = await startSandboxProvider({ port: 0, maxEffects: 2 });
    try {
      for (let i = 0; i < 2; i += 1) await call(small.url, 'POST', '/v1/charges', charge('twice'));
      expect((await call<EffectsReport>(small.url, 'GET', '/__effects')).body).toMatchObject({
        total: 2,
        dropped: 0,
        charges: { twice: { count: 2 } },
        duplicates: [{ kind: 'charge', key: 'twice', count: 2 }],
      });
      await call(small.url, 'POST', '/v1/charges', charge('other'));
      expect((await call<EffectsReport>(small.url, 'GET', '/__effects')).body).toMatchObject({
        total: 3,
        dropped: 1,
        charges: { twice: { count: 1 }, other: { count: 1 } },
        duplicates: [],
      });
    } finally {
      await small.close();
    }
  });

  it('answers /__effects and /__requests larger than one write chunk as one valid JSON document', async () => {
    const big = await startSandboxProvider({ port: 0 });
    try {
      const reference = (i: number) => `order-${String(i).padStart(6, '0')}-${'x'.repeat(60)}`;
      const n = 3_000;
      for (let i = 0; i < n; i += 100) {
        await Promise.all(
          Array.from({ length: 100 }, (_, j) =>
            call(big.url, 'POST', '/v1/charges', charge(reference(i + j), i + j + 1)),
          ),
        );
      }
      const effects = await fetch(`${big.url}/__effects`);
      const text = await effects.text();
      expect(Buffer.byteLength(text)).toBe(Number(effects.headers.get('content-length')));
      expect(Buffer.byteLength(text)).toBeGreaterThan(3 * 64 * 1024);
      const report = JSON.parse(text) as EffectsReport;
      expect(report).toMatchObject({ total: n, dropped: 0, duplicates: [] });
      expect(Object.keys(report.charges)).toHaveLength(n);
      expect(report.charges[reference(1234)]).toEqual({ count: 1, ids: [expect.any(String)], amounts: [1235] });
      const log = (await (await fetch(`${big.url}/__requests`)).json()) as WireLog;
      expect(log).toMatchObject({ total: n, dropped: 0 });
      expect(log.requests).toHaveLength(n);
      expect(new Set(log.requests.map((r) => r.reference)).size).toBe(n);
      expect(log.requests[0].at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    } finally {
      await big.close();
    }
  });

  it('uses the injected random source for probability draws', async () => {
    const provider = await startSandboxProvider({ port: 0, random: () => 0.5 });
    try {
      const put = (probability: number) =>
        call(provider.url, 'PUT', '/__faults', {
          rules: [{ method: 'POST', path: '/v1/charges', fault: 'reject', probability }],
        });
      await put(0.4);
      expect((await call(provider.url, 'POST', '/v1/charges', charge('a'))).status).toBe(201);
      await put(0.6);
      expect((await call(provider.url, 'POST', '/v1/charges', charge('b'))).status).toBe(422);
    } finally {
      await provider.close();
    }
  });

  it('close() does not wait for a held socket: it destroys it', async () => {
    const provider = await startSandboxProvider({ port: 0 });
    await call(provider.url, 'PUT', '/__faults', {
      rules: [{ method: 'POST', path: '/v1/charges', fault: 'timeout_after_commit' }],
    });
    const held = raw(provider.port, 'POST', '/v1/charges', charge('held'), 10_000);
    // Held: its charge is committed (a loaded machine can take longer than a fixed number of polls to get there, and a
    // close before the request arrived proved nothing about a held socket).
    await waitFor(
      async () => (await call<EffectsReport>(provider.url, 'GET', '/__effects')).body.total,
      (total) => total === 1,
      20_000,
      10,
    );
    await provider.close();
    // Ended by the server: a close that waited for the held socket would have waited for the client to give up (after
    // 10 s, seen here as 'open').
    const outcome = await held;
    expect(outcome.ending).not.toBe('open');
    expect(outcome.data).toBe('');
    // Calling close twice is harmless.
    await provider.close();
    await expect(fetch(`${provider.url}/health`)).rejects.toThrow();
  });

  it('rejects when the port is taken', async () => {
    const first = await startSandboxProvider({ port: 0 });
    try {
      await expect(startSandboxProvider({ port: first.port })).rejects.toMatchObject({ code: 'EADDRINUSE' });
    } finally {
      await first.close();
    }
  });

  it('logs one JSON line per request only when asked', async () => {
    const writes: string[] = [];
    const spy = jest.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
      writes.push(String(chunk));
      return true;
    });
    try {
      const quiet = await startSandboxProvider({ port: 0 });
      await call(quiet.url, 'GET', '/health');
      await quiet.close();
      expect(writes).toEqual([]);

      const loud = await startSandboxProvider({ port: 0, log: true });
      await call(loud.url, 'POST', '/v1/charges', charge('logged'));
      await loud.close();
      expect(writes).toHaveLength(1);
      expect(JSON.parse(writes[0])).toMatchObject({
        level: 'info',
        msg: 'request',
        method: 'POST',
        path: '/v1/charges',
        status: 201,
      });
    } finally {
      spy.mockRestore();
    }
  });
});
