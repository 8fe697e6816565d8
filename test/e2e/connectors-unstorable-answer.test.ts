import { createServer } from 'node:http';
import { listenLocally, type LocalServer } from '../support/local-server';
import { Stack, waitFor } from '../support/stack';
import { Call, Op, allowLoopbackPort, httpOp, recordingClient, submitOps } from './connectors-support';

const EMOJI = '\u{1F600}'; // two UTF-16 units: a cut between them leaves half of the pair

/**
 * What a target answers may hold text Postgres cannot store: U+0000 or half of a UTF-16 pair (JSON escapes both:
 * `"\u0000"`, `"\ud800"`), and a cut to length (a reference to 200 characters, a read field to 1,000) split an emoji
 * into such a half. The write of the result failed: a send the target answered 201 was left SENT, swept to UNKNOWN
 * ("left SENT by a worker that stopped") and held as an unknown outcome; a read-back that found the effect never
 * recorded VERIFIED. Such text is stored replaced by U+FFFD (the connectors' one door, redactingSecrets).
 */
describe('a target answering text Postgres cannot store', () => {
  let stack: Stack;
  let target: LocalServer;
  let base: string;
  let call: Call;
  const long = `${'x'.repeat(999)}${EMOJI}`; // the emoji at the 1,000th character: the kept field's cut splits it
  beforeAll(async () => {
    target = await listenLocally(
      createServer((req, res) => {
        req.resume();
        req.on('end', () => {
          res.writeHead(req.method === 'POST' ? 201 : 200, { 'content-type': 'application/json' });
          if (req.url === '/nul') return res.end('{"id":"ref\\u0000x"}');
          if (req.url === '/lone') return res.end('{"id":"ref\\ud800x"}');
          if (req.url === '/emoji') return res.end(JSON.stringify({ id: `${'r'.repeat(199)}${EMOJI}` }));
          res.end(JSON.stringify({ id: 'r1', data: { status: long } }));
        });
      }),
    );
    base = target.url;
    stack = await Stack.start({ label: 'unstorable' });
    ({ call } = recordingClient(stack));
    await allowLoopbackPort(call, target.port);
  });
  afterAll(async () => {
    await stack?.stop();
    await target?.close();
  });

  const operation = (id: string) => async () => (await call<Op>('GET', `/v1/operations/${id}`)).body;
  const providerRef = async (id: string) =>
    (
      (await stack.db.dataSource.query('SELECT provider_ref FROM operations WHERE id = $1', [id])) as {
        provider_ref: { status: number; ref?: string } | null;
      }[]
    )[0].provider_ref;

  const cut = { ref_cut: 'longer than the 200 characters kept' };
  it.each([
    ['U+0000', '/nul', 'ref\ufffdx', {}],
    ['a lone surrogate', '/lone', 'ref\ufffdx', {}],
    ['an emoji the cut to 200 characters splits', '/emoji', `${'r'.repeat(199)}\ufffd`, cut],
  ])(
    'a 201 whose reference holds %s is ACKNOWLEDGED, the reference stored with U+FFFD',
    async (_, path, stored, more) => {
      const execution = await submitOps(call, [
        httpOp('ack', { method: 'POST', url: `${base}${path}`, body: { a: 1 }, ref_field: 'id' }),
      ]);
      const id = execution.operations[0].id;
      const op = await waitFor(operation(id), (o) => !['PENDING', 'PREPARED', 'SENT'].includes(o.status), 20_000, 100);
      expect(op.status).toBe('ACKNOWLEDGED');
      expect(await providerRef(id)).toEqual({ status: 201, ref: stored, ...more });
    },
  );

  it('a read-back that finds the field is VERIFIED, the half of a pair its cut leaves kept as U+FFFD', async () => {
    const execution = await submitOps(call, [
      httpOp('verify', {
        method: 'POST',
        url: `${base}/orders`,
        body: { a: 1 },
        read_back: { url: `${base}/orders/{{operation_id}}`, field: 'data.status', equals: long },
      }),
    ]);
    const op = await waitFor(operation(execution.operations[0].id), (o) => o.status === 'VERIFIED', 20_000, 100);
    expect(JSON.stringify(op.evidence)).toContain(`${'x'.repeat(999)}\ufffd…`);
  });

  it('a reference stored replaced is not read back: the URL built from it would name another record', async () => {
    const execution = await submitOps(call, [
      httpOp('unreadable', {
        method: 'POST',
        url: `${base}/nul`,
        body: { a: 1 },
        ref_field: 'id',
        read_back: { url: `${base}/orders/{{ref}}`, field: 'data.status', equals: long },
      }),
    ]);
    const op = await waitFor(operation(execution.operations[0].id), (o) => o.status === 'MANUAL_REVIEW', 20_000, 100);
    expect(op).toMatchObject({ status: 'MANUAL_REVIEW', terminal_reason: 'SOURCE_UNREACHABLE' });
    expect(JSON.stringify(op.evidence)).toMatch(/cannot be stored as written .* it cannot be read back/);
  });
});
