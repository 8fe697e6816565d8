import { createServer, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DEMO, Stack, waitFor } from '../support/stack';
import { Call, Op, httpOp, recordingClient, submitOps } from './connectors-support';

// Spaces, "/" and "+" so that its percent-encoded and JSON-escaped spellings differ from the plain one.
const SECRET = 'echo-Secret/Zx81 never+shown"q';
const SHORTER = 'echo-Secret';
const SPELLINGS = [SECRET, encodeURIComponent(SECRET), JSON.stringify(SECRET).slice(1, -1)];
const PLACEHOLDER = '{{secret:crm_token}}';

/**
 * An allow-listed target that answers every request with what it was sent: its URL and its headers (the secret in
 * `authorization` among them). Whatever a connector keeps of such an answer — a context state, a read-back record, a
 * provider reference and the read-back URL built from it — would hold the secret, unless Verity replaces it.
 */
async function startEchoTarget(): Promise<{ base: string; port: number; server: Server }> {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(req.method === 'POST' ? 201 : 200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ url: req.url, headers: req.headers, data: { status: 'created' } }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return { base: `http://127.0.0.1:${port}`, port, server };
}

describe('tenant secrets are never stored or returned: an echoing target gets {{secret:NAME}} back', () => {
  let stack: Stack;
  let target: Awaited<ReturnType<typeof startEchoTarget>>;
  let call: Call;
  let answers: string[];

  beforeAll(async () => {
    target = await startEchoTarget();
    stack = await Stack.start({ label: 'connsecret', env: { LOG_LEVEL: 'debug' } });
    ({ call, answers } = recordingClient(stack));
    const put = await call('PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: {
        allow_hosts: [{ host: '127.0.0.1', ports: [target.port], allow_private: true }],
        // A second secret that is a prefix of the first: the longer one must be replaced whole.
        secrets: { crm_token: SECRET, short: SHORTER },
      },
    });
    expect(put.status).toBe(200);
  });
  afterAll(async () => {
    await stack?.stop();
    target?.server.closeAllConnections();
    await new Promise((resolve) => target?.server.close(resolve));
  });

  const withSecret = { authorization: `Bearer ${PLACEHOLDER}` };
  const until = async (id: string, status: string) =>
    waitFor(
      async () => (await call<Op>('GET', `/v1/operations/${id}`)).body,
      (op) => op.status === status,
      45_000,
      150,
    );

  it('context read: the state, the knowledge.conflict event and the held evidence show the placeholder', async () => {
    const execution = await submitOps(call, [
      httpOp(
        'conflict',
        {
          method: 'POST',
          url: `${target.base}/orders`,
          headers: withSecret,
          context: { url: `${target.base}/state`, headers: withSecret, field: '$.headers.authorization' },
        },
        { expected_state: { 'headers.authorization': 'Bearer old' } },
      ),
    ]);
    const op = await until(execution.operations[0].id, 'MANUAL_REVIEW');
    expect(op.terminal_reason).toBe('KNOWLEDGE_CONFLICT');
    expect(op.evidence).toMatchObject({
      method: 'context_read',
      source: `${target.base}/state`,
      record: { 'headers.authorization': `Bearer ${PLACEHOLDER}` },
      state: { 'headers.authorization': `Bearer ${PLACEHOLDER}` },
    });
    const events = (
      await call<{ data: { type: string; data: Record<string, unknown> }[] }>(
        'GET',
        `/v1/executions/${execution.id}/events`,
      )
    ).body.data;
    const conflict = events.find((e) => e.type === 'knowledge.conflict');
    expect(conflict?.data).toMatchObject({
      state: { 'headers.authorization': `Bearer ${PLACEHOLDER}` },
      conflicts: [`headers.authorization: expected "Bearer old", source has "Bearer ${PLACEHOLDER}"`],
    });
  });

  it('ref_field and read-back: the provider reference shows the placeholder, and no read is built from it', async () => {
    const execution = await submitOps(call, [
      httpOp('order', {
        method: 'POST',
        url: `${target.base}/orders`,
        headers: withSecret,
        ref_field: '$.headers.authorization',
        read_back: {
          method: 'GET',
          url: `${target.base}/orders/{{ref}}`,
          headers: withSecret,
          field: '$.headers.authorization',
          equals: 'Bearer not-the-secret',
        },
      }),
    ]);
    const op = await until(execution.operations[0].id, 'MANUAL_REVIEW');
    const [row] = (await stack.db.dataSource.query('SELECT provider_ref FROM operations WHERE id = $1', [op.id])) as {
      provider_ref: Record<string, unknown>;
    }[];
    expect(row.provider_ref).toMatchObject({ ref: `Bearer ${PLACEHOLDER}` });
    // The stored reference holds the placeholder, not the value, so a read built from it would ask for another record
    // (whose absence proves nothing): no read is made, the verification is inconclusive, and a person decides.
    expect(op.terminal_reason).toBe('SOURCE_UNREACHABLE');
    expect(op.evidence).toMatchObject({
      method: 'read_after_write',
      source: `${target.base}/orders/{{ref}}`,
      error: expect.stringContaining('stored redacted'),
    });
  });

  it('an agent that writes a secret’s value into an operation is refused (400 secret_value), and nothing is stored', async () => {
    const count = async () =>
      Number(((await stack.db.dataSource.query(`SELECT count(*) AS n FROM executions`)) as { n: string }[])[0].n);
    const before = await count();
    const cases: [string, Record<string, unknown>, Record<string, unknown>][] = [
      ['in the body', { method: 'POST', url: `${target.base}/orders`, body: { note: `token ${SECRET}` } }, {}],
      ['percent-encoded in the URL', { method: 'GET', url: `${target.base}/x?t=${encodeURIComponent(SECRET)}` }, {}],
      ['in a header', { method: 'POST', url: `${target.base}/orders`, headers: { authorization: SECRET } }, {}],
      [
        'in the expected_state',
        { method: 'POST', url: `${target.base}/orders` },
        { expected_state: { token: SECRET } },
      ],
    ];
    for (const [where, params, extra] of cases) {
      const refused = await call<{ errors: { field: string; rule: string }[] }>('POST', '/v1/executions', {
        body: {
          agent_id: 'secret-writer',
          intent: 'send what it should only name',
          operations: [httpOp('leak', params, extra)],
        },
      });
      expect({ where, status: refused.status }).toEqual({ where, status: 400 });
      expect(refused.body.errors).toEqual([
        expect.objectContaining({ rule: 'secret_value', field: expect.stringMatching(/^operations\[0\]\./) }),
      ]);
    }
    expect(await count()).toBe(before);
    // Named, it is accepted and stored as its name.
    const named = await submitOps(call, [
      httpOp('named', { method: 'POST', url: `${target.base}/orders`, headers: withSecret }),
    ]);
    expect(JSON.stringify(named.operations[0])).toContain(PLACEHOLDER);
  });

  it('a refused secret value is not echoed in the problem', async () => {
    const refused = await call('PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { secrets: { other: `${SECRET}\n` } },
    });
    expect(refused.status).toBe(400);
    expect(refused.text).toContain('secrets');
  });

  it('no API answer, row, event or log line holds the secret in any spelling', async () => {
    for (const path of ['/v1/executions?limit=50']) {
      const list = await call<{ data: { id: string; operations: Op[] }[] }>('GET', path);
      for (const execution of list.body.data) {
        await call('GET', `/v1/executions/${execution.id}`);
        await call('GET', `/v1/executions/${execution.id}/events`);
        for (const op of execution.operations) await call('GET', `/v1/operations/${op.id}`);
      }
    }
    const everything = answers.join('\n');
    expect(everything).toContain(PLACEHOLDER);
    const rows = async (table: string) => JSON.stringify(await stack.db.dataSource.query(`SELECT * FROM ${table}`));
    const stored = [await rows('operations'), await rows('events'), await rows('executions')].join('\n');
    expect(stored).toContain(PLACEHOLDER);
    for (const spelling of SPELLINGS) {
      expect(everything).not.toContain(spelling);
      expect(stored).not.toContain(spelling);
      expect(stack.logs()).not.toContain(spelling);
    }
    // The shorter secret is a prefix of the longer one: the longer is replaced whole, so no stray {{secret:short}}.
    expect(stored).not.toContain('{{secret:short}}');
  });
});
