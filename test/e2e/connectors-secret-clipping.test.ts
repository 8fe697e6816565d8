import { createServer, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Stack, waitFor } from '../support/stack';
import { Call, Op, httpOp, recordingClient, submitOps, allowLoopbackPort } from './connectors-support';

const SECRET = 'clip-SECRET-0123456789abcdefghij';
const PLACEHOLDER = '{{secret:crm_token}}';
/** More of the secret than anyone may learn from a stored value: its first 16 characters. */
const LEAK = SECRET.slice(0, 16);

/**
 * An allow-listed target that echoes the request's authorization header inside one long string field, after as many
 * characters of padding as `?pad=` asks: the caller chooses where in the field the secret falls.
 */
async function startPaddedEcho(): Promise<{ base: string; port: number; server: Server }> {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const pad = Number(new URL(req.url ?? '/', 'http://x').searchParams.get('pad') ?? '0');
      res.writeHead(req.method === 'POST' ? 201 : 200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ raw: `${'x'.repeat(pad)}${req.headers.authorization ?? ''}` }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return { base: `http://127.0.0.1:${port}`, port, server };
}

describe('a secret a target echoes is redacted before what is kept of the answer is cut to length', () => {
  let stack: Stack;
  let target: Awaited<ReturnType<typeof startPaddedEcho>>;
  let call: Call;
  let answers: string[];

  beforeAll(async () => {
    target = await startPaddedEcho();
    stack = await Stack.start({ label: 'secretclip' });
    ({ call, answers } = recordingClient(stack));
    await allowLoopbackPort(call, target.port, { secrets: { crm_token: SECRET } }, { secrets: ['crm_token'] });
  });
  afterAll(async () => {
    await stack?.stop();
    target?.server.closeAllConnections();
    await new Promise((resolve) => target?.server.close(resolve) ?? resolve(undefined));
  });

  const withSecret = { authorization: `Bearer ${PLACEHOLDER}` };
  const until = async (id: string, statuses: string[]) =>
    waitFor(
      async () => (await call<Op>('GET', `/v1/operations/${id}`)).body,
      (op) => statuses.includes(op.status),
      45_000,
      150,
    );

  it('a context read whose field is cut at 1000 characters keeps no part of the secret', async () => {
    // 975 + "Bearer " = 982 characters before the secret: the cut at 1000 falls 18 characters into it.
    const execution = await submitOps(call, [
      httpOp(
        'conflict',
        {
          method: 'POST',
          url: `${target.base}/orders`,
          headers: withSecret,
          context: { url: `${target.base}/state?pad=975`, headers: withSecret, field: '$.raw' },
        },
        { expected_state: { raw: 'old' } },
      ),
    ]);
    const op = await until(execution.operations[0].id, ['MANUAL_REVIEW']);
    expect(op.terminal_reason).toBe('KNOWLEDGE_CONFLICT');
    await call('GET', `/v1/executions/${execution.id}/events`);
    const stored = JSON.stringify(
      await stack.db.dataSource.query(
        `SELECT o.evidence, o.observation, e.data FROM operations o JOIN events e ON e.execution_id = o.execution_id
          WHERE o.id = $1`,
        [op.id],
      ),
    );
    // Compared as booleans: the stored rows are thousands of characters long.
    expect(stored.includes('Bearer {{secret:crm_token}}')).toBe(true);
    expect(stored.includes(LEAK)).toBe(false);
    expect(answers.filter((a) => a.includes(LEAK))).toEqual([]);
  });

  it('a provider reference cut at 200 characters keeps no part of the secret', async () => {
    // 175 + "Bearer " = 182 characters before the secret: the cut at 200 falls 18 characters into it.
    const execution = await submitOps(call, [
      httpOp('order', {
        method: 'POST',
        url: `${target.base}/orders?pad=175`,
        headers: withSecret,
        ref_field: '$.raw',
      }),
    ]);
    const op = await until(execution.operations[0].id, ['ACKNOWLEDGED', 'VERIFIED', 'MANUAL_REVIEW']);
    await call('GET', `/v1/executions/${execution.id}/events`);
    const stored = JSON.stringify(
      await stack.db.dataSource.query(
        `SELECT o.provider_ref, o.evidence, e.data FROM operations o JOIN events e ON e.execution_id = o.execution_id
          WHERE o.id = $1`,
        [op.id],
      ),
    );
    // Compared as booleans: the stored rows are thousands of characters long.
    expect(stored.includes('Bearer {{secret:crm_token}}')).toBe(true);
    expect(stored.includes(LEAK)).toBe(false);
    expect(answers.filter((a) => a.includes(LEAK))).toEqual([]);
  });
});
