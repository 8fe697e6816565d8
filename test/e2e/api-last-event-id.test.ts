import { connect } from 'node:net';
import { DEMO, Stack } from '../support/stack';
import { charge, http, rawExchange, sms, submission, unique } from '../support/http';

interface EventList {
  data: { id: string; seq: number }[];
}

/**
 * `Last-Event-ID` as a hostile or broken client sends it, on a raw socket (Node's HTTP client refuses to send bytes
 * past ASCII in a header): every value that names no event of the execution — bytes past ASCII (read as Latin-1), a
 * value of kilobytes, a negative, fractional, exponent, hex or signed number, two ids, a seq past the last event — is a
 * 400 problem+json (`known_event`, naming `Last-Event-ID`), never a 500 and never a stream from the first event; one
 * past the limit on headers is the 431 of any such request. An empty value (or only spaces) is no position at all, as
 * an EventSource whose last id is empty sends none (docs/api.md): the stream starts from the first event. (Each case
 * held before this file was written: it pins the contract.)
 */
describe('Last-Event-ID: what a stream does with every bad value', () => {
  let stack: Stack;
  let executionId = '';
  let events: EventList['data'] = [];

  beforeAll(async () => {
    // No workers: the execution's log stays as its submission and cancel wrote it, and the stream ends at once.
    stack = await Stack.start({ label: 'lasteventid', dispatchers: 0, reconcilers: 0 });
    const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('leid')), sms(unique('leid'))]),
    });
    expect(created.status).toBe(201);
    executionId = created.body.id;
    expect((await http(stack.apiUrl, 'POST', `/v1/executions/${executionId}/cancel`, { key: DEMO.agent })).status).toBe(
      200,
    );
    const log = await http<EventList>(stack.apiUrl, 'GET', `/v1/executions/${executionId}/events`, {
      key: DEMO.agent,
    });
    events = log.body.data;
    expect(events.length).toBeGreaterThanOrEqual(2);
  }, 60_000);
  afterAll(async () => stack?.stop());

  /** A GET of the stream with `value` (its bytes as they are) as the Last-Event-ID header, on a raw socket. */
  const streamWith = (value: Buffer, method = 'GET') =>
    rawExchange(
      stack.apiUrl,
      Buffer.concat([
        Buffer.from(
          `${method} /v1/executions/${executionId}/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n` +
            `Authorization: Bearer ${DEMO.agent}\r\nConnection: close\r\nLast-Event-ID: `,
        ),
        value,
        Buffer.from('\r\n\r\n'),
      ]),
      // Not half-closed: the stream takes a client that closed its side as gone, and answers nobody.
      { halfClose: false },
    );

  /** The field errors of a problem+json answer (its body is chunked or not: the JSON is found in it). */
  const problemOf = (body: string) =>
    JSON.parse(body.slice(body.indexOf('{'), body.lastIndexOf('}') + 1)) as {
      status: number;
      errors: { field: string; rule: string; message: string }[];
    };

  it.each([
    ['Latin-1 bytes', Buffer.from([0x65, 0x76, 0x74, 0x5f, 0xe9, 0xff])],
    ['an event id with a Latin-1 byte after it', null],
    ['UTF-8 bytes', Buffer.from('évt_😀', 'utf8')],
    ['a non-breaking space after an id', null],
    ['8 KiB of digits', Buffer.from('9'.repeat(8192))],
    ['8 KiB of an id', Buffer.from(`evt_${'a'.repeat(8188)}`)],
    ['a negative seq', Buffer.from('-1')],
    ['minus zero', Buffer.from('-0')],
    ['a fractional seq', Buffer.from('1.5')],
    ['an exponent', Buffer.from('1e400')],
    ['a hex seq', Buffer.from('0x1')],
    ['a signed seq', Buffer.from('+1')],
    ['Infinity', Buffer.from('Infinity')],
    ['a seq of 16 digits', Buffer.from('1000000000000000')],
    ['a seq past the last event', Buffer.from('999999999999999')],
    ['two ids', null],
    ['an id and a space inside', Buffer.from('evt_ abc')],
    ['an id of another execution’s form', Buffer.from('evt_0000000000000000000000000')],
  ])('%s: 400 problem+json known_event naming Last-Event-ID, no stream', async (what, bytes) => {
    const value =
      bytes ??
      {
        'an event id with a Latin-1 byte after it': Buffer.concat([Buffer.from(events[0].id), Buffer.from([0xe9])]),
        'a non-breaking space after an id': Buffer.concat([Buffer.from(events[0].id), Buffer.from([0xa0])]),
        'two ids': Buffer.from(`${events[0].id}, ${events[1].id}`),
      }[what]!;
    const answer = await streamWith(value);
    expect({ what, status: answer.status, type: answer.headers['content-type'] }).toEqual({
      what,
      status: 400,
      type: 'application/problem+json; charset=utf-8',
    });
    const problem = problemOf(answer.body);
    expect(problem.errors).toEqual([
      { field: 'Last-Event-ID', rule: 'known_event', message: expect.any(String) as string },
    ]);
    // The value is quoted cut short, never whole.
    expect(problem.errors[0].message.length).toBeLessThan(300);
    expect(answer.body).not.toContain('event:');
  });

  it('the same header sent twice is two ids: 400, not the first of them', async () => {
    const answer = await rawExchange(
      stack.apiUrl,
      `GET /v1/executions/${executionId}/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${DEMO.agent}\r\n` +
        `Connection: close\r\nLast-Event-ID: ${events[0].id}\r\nLast-Event-ID: ${events[0].id}\r\n\r\n`,
      { halfClose: false },
    );
    expect(answer.status).toBe(400);
    expect(problemOf(answer.body).errors[0]).toMatchObject({ field: 'Last-Event-ID', rule: 'known_event' });
  });

  it('a HEAD with a bad value is refused as the GET is', async () => {
    const answer = await streamWith(Buffer.from('-1'), 'HEAD');
    expect([answer.status, answer.headers['content-type']]).toEqual([400, 'application/problem+json; charset=utf-8']);
  });

  it('a value past the limit on headers (16 KiB) is the 431 problem of any such request', async () => {
    const answer = await streamWith(Buffer.from(`evt_${'a'.repeat(17_000)}`));
    expect([answer.status, answer.headers['content-type']]).toEqual([431, 'application/problem+json; charset=utf-8']);
  });

  /** The stream's answer to `value` up to its `end` event (the connection stays open: nothing else ends it). */
  const streamUntilEnd = (value: string) =>
    new Promise<string>((resolve, reject) => {
      const socket = connect(Number(new URL(stack.apiUrl).port), '127.0.0.1');
      let text = '';
      socket.on('data', (chunk: Buffer) => {
        text += chunk.toString('latin1');
        if (/^event: end$/m.test(text) || /^HTTP\/1\.1 [^2]/.test(text)) {
          socket.destroy();
          resolve(text);
        }
      });
      socket.on('error', reject);
      socket.on('close', () => resolve(text));
      socket.write(
        `GET /v1/executions/${executionId}/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n` +
          `Authorization: Bearer ${DEMO.agent}\r\nLast-Event-ID: ${value}\r\n\r\n`,
      );
    });
  const idsIn = (text: string) => [...text.matchAll(/^id: (\S+)$/gm)].map((m) => m[1]);

  it('an empty value, or only spaces, is no position: the stream starts from the first event', async () => {
    for (const value of ['', '   ']) {
      const text = await streamUntilEnd(value);
      expect({ value, status: text.slice(0, 12) }).toEqual({ value, status: 'HTTP/1.1 200' });
      expect(idsIn(text)).toEqual(events.map((e) => e.id));
    }
  });

  it('a valid id or seq resumes after it, with bytes around it that HTTP drops (spaces, tabs)', async () => {
    for (const value of [`\t${events[0].id} `, String(events[0].seq), `0${events[0].seq}`]) {
      const text = await streamUntilEnd(value);
      expect({ value, status: text.slice(0, 12) }).toEqual({ value, status: 'HTTP/1.1 200' });
      expect(idsIn(text)).toEqual(events.slice(1).map((e) => e.id));
    }
  });
});
