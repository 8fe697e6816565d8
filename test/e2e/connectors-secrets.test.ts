import { createServer, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, sms, submission, unique } from '../support/http';
import { Call, Execution, Op, httpOp, recordingClient, submitOps, allowLoopbackPort } from './connectors-support';

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
async function startEchoTarget(): Promise<{ base: string; port: number; server: Server; seen: string[] }> {
  const seen: string[] = [];
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      seen.push(`${req.method} ${req.url}`);
      res.writeHead(req.method === 'POST' ? 201 : 200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ url: req.url, headers: req.headers, data: { status: 'created' } }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return { base: `http://127.0.0.1:${port}`, port, server, seen };
}

describe('tenant secrets are never stored or returned: an echoing target gets {{secret:NAME}} back', () => {
  let stack: Stack;
  let target: Awaited<ReturnType<typeof startEchoTarget>>;
  // Another allowlisted host (another port of 127.0.0.1: an entry of its own), the CRM token never meant for it.
  let other: Awaited<ReturnType<typeof startEchoTarget>>;
  let call: Call;
  let answers: string[];

  beforeAll(async () => {
    target = await startEchoTarget();
    other = await startEchoTarget();
    stack = await Stack.start({ label: 'connsecret', env: { LOG_LEVEL: 'debug' } });
    ({ call, answers } = recordingClient(stack));
    // A second secret that is a prefix of the first: the longer one must be replaced whole.
    await allowLoopbackPort(
      call,
      target.port,
      { secrets: { crm_token: SECRET, short: SHORTER } },
      { secrets: ['crm_token'] },
    );
  });
  afterAll(async () => {
    await stack?.stop();
    for (const server of [target?.server, other?.server]) {
      server?.closeAllConnections();
      await new Promise((resolve) => server?.close(resolve) ?? resolve(undefined));
    }
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

  it('a secret’s value written as the name of a placeholder ({{secret:<value>}}) is refused too: only a placeholder naming a secret holds none', async () => {
    // A token is letters, digits, _ . -: the shape of a secret's name. Every placeholder was taken out before the
    // check, so this one was accepted and its "name", the token, stored as written (an intent or an expected state is
    // never filled in).
    const token = `sk_live_${unique('tok').replace(/[^A-Za-z0-9_.-]/g, '')}`;
    const set = await call('PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { secrets: { plain_token: token } },
    });
    expect(set.status).toBe(200);
    try {
      const count = async () =>
        Number(((await stack.db.dataSource.query(`SELECT count(*) AS n FROM executions`)) as { n: string }[])[0].n);
      const before = await count();
      const refused = await call<{ errors: { field: string; rule: string }[] }>('POST', '/v1/executions', {
        body: {
          agent_id: 'placeholder-writer',
          intent: `pay with {{secret:${token}}}`,
          operations: [
            httpOp(
              'smuggle',
              { method: 'POST', url: `${target.base}/orders` },
              { expected_state: { note: `{{ secret:${token} }}` } },
            ),
          ],
        },
      });
      expect(refused.status).toBe(400);
      expect(refused.body.errors.map((e) => [e.field, e.rule]).sort()).toEqual([
        ['intent', 'secret_value'],
        ['operations[0].expected_state', 'secret_value'],
      ]);
      expect(refused.text).not.toContain(token);
      expect(await count()).toBe(before);
    } finally {
      await call('DELETE', '/v1/admin/connector-settings/http/secrets/plain_token', { key: DEMO.admin });
    }
  });

  it('a secret’s value anywhere else a submission would store it — an SMS body, the intent, a criterion — is refused too, also with no http operation in it', async () => {
    const count = async () =>
      Number(((await stack.db.dataSource.query(`SELECT count(*) AS n FROM executions`)) as { n: string }[])[0].n);
    const before = await count();
    const cases: [string, Record<string, unknown>, string][] = [
      [
        'in an SMS body',
        submission([sms(unique('sec'), { params: { to: '+15550100', body: `code ${SECRET}` } })]),
        'operations[0].params',
      ],
      ['in the intent', submission([sms(unique('sec'))], { intent: `pay with ${SPELLINGS[1]}` }), 'intent'],
      ['in the agent id', submission([sms(unique('sec'))], { agent_id: SHORTER }), 'agent_id'],
      [
        'in a criterion',
        submission([sms(unique('sec'))], {
          criteria: [{ key: 'c', operation: 'notify', expect_evidence: { path: 'status', equals: SECRET } }],
        }),
        'criteria[0]',
      ],
      [
        'beside an http operation, in the intent',
        submission([httpOp('named', { method: 'POST', url: `${target.base}/orders`, headers: withSecret })], {
          intent: `token ${SECRET}`,
        }),
        'intent',
      ],
    ];
    for (const [where, body, field] of cases) {
      const refused = await call<{ errors: { field: string; rule: string; message: string }[] }>(
        'POST',
        '/v1/executions',
        { body },
      );
      expect({ where, status: refused.status }).toEqual({ where, status: 400 });
      expect({ where, errors: refused.body.errors }).toEqual({
        where,
        errors: [expect.objectContaining({ rule: 'secret_value', field })],
      });
      expect(JSON.stringify(refused.body)).not.toContain(SHORTER);
    }
    expect(await count()).toBe(before);
    // Without the value, the same submission is written.
    const written = await call('POST', '/v1/executions', { body: submission([sms(unique('sec'))]) });
    expect(written.status).toBe(201);
  });

  it('a secret’s value in the Idempotency-Key, which intake stores with the execution, is refused too (400 secret_value naming the header), and nothing is stored', async () => {
    const count = async (table: string) =>
      Number(((await stack.db.dataSource.query(`SELECT count(*) AS n FROM ${table}`)) as { n: string }[])[0].n);
    const before = { executions: await count('executions'), keys: await count('idempotency_keys') };
    for (const [connector, body] of [
      ['an SMS', submission([sms(unique('sec-key'))])],
      ['an http operation', submission([httpOp('keyed', { method: 'POST', url: `${target.base}/orders` })])],
    ] as const) {
      for (const key of [SHORTER, `retry-${SHORTER}-1`]) {
        const refused = await call<{ errors: { field: string; rule: string }[] }>('POST', '/v1/executions', {
          body,
          headers: { 'Idempotency-Key': key },
        });
        expect({ connector, key, status: refused.status, errors: refused.body.errors }).toEqual({
          connector,
          key,
          status: 400,
          errors: [expect.objectContaining({ field: 'Idempotency-Key', rule: 'secret_value' })],
        });
        expect(refused.text).not.toContain(SHORTER);
      }
    }
    expect({ executions: await count('executions'), keys: await count('idempotency_keys') }).toEqual(before);
    // Another key: written.
    const written = await call('POST', '/v1/executions', {
      body: submission([sms(unique('sec-key'))]),
      headers: { 'Idempotency-Key': unique('plain-key') },
    });
    expect(written.status).toBe(201);
  });

  /**
   * The one operation of `body` (it asks for approval), denied: it ended without a send, so it may be retried. Made so
   * before a value in it is a secret, there was nothing to refuse then.
   */
  const deniedOperation = async (body: unknown) => {
    const created = await call<Execution>('POST', '/v1/executions', { body });
    expect(created.status).toBe(201);
    const [op] = created.body.operations;
    await waitFor(
      () => call<{ approval: { state: string } | null }>('GET', `/v1/operations/${op.id}`),
      (r) => r.body.approval?.state === 'requested',
    );
    const denied = await call('POST', `/v1/operations/${op.id}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'deny', reason: 'not now' },
    });
    expect(denied.status).toBe(200);
    return op;
  };

  /** `then`, with `value` made the http connector's secret `name` first, and the secret removed after. */
  const withSecretMadeSince = async (name: string, value: string, then: () => Promise<void>) => {
    const set = await call('PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { secrets: { [name]: value } },
    });
    expect(set.status).toBe(200);
    try {
      await then();
    } finally {
      await call('DELETE', `/v1/admin/connector-settings/http/secrets/${name}`, { key: DEMO.admin });
    }
  };

  it('a retry of an operation whose params hold a value made a secret since is refused (400 secret_value), and nothing is stored', async () => {
    // Accepted before the value was a secret (nothing to refuse then), and ended without a send: denied. The agent's id
    // and the operation's key, which the retry copies too, hold it as well.
    const later = `later-${unique('token')}-Kq83vW`;
    const op = await deniedOperation(
      submission(
        [
          httpOp(
            `${later}-op`,
            { method: 'POST', url: `${target.base}/orders`, headers: { 'x-note': later } },
            { requires_approval: true },
          ),
        ],
        { agent_id: `agent ${later}` },
      ),
    );
    await withSecretMadeSince('later_token', later, async () => {
      const count = async () =>
        Number(((await stack.db.dataSource.query(`SELECT count(*) AS n FROM executions`)) as { n: string }[])[0].n);
      const before = await count();
      // A submission of the same params is refused; a retry is a new operation submitted now, and stored its copy of
      // the value (and answered it) as a 201.
      const retried = await call<{ errors: { field: string; rule: string }[] }>(
        'POST',
        `/v1/operations/${op.id}/retry`,
      );
      expect(retried.status).toBe(400);
      expect(retried.body.errors).toEqual([
        expect.objectContaining({ field: 'params', rule: 'secret_value' }),
        expect.objectContaining({ field: 'agent_id', rule: 'secret_value' }),
        expect.objectContaining({ field: 'key', rule: 'secret_value' }),
      ]);
      expect(retried.text).not.toContain(later);
      expect(await count()).toBe(before);
    });
  });

  it('a second retry of an operation retried before a value in it was made a secret is 409 already-retried, naming the first, not 400 secret_value', async () => {
    // A 400 told the caller the retry was refused and to submit the operation anew (naming the secret): one that had
    // lost the first retry's answer would make the effect a second time. Retry refusals of the effect come first.
    const later = `again-${unique('token')}-Zr41pX`;
    const op = await deniedOperation(
      submission([
        httpOp(
          `${unique('again')}-op`,
          { method: 'POST', url: `${target.base}/orders`, headers: { 'x-note': later } },
          { requires_approval: true },
        ),
      ]),
    );
    const first = await call<{ operation: { id: string } }>('POST', `/v1/operations/${op.id}/retry`);
    expect(first.status).toBe(201);
    await withSecretMadeSince('again_token', later, async () => {
      const again = await call<{ type: string }>('POST', `/v1/operations/${op.id}/retry`);
      expect({ status: again.status, type: again.body.type }).toEqual({
        status: 409,
        type: expect.stringContaining('already-retried'),
      });
      expect(again.text).toContain(first.body.operation.id);
      expect(again.text).not.toContain(later);
    });
  });

  it('a person’s free text holding a secret’s value — a cancel reason, an approval reason, a resolution’s evidence — is refused (400 secret_value), and nothing changes', async () => {
    const created = await call<Execution>('POST', '/v1/executions', {
      body: submission([sms(unique('sec'), { requires_approval: true })]),
    });
    expect(created.status).toBe(201);
    const [op] = created.body.operations;
    await waitFor(
      () => call<{ approval: { state: string } | null }>('GET', `/v1/operations/${op.id}`),
      (r) => r.body.approval?.state === 'requested',
    );
    const refused = [
      await call('POST', `/v1/executions/${created.body.id}/cancel`, { body: { reason: `leaked ${SECRET}` } }),
      await call('POST', `/v1/operations/${op.id}/approval`, {
        key: DEMO.reviewer,
        body: { decision: 'deny', reason: `token is ${SPELLINGS[2]}` },
      }),
      await call('POST', `/v1/operations/${op.id}/resolve`, {
        key: DEMO.reviewer,
        body: { status: 'FAILED', evidence: `provider said ${SHORTER}` },
      }),
    ];
    expect(refused.map((r) => [r.status, (r.body as { errors: { field: string; rule: string }[] }).errors])).toEqual([
      [400, [expect.objectContaining({ field: 'reason', rule: 'secret_value' })]],
      [400, [expect.objectContaining({ field: 'reason', rule: 'secret_value' })]],
      [400, [expect.objectContaining({ field: 'evidence', rule: 'secret_value' })]],
    ]);
    const after = await call<Execution>('GET', `/v1/executions/${created.body.id}`);
    expect(after.body.status).not.toBe('cancelled');
    expect(after.body.operations[0].status).toBe('PREPARED');
    expect(after.body.operations[0].approval).toMatchObject({ state: 'requested' });
    // Without it, the same decision is taken.
    const denied = await call('POST', `/v1/operations/${op.id}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'deny', reason: 'not this one' },
    });
    expect(denied.status).toBe(200);
  });

  it('a reviewer’s "still unknown" evidence holding a secret’s value is refused too (400 secret_value), and the hold is not re-dated', async () => {
    // A precondition that does not hold: the charge is held in MANUAL_REVIEW before it is sent.
    const created = await call<Execution>('POST', '/v1/executions', {
      body: submission([charge(unique('sec-held'), { expected_state: { charged: true } })]),
    });
    expect(created.status).toBe(201);
    const [op] = created.body.operations;
    await until(op.id, 'MANUAL_REVIEW');
    const stillUnknown = (evidence: string) =>
      call(`POST`, `/v1/operations/${op.id}/resolve`, {
        key: DEMO.reviewer,
        body: { status: 'MANUAL_REVIEW', evidence },
      });
    const refused = await stillUnknown(`the provider's dashboard shows ${SPELLINGS[1]}`);
    expect([refused.status, (refused.body as { errors?: unknown }).errors]).toEqual([
      400,
      [expect.objectContaining({ field: 'evidence', rule: 'secret_value' })],
    ]);
    const events = async () =>
      (await call<{ data: { type: string }[] }>('GET', `/v1/executions/${created.body.id}/events`)).body.data.map(
        (e) => e.type,
      );
    expect(await events()).not.toContain('operation.still_unknown');
    const held = await call<{ obligation?: { investigations?: unknown[] } }>('GET', `/v1/operations/${op.id}`);
    expect(held.body.obligation?.investigations ?? []).toEqual([]);
    // Without it, the same record is taken.
    expect((await stillUnknown('the provider has not answered yet')).status).toBe(200);
    expect(await events()).toContain('operation.still_unknown');
  });

  /** The CRM token bound to the target only; `other` allowlisted for another purpose, binding `otherBinds`. */
  const allowBoth = async (otherBinds?: string[]) => {
    const put = await call('PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: {
        allow_hosts: [
          { host: '127.0.0.1', ports: [target.port], allow_private: true, secrets: ['crm_token'] },
          {
            host: '127.0.0.1',
            ports: [other.port],
            allow_private: true,
            ...(otherBinds ? { secrets: otherBinds } : {}),
          },
        ],
      },
    });
    expect(put.status).toBe(200);
    // Nothing given is none, written out as [].
    expect((put.body as { allow_hosts: unknown[] }).allow_hosts[1]).toEqual({
      host: '127.0.0.1',
      ports: [other.port],
      allow_private: true,
      secrets: otherBinds ?? [],
    });
  };
  const executions = async () =>
    Number(((await stack.db.dataSource.query(`SELECT count(*) AS n FROM executions`)) as { n: string }[])[0].n);

  it('a secret goes to no allowlisted host its entry does not bind: 400 secret_not_bound at intake, nothing written', async () => {
    await allowBoth();
    const before = await executions();
    const seenBefore = other.seen.length;
    const toOther = { 'x-t': `Bearer ${PLACEHOLDER}` };
    const cases: [string, Record<string, unknown>][] = [
      // The red team's case: the token in a header to an echo allowlisted for something else, read back from there.
      [
        'params.headers.x-t',
        {
          method: 'POST',
          url: `${other.base}/echo/{{operation_id}}`,
          headers: toOther,
          ref_field: '$.headers.x-t',
          read_back: { url: `${other.base}/orders/{{ref}}`, field: '$.data.status', equals: 'created' },
        },
      ],
      [
        'params.read_back.headers.x-t',
        {
          method: 'POST',
          url: `${target.base}/orders`,
          headers: withSecret,
          read_back: { url: `${other.base}/orders/{{operation_id}}`, headers: toOther, field: 'a', equals: 'b' },
        },
      ],
      [
        'params.context.headers.x-t',
        {
          method: 'POST',
          url: `${target.base}/orders`,
          context: { url: `${other.base}/state/{{idempotency_key}}`, headers: toOther, field: 'a' },
        },
      ],
    ];
    for (const [field, params] of cases) {
      const refused = await call<{ errors: { field: string; rule: string; message: string }[] }>(
        'POST',
        '/v1/executions',
        {
          body: { agent_id: 'exfiltrator', intent: 'send a token elsewhere', operations: [httpOp('leak', params)] },
          headers: { 'Idempotency-Key': `secret-binding-${field}` },
        },
      );
      expect({ field, status: refused.status }).toEqual({ field, status: 400 });
      expect(refused.body.errors).toEqual([
        {
          field: `operations[0].${field}`,
          rule: 'secret_not_bound',
          message: `secret "crm_token" may not be sent to 127.0.0.1:${other.port}: the tenant's allowlist entry for it does not bind it (allow_hosts[].secrets)`,
        },
      ]);
      expect(refused.text).not.toContain(SECRET);
    }
    expect(await executions()).toBe(before);
    expect(other.seen.length).toBe(seenBefore);
    // To the host it is bound to, the same request is accepted.
    const bound = await submitOps(call, [
      httpOp('bound', { method: 'POST', url: `${target.base}/orders`, headers: toOther }),
    ]);
    expect(bound.operations[0].status).toBeDefined();
  });

  it('a bound secret over plain http to a host that may not be private: 400 secret_not_bound at intake, nothing written', async () => {
    // Over http:// the token crosses every network between Verity and the host, readable by whoever is on the way —
    // even to the port a TLS server listens on (the request is written before any answer).
    const put = await call('PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: {
        allow_hosts: [
          { host: '127.0.0.1', ports: [target.port], allow_private: true, secrets: ['crm_token'] },
          { host: 'crm.example.com', ports: [80, 443], secrets: ['crm_token'] },
        ],
      },
    });
    expect(put.status).toBe(200);
    const before = await executions();
    for (const [url, port] of [
      ['http://crm.example.com/v1/tickets', 80],
      ['http://crm.example.com:443/v1/tickets', 443],
    ] as const) {
      const refused = await call<{ errors: { field: string; rule: string; message: string }[] }>(
        'POST',
        '/v1/executions',
        { body: submission([httpOp('plain', { method: 'POST', url, headers: withSecret })]) },
      );
      expect({ url, status: refused.status }).toEqual({ url, status: 400 });
      expect(refused.body.errors).toEqual([
        {
          field: 'operations[0].params.headers.authorization',
          rule: 'secret_not_bound',
          message: expect.stringMatching(
            new RegExp(`^secret "crm_token" may not be sent to crm\\.example\\.com:${port} over plain http://`),
          ),
        },
      ]);
    }
    expect(await executions()).toBe(before);
    // Over https it goes (held for approval here: nothing is sent), and so does plain http within the operator's
    // network (an entry with allow_private, at a loopback address): the target sees the secret.
    const held = await submitOps(call, [
      httpOp(
        'tls',
        { method: 'POST', url: 'https://crm.example.com/v1/tickets', headers: withSecret },
        { requires_approval: true },
      ),
    ]);
    expect((await call('POST', `/v1/executions/${held.id}/cancel`)).status).toBe(200);
    // Counted by its own path: a request of an earlier test may still reach the shared target meanwhile.
    const path = `/orders/${unique('plain-local')}`;
    const local = await submitOps(call, [
      httpOp('local', { method: 'POST', url: `${target.base}${path}`, headers: withSecret }),
    ]);
    await until(local.operations[0].id, 'ACKNOWLEDGED');
    expect(target.seen.filter((request) => request === `POST ${path}`)).toHaveLength(1);
  });

  it('bound when accepted, unbound before its send: FAILED secret_not_bound, and the host never saw a request', async () => {
    await allowBoth(['crm_token']);
    const seenBefore = other.seen.length;
    const execution = await submitOps(call, [
      httpOp(
        'held',
        { method: 'POST', url: `${other.base}/orders`, headers: { 'x-t': `Bearer ${PLACEHOLDER}` } },
        { requires_approval: true },
      ),
    ]);
    await waitFor(
      async () => (await call<{ status: string }>('GET', `/v1/executions/${execution.id}`)).body.status,
      (status) => status === 'waiting_for_approval',
      30_000,
      100,
    );
    // The admin takes the binding back while the operation waits; the reviewer then approves its send.
    await allowBoth();
    const opId = execution.operations[0].id;
    const approved = await call('POST', `/v1/operations/${opId}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'approve', reason: 'looks fine' },
    });
    expect(approved.status).toBe(200);
    const op = await until(opId, 'FAILED');
    const rule = `secret "crm_token" may not be sent to 127.0.0.1:${other.port}: the tenant's allowlist entry for it does not bind it (allow_hosts[].secrets)`;
    expect(op).toMatchObject({ status: 'FAILED', terminal_reason: 'SOURCE_UNREACHABLE' });
    expect(op.failure).toEqual({
      code: 'secret_not_bound',
      phase: 'dispatch',
      category: 'policy',
      retryable: false,
      message: `never sent: a secret the call names may not be sent to its host: ${rule} (terminal_reason SOURCE_UNREACHABLE)`,
      at: expect.any(String),
    });
    expect(other.seen.length).toBe(seenBefore);
    expect(JSON.stringify(op)).not.toContain(SECRET);
    // A retry is a new operation submitted now: refused as a submission of it is (400 secret_not_bound, nothing
    // written), not accepted to fail the same way at its send.
    const executions = async () =>
      Number(((await stack.db.dataSource.query(`SELECT count(*) AS n FROM executions`)) as { n: string }[])[0].n);
    const before = await executions();
    const retried = await call<{ errors: { field: string; rule: string; message: string }[] }>(
      'POST',
      `/v1/operations/${opId}/retry`,
    );
    expect(retried.status).toBe(400);
    expect(retried.body.errors).toEqual([
      expect.objectContaining({ field: expect.stringMatching(/^params\./), rule: 'secret_not_bound' }),
    ]);
    expect(await executions()).toBe(before);
  });

  it('a refused secret value is not echoed in the problem', async () => {
    const refused = await call('PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { secrets: { other: `${SECRET}\n` } },
    });
    expect(refused.status).toBe(400);
    expect(refused.text).toContain('secrets');
  });

  it('a secret value with a leading or trailing space is refused (the target would get it trimmed, unredacted)', async () => {
    const before = await call<{ secrets: string[] }>('GET', '/v1/admin/connector-settings/http', { key: DEMO.admin });
    for (const value of ['tok-Spaced-value ', ' tok-Spaced-value']) {
      const refused = await call<{ errors: { field: string; rule: string; message: string }[] }>(
        'PUT',
        '/v1/admin/connector-settings/http',
        { key: DEMO.admin, body: { secrets: { spaced: value } } },
      );
      expect(refused.status).toBe(400);
      expect(refused.body.errors).toEqual([
        expect.objectContaining({ field: 'secrets.spaced', message: expect.stringMatching(/leading or trailing/) }),
      ]);
      expect(refused.text).not.toContain('tok-Spaced-value');
    }
    const after = await call<{ secrets: string[] }>('GET', '/v1/admin/connector-settings/http', { key: DEMO.admin });
    expect(after.body).toEqual(before.body);
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
