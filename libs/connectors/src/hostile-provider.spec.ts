import { createServer, type IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { OperationStatus, TerminalReason, VerificationMethod, decideReconcileStart } from '@verity/status-model';
import { smsToSend } from '../../../test/support/connector-operations';
import { serveDuringDescribe } from '../../../test/support/local-server';
import { httpExchange } from './http-exchange';
import { HttpConnector } from './http.connector';
import type { ConnectorEnvironment, ConnectorOperation } from './connector';
import { SandboxPaymentsConnector } from './sandbox-payments.connector';
import { SandboxSmsConnector } from './sandbox-sms.connector';

/**
 * Providers that misbehave at the HTTP level, each a real loopback server writing its answer byte by byte on the
 * socket. The record must stay honest: a timeout or an unreadable answer is UNKNOWN (never FAILED), nothing re-sends an
 * UNKNOWN blindly, VERIFIED only from a read-back — and no exchange holds its caller or a socket past what it answered.
 */

/** One raw answer: what the provider writes on the request's socket once the request has arrived. */
type RawAnswer = (socket: Socket, req: IncomingMessage) => void;

/**
 * A provider of the enclosing describe answering each request as `answer` (set by the test) writes it on the socket.
 * `requests` counts what arrived; `closed` settles when the n-th request's connection is closed (by either end).
 */
function rawProvider() {
  const state = {
    answer: (() => undefined) as RawAnswer,
    requests: 0,
    closed: [] as Promise<void>[],
    /** The connection each request arrived on, in order. */
    sockets: [] as Socket[],
  };
  // One wait per connection, however many requests a kept-alive one carries (a listener per request piled up on it).
  const closing = new WeakMap<Socket, Promise<void>>();
  const closedOf = (socket: Socket) => {
    if (socket.destroyed) return Promise.resolve();
    let closed = closing.get(socket);
    if (!closed) {
      closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
      closing.set(socket, closed);
    }
    return closed;
  };
  const local = serveDuringDescribe(() =>
    createServer((req) => {
      req.resume();
      req.on('end', () => {
        state.requests += 1;
        const socket = req.socket;
        state.sockets.push(socket);
        state.closed.push(closedOf(socket));
        state.answer(socket, req);
      });
    }),
  );
  return Object.assign(state, { local });
}

const HEAD_201 = 'HTTP/1.1 201 Created\r\ncontent-type: application/json\r\n';
/** The head of a 201 after which the provider closes the connection (it says so: the client keeps no socket of it). */
const CLOSING_201 = `${HEAD_201}connection: close\r\n`;

/** A 2xx whose body stops after its first bytes: reset, left hanging, or closed where no length was declared. */
const brokenOff = {
  reset: ((socket) => {
    socket.write(`${HEAD_201}content-length: 200\r\n\r\n{"id":"ch_`);
    setImmediate(() => socket.resetAndDestroy());
  }) as RawAnswer,
  stalled: ((socket) => socket.write(`${HEAD_201}content-length: 200\r\n\r\n{"id":"ch_`)) as RawAnswer,
  // No content-length and no chunking: the body ends where the connection does, so its first bytes are the whole body.
  closeDelimited: ((socket) => socket.end(`${CLOSING_201}\r\n{"id":"ch_`)) as RawAnswer,
};

const charge = (id: string): ConnectorOperation => ({
  id,
  tenantId: 'demo',
  action: 'charge',
  params: { amount: 100, currency: 'EUR', reference: `order-${id}` },
  expectedState: null,
  providerRef: null,
});

describe('a provider that answers 2xx, then breaks off the body', () => {
  const provider = rawProvider();
  const env = (timeoutMs = 2_000): ConnectorEnvironment => ({ sandboxUrl: provider.local.url, timeoutMs });
  const payments = new SandboxPaymentsConnector();
  const sms = new SandboxSmsConnector();

  it.each([
    ['reset in the middle of a declared length', brokenOff.reset],
    ['stalled in the middle of a declared length (the timeout)', brokenOff.stalled],
  ])('%s: a charge and a text message are UNKNOWN, never FAILED, the connection closed', async (_, answer) => {
    provider.answer = answer;
    const before = provider.requests;
    for (const outcome of [
      await payments.send(charge('op_cut'), env(300)),
      await sms.send(smsToSend('op_cut'), env(300)),
    ]) {
      expect(outcome).toMatchObject({ status: OperationStatus.UNKNOWN, reason: TerminalReason.CONNECTOR_ERROR });
    }
    expect(provider.requests - before).toBe(2);
    await Promise.all(provider.closed.slice(before));
  });

  it('a text message left UNKNOWN is held for a person (no read-back), never read or re-sent', () => {
    // What the status model makes of the UNKNOWN above for a connector that cannot read back.
    expect(sms.capabilities.read_back).toBe(false);
    expect(
      decideReconcileStart({
        canReadBack: sms.capabilities.read_back,
        verificationMethod: VerificationMethod.READ_AFTER_WRITE,
        deadlinePassed: false,
      }),
    ).toEqual({ kind: 'hold', reason: TerminalReason.CONNECTOR_ERROR, why: 'no read-back' });
  });

  it('closed where no length was declared: the 2xx is an acknowledgement with no reference (the body read is no JSON)', async () => {
    provider.answer = brokenOff.closeDelimited;
    for (const outcome of [
      await payments.send(charge('op_close'), env()),
      await sms.send(smsToSend('op_close'), env()),
    ]) {
      expect(outcome).toMatchObject({ status: OperationStatus.ACKNOWLEDGED, providerRef: {} });
      expect(outcome.status === OperationStatus.ACKNOWLEDGED && outcome.providerRef.id).toBeUndefined();
    }
  });

  it.each([
    ['cut by the close', (socket: Socket) => socket.end(`${CLOSING_201}idempotent-replayed: true\r\n\r\n{"id":"ch_`)],
    ['empty', (socket: Socket) => socket.end(`${CLOSING_201}idempotent-replayed: true\r\ncontent-length: 0\r\n\r\n`)],
    [
      'JSON naming no amount or currency',
      (socket: Socket) =>
        socket.end(`${CLOSING_201}idempotent-replayed: true\r\ncontent-length: 13\r\n\r\n{"id":"ch_1"}`),
    ],
    ...[
      '{"id":"ch_1","amount":null,"currency":null}',
      '{"id":"ch_1","amount":"100","currency":"EUR"}',
      '{"id":"ch_1","amount":100,"currency":["EUR"]}',
      '{"id":"ch_1","amount":1e400,"currency":"EUR"}',
      '{"id":"ch_1","amount":100,"currency":""}',
      '{"id":"ch_1","amount":100,"currency":"eur"}',
      '{"id":"ch_1","amount":100,"currency":"EUR "}',
    ].map((body): [string, RawAnswer] => [
      `JSON whose amount or currency is no amount or currency (${body})`,
      (socket) =>
        socket.end(`${CLOSING_201}idempotent-replayed: true\r\ncontent-length: ${body.length}\r\n\r\n${body}`),
    ]),
  ])(
    'a replay whose answer is %s is an unknown outcome, not "no charge was made" (it may be this one)',
    async (_, answer) => {
      provider.answer = answer;
      const outcome = await payments.send(charge('op_replay_cut'), env());
      expect(outcome).toMatchObject({ status: OperationStatus.UNKNOWN, reason: TerminalReason.CONNECTOR_ERROR });
      expect(outcome.detail).toMatch(/replaying an earlier request's charge/);
    },
  );
});

describe('a provider that answers 1xx, or switches protocols', () => {
  const provider = rawProvider();
  const payments = new SandboxPaymentsConnector();

  it('101 with an Upgrade: UNKNOWN as soon as it comes, where it waited for the timeout, the connection closed', async () => {
    provider.answer = (socket) =>
      socket.write('HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n');
    const before = provider.requests;
    // The timeout is far beyond the test's own: only an exchange that ends at the 101 answers within it.
    const outcome = await payments.send(charge('op_101'), { sandboxUrl: provider.local.url, timeoutMs: 60_000 });
    expect(outcome).toMatchObject({ status: OperationStatus.UNKNOWN, reason: TerminalReason.CONNECTOR_ERROR });
    expect(outcome.detail).toMatch(/101/);
    await provider.closed[before];
  }, 10_000);

  it('101 without an Upgrade: UNKNOWN, and its connection is not kept for the next request', async () => {
    provider.answer = (socket) => socket.write('HTTP/1.1 101 Switching Protocols\r\n\r\n');
    const before = provider.requests;
    const outcome = await payments.send(charge('op_101_bare'), { sandboxUrl: provider.local.url, timeoutMs: 60_000 });
    expect(outcome).toMatchObject({ status: OperationStatus.UNKNOWN, reason: TerminalReason.CONNECTOR_ERROR });
    // Kept alive, the socket would carry the next operation's request into whatever protocol the provider switched to.
    provider.answer = (socket) => socket.write(`${HEAD_201}content-length: 2\r\n\r\n{}`);
    await payments.send(charge('op_after_101'), { sandboxUrl: provider.local.url, timeoutMs: 2_000 });
    expect(provider.requests - before).toBe(2);
    expect(provider.sockets[before + 1] === provider.sockets[before]).toBe(false);
    await provider.closed[before];
  }, 10_000);

  it.each([
    ['100 Continue', 'HTTP/1.1 100 Continue\r\n\r\n'],
    ['103 Early Hints', 'HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n'],
  ])('%s, then nothing: UNKNOWN at the timeout, the connection closed', async (_, head) => {
    provider.answer = (socket) => socket.write(head);
    const before = provider.requests;
    const exchange = await httpExchange({
      method: 'POST',
      url: `${provider.local.url}/v1/charges`,
      body: {},
      timeoutMs: 300,
    });
    expect(exchange).toMatchObject({ kind: 'ambiguous', code: 'ETIMEDOUT' });
    const outcome = await payments.send(charge('op_1xx'), { sandboxUrl: provider.local.url, timeoutMs: 300 });
    expect(outcome).toMatchObject({ status: OperationStatus.UNKNOWN, reason: TerminalReason.CONNECTOR_ERROR });
    await Promise.all(provider.closed.slice(before));
  });
});

describe('a provider whose reference is a number in JSON', () => {
  let answer = '';
  const requested: string[] = [];
  const provider = serveDuringDescribe(() =>
    createServer((req, res) => {
      requested.push(`${req.method} ${req.url}`);
      req.resume();
      req.on('end', () => {
        if (req.method === 'POST') return res.writeHead(201, { 'content-type': 'application/json' }).end(answer);
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"created"}');
      });
    }),
  );
  const http = new HttpConnector();
  const env = (): ConnectorEnvironment => ({
    sandboxUrl: 'unused',
    timeoutMs: 2_000,
    tenant: { allowHosts: [{ host: '127.0.0.1', ports: [provider.port], allow_private: true }] },
  });
  const request = (): ConnectorOperation => ({
    id: 'op_numeric_ref',
    tenantId: 'demo',
    action: 'request',
    params: {
      method: 'POST',
      url: `${provider.url}/orders`,
      body: {},
      ref_field: 'id',
      read_back: { url: `${provider.url}/orders/{{ref}}`, field: 'status', equals: 'created' },
    },
    expectedState: null,
    providerRef: null,
  });

  /** Sends the request to a provider answering `body` (201): it is ACKNOWLEDGED, and says the reference it keeps. */
  async function sentAnswered(body: string) {
    answer = body;
    const outcome = await http.send(request(), env());
    expect(outcome.status).toBe(OperationStatus.ACKNOWLEDGED);
    return outcome.status === OperationStatus.ACKNOWLEDGED ? outcome.providerRef : {};
  }

  // String() of the number JSON.parse made is another text than the provider wrote: a read-back by it asks another
  // record (1e3 read as /orders/1000; 2^64 and more rounded to another id altogether).
  it.each([
    ['past 2^53', '{"id":12345678901234567890}'],
    ['with an exponent', '{"id":1e3}'],
    ['with a fraction of zero', '{"id":7.0}'],
    ['negative zero', '{"id":-0}'],
  ])('keeps no reference from an id %s, and makes no read-back by it', async (_, body) => {
    const providerRef = await sentAnswered(body);
    expect(providerRef.ref).toBeUndefined();
    const before = requested.length;
    const read = await http.readBack({ ...request(), providerRef }, env());
    expect(read).toMatchObject({ kind: 'unreachable', notMade: true });
    expect(requested.length).toBe(before);
  });

  it('keeps an id written as String() writes it, and reads back by it', async () => {
    answer = '{"id":1000}';
    const outcome = await http.send(request(), env());
    expect(outcome).toMatchObject({ status: OperationStatus.ACKNOWLEDGED, providerRef: { ref: '1000' } });
    const providerRef = outcome.status === OperationStatus.ACKNOWLEDGED ? outcome.providerRef : {};
    await expect(http.readBack({ ...request(), providerRef }, env())).resolves.toMatchObject({ kind: 'found' });
    expect(requested[requested.length - 1]).toBe('GET /orders/1000');
  });

  // Node 20 gives a reviver no source text (JSON.parse's third argument came with V8 11.4): a number's text is read from
  // the answer itself, so the same ids are kept and refused there as on Node 24.
  describe('on a runtime whose JSON.parse gives a reviver no source text', () => {
    const parse = JSON.parse;
    beforeEach(() => {
      jest
        .spyOn(JSON, 'parse')
        .mockImplementation((text: string, reviver?: (this: unknown, key: string, value: unknown) => unknown) =>
          parse(text, reviver && ((key, value) => reviver.call(undefined, key, value))),
        );
    });
    afterEach(() => jest.restoreAllMocks());

    it.each([
      ['{"id":1000}', '1000'],
      ['{"id":-12.5}', '-12.5'],
      ['{"data":[{"id":7}]}', undefined],
      ['{"id":1e3}', undefined],
      ['{"id":7.0}', undefined],
      ['{"id":-0}', undefined],
      // JSON.parse keeps the last of two names, the text's scan meets the first: no reference from either.
      ['{"id":1,"id":2}', undefined],
      ['{"id":1,"\\u0069d":2}', undefined],
      ['{"\\u0069d":1,"id":2}', undefined],
      ['{ "\\u0069d" : 5 }', '5'],
      ['{"note":"\\"id\\":9","data":{"id":8},"list":[{"id":7}],"id":3}', '3'],
    ])('%s: the reference kept is %s', async (body, ref) => {
      expect((await sentAnswered(body)).ref).toBe(ref ?? undefined);
    });
  });
});

describe("a provider whose replay mark (Idempotent-Replayed) can't be read one way", () => {
  const provider = rawProvider();
  const payments = new SandboxPaymentsConnector();
  const env = (): ConnectorEnvironment => ({ sandboxUrl: provider.local.url, timeoutMs: 2_000 });
  const answering = (marks: string[], amount: number | string) => {
    const body = `{"id":"ch_9","reference":"order-op_mark","amount":${amount},"currency":"EUR","version":1}`;
    provider.answer = (socket) =>
      socket.write(
        `${HEAD_201}${marks.map((mark) => `${mark}\r\n`).join('')}content-length: ${body.length}\r\n\r\n${body}`,
      );
  };

  // Node joins a header given twice with ", " and keeps its value's case: none of these is the one "true" the provider
  // marks a replay with, nor its absence. Whose charge the answer holds — this request's, or an earlier one's (no charge
  // made for this one) — is not said one way: neither FAILED ("no charge was made") nor an acknowledgement.
  it.each([
    ['given twice', ['Idempotent-Replayed: true', 'idempotent-replayed: true']],
    ['given twice, differently', ['Idempotent-Replayed: true', 'Idempotent-Replayed: false']],
    ['in capitals', ['Idempotent-Replayed: TRUE']],
  ])('%s, with another amount: UNKNOWN, for the read-back to settle', async (_, marks) => {
    answering(marks, 5000);
    await expect(payments.send(charge('op_mark'), env())).resolves.toMatchObject({
      status: OperationStatus.UNKNOWN,
      reason: TerminalReason.CONNECTOR_ERROR,
      detail: expect.stringMatching(/replay mark/),
    });
  });

  it('given once as "true", it is read as the replay it says (another amount: no charge was made for this one)', async () => {
    answering(['Idempotent-Replayed: true'], 5000);
    await expect(payments.send(charge('op_mark'), env())).resolves.toMatchObject({ status: OperationStatus.FAILED });
  });

  // JSON writes one number many ways: the amount asked for, however written, is this request's amount (a replay of its
  // charge, acknowledged); a number that is not it is another charge.
  it.each(['100', '1e2', '1.00E+2', '100.0', '10000e-2'])(
    'given once as "true", with the amount asked for written %s: the replay of this charge, acknowledged',
    async (amount) => {
      answering(['Idempotent-Replayed: true'], amount);
      await expect(payments.send(charge('op_mark'), env())).resolves.toMatchObject({
        status: OperationStatus.ACKNOWLEDGED,
        providerRef: { id: 'ch_9', replayed: true },
      });
    },
  );

  it.each(['100.5', '1e3', '-100'])(
    'given once as "true", with another amount written %s: another charge, no charge was made for this one',
    async (amount) => {
      answering(['Idempotent-Replayed: true'], amount);
      await expect(payments.send(charge('op_mark'), env())).resolves.toMatchObject({
        status: OperationStatus.FAILED,
        reason: TerminalReason.CONNECTOR_REJECTED,
      });
    },
  );

  it('given once as "false", or not at all, it is no replay: acknowledged', async () => {
    for (const marks of [['Idempotent-Replayed: false'], []]) {
      answering(marks, 100);
      await expect(payments.send(charge('op_mark'), env())).resolves.toMatchObject({
        status: OperationStatus.ACKNOWLEDGED,
        providerRef: { id: 'ch_9' },
      });
    }
  });
});

describe('a provider that redirects a send', () => {
  const provider = rawProvider();
  const elsewhere = rawProvider();
  const payments = new SandboxPaymentsConnector();
  const sms = new SandboxSmsConnector();

  it.each([301, 302, 303, 307, 308])(
    '%i with a Location at another origin: UNKNOWN, and the send is not made again there',
    async (status) => {
      provider.answer = (socket) =>
        socket.write(
          `HTTP/1.1 ${status} Moved\r\nlocation: ${elsewhere.local.url}/v1/charges\r\ncontent-length: 0\r\n\r\n`,
        );
      const env: ConnectorEnvironment = { sandboxUrl: provider.local.url, timeoutMs: 2_000 };
      for (const outcome of [
        await payments.send(charge('op_moved'), env),
        await sms.send(smsToSend('op_moved'), env),
      ]) {
        expect(outcome).toMatchObject({
          status: OperationStatus.UNKNOWN,
          detail: `provider answered ${status}: outcome unknown`,
        });
      }
      expect(elsewhere.requests).toBe(0);
    },
  );
});

describe('a provider whose name resolves slowly', () => {
  // A lookup that never answers: the request is never written, so the send ends at its timeout as not delivered (the
  // HTTP client's deadline covers the lookup), not held for as long as the resolver takes.
  const never = new HttpConnector({ resolver: () => new Promise(() => undefined) });

  it('a send through the http connector ends at its timeout, never delivered', async () => {
    const outcome = await never.send(
      {
        id: 'op_slow_dns',
        tenantId: 'demo',
        action: 'request',
        params: { method: 'POST', url: 'https://slow.example/orders', body: {} },
        expectedState: null,
        providerRef: null,
      },
      { sandboxUrl: 'unused', timeoutMs: 300, tenant: { allowHosts: [{ host: 'slow.example' }] } },
    );
    expect(outcome).toMatchObject({
      status: OperationStatus.FAILED,
      reason: TerminalReason.SOURCE_UNREACHABLE,
      detail: 'never delivered (ETIMEDOUT)',
    });
  });
});
