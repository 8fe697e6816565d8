import { createServer } from 'node:http';
import { listenLocally, type LocalServer } from '../support/local-server';
import { Stack, waitFor } from '../support/stack';
import { Call, Op, allowLoopbackPort, httpOp, recordingClient, submitOps } from './connectors-support';

/**
 * A read-back answer whose JSON means one thing to JSON.parse and another to its author: a member named twice
 * (`{"status":"declined","status":"ok"}`: JSON.parse keeps the last, many parsers the first) or a number a double
 * cannot hold (`9007199254740993` parses to ...992). The read compared the parsed value and recorded VERIFIED, with
 * evidence of a value the target never sent: `equals: 9007199254740992` was verified by a target holding ...993.
 * Intake refuses both spellings in a request; an answer holding one is now no reading (inconclusive), and the
 * operation ends held for a person, as for an answer that is not JSON.
 */
describe('a target answering JSON that reads two ways', () => {
  let stack: Stack;
  let target: LocalServer;
  let base: string;
  let call: Call;
  beforeAll(async () => {
    target = await listenLocally(
      createServer((req, res) => {
        req.resume();
        req.on('end', () => {
          res.writeHead(req.method === 'POST' ? 201 : 200, { 'content-type': 'application/json' });
          if (req.method === 'POST') return res.end('{"id":"r1"}');
          if (req.url === '/twice') return res.end('{"status":"declined","status":"ok"}');
          if (req.url === '/rounded') return res.end('{"n":9007199254740993}');
          if (req.url === '/elsewhere') return res.end('{"status":"ok","seq":12345678901234567891,"x":1,"x":2}');
          res.end('{"status":"ok","n":9007199254740992}');
        });
      }),
    );
    base = target.url;
    stack = await Stack.start({ label: 'ambiguousanswer' });
    ({ call } = recordingClient(stack));
    await allowLoopbackPort(call, target.port);
  });
  afterAll(async () => {
    await stack?.stop();
    await target?.close();
  });

  const settle = async (path: string, field: string, equals: unknown) => {
    const execution = await submitOps(call, [
      httpOp('read', {
        method: 'POST',
        url: `${base}/orders`,
        body: { a: 1 },
        read_back: { url: `${base}${path}`, field, equals },
      }),
    ]);
    return waitFor(
      async () => (await call<Op>('GET', `/v1/operations/${execution.operations[0].id}`)).body,
      (o) => ['VERIFIED', 'MANUAL_REVIEW', 'FAILED'].includes(o.status),
      30_000,
      100,
    );
  };

  it.each([
    ['a member named twice', '/twice', 'status', 'ok', /status.*twice/],
    ['a number a double cannot hold', '/rounded', 'n', 9007199254740992, /number.*exactly/],
  ])('%s is no reading: held for a person, never VERIFIED', async (_, path, field, equals, reason) => {
    const op = await settle(path, field, equals);
    expect(op).toMatchObject({ status: 'MANUAL_REVIEW', terminal_reason: 'SOURCE_UNREACHABLE' });
    expect(JSON.stringify(op.evidence)).toMatch(reason);
  });

  it('the same fields answered once and exactly are VERIFIED', async () => {
    expect((await settle('/plain', 'status', 'ok')).status).toBe('VERIFIED');
    expect((await settle('/plain', 'n', 9007199254740992)).status).toBe('VERIFIED');
  });

  // Only the field's own path counts: a 64-bit id or a member named twice elsewhere in the answer is never read.
  it('a field read once and exactly is VERIFIED beside a number or a member that read two ways elsewhere', async () => {
    expect((await settle('/elsewhere', 'status', 'ok')).status).toBe('VERIFIED');
  });
});
