import { createServer, request as forward, type Server } from 'node:http';
import { writeDuringRevocation } from '../support/lock-waits';
import { SecretsCipher, createApiKey, createWebhookEndpoint, revokeApiKey } from '@verity/persistence';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { listenLocally, type LocalServer } from '../support/local-server';
import type { ProblemDetails as Problem } from '@verity/sdk';
import {
  Op,
  events,
  getExecution,
  getOperation,
  heldUnsentCharge,
  resetSandbox,
  submit,
  waitForOp,
} from './dispatcher-helpers';

/**
 * A key revoked while one of its requests is under way: the request was admitted on the key (its lookup, or the
 * process' cached copy while the revocation's NOTIFY is on its way), and its write comes after the revocation
 * committed — a reviewer's resolution that first reads the source for seconds, or any decision whose statement runs
 * as the revocation commits. Before: the write was made, and the record showed a decision by a key after its
 * revocation (a reviewer removed for cause could still record FAILED, "no effect, a retry is safe"). Now the write
 * checks the key itself: 401, nothing written.
 */
describe('a key revoked while its request is under way', () => {
  let stack: Stack;
  let proxy: LocalServer;
  /** While set, the API's reads of the provider's charges wait here until it is resolved. */
  let gate: { arrived: () => void; open: Promise<void> } | null = null;
  let readsHeld = 0;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'keyrevokedmid', apis: 0 });
    // The API reads the provider through this proxy (the workers do not): a read can be held while a key is revoked.
    const server: Server = createServer((req, res) => {
      const pass = () => {
        const upstream = forward(
          `${stack.sandboxUrl}${req.url ?? '/'}`,
          { method: req.method, headers: req.headers },
          (answer) => {
            res.writeHead(answer.statusCode ?? 502, answer.headers);
            answer.pipe(res);
          },
        );
        upstream.on('error', () => res.destroy());
        req.pipe(upstream);
      };
      const held = gate;
      if (held && req.method === 'GET' && (req.url ?? '').startsWith('/v1/charges')) {
        readsHeld += 1;
        held.arrived();
        void held.open.then(pass);
        return;
      }
      pass();
    });
    proxy = await listenLocally(server);
    // A held read waits at the proxy while the test revokes the key. The API gives up on a read after
    // CONNECTOR_TIMEOUT_MS (1 s in tests), which a loaded machine's revocation can outlast: the resolution would then be
    // refused (409) because the source went unread, not for the revoked key these tests are about. 5 s, not more: the
    // API also bounds a call still in flight by it, so FAILED is offered that much later on every hold here.
    stack.apiUrl = await stack.startApi({ SANDBOX_URL: proxy.url, CONNECTOR_TIMEOUT_MS: '5000' });
  });
  afterAll(async () => {
    await proxy?.close();
    await stack?.stop();
  });
  afterEach(async () => resetSandbox(stack));

  const newKey = async (role: 'reviewer' | 'agent' | 'admin') =>
    createApiKey(stack.db.dataSource.manager, { tenantId: 'demo', role, label: unique('mid-request') });

  /** A charge that never reached the provider, held SOURCE_UNREACHABLE, which a reviewer may now resolve FAILED. */
  const heldCharge = () => heldUnsentCharge(stack, unique('mid-request'));

  const resolveFailed = (opId: string, key: string) =>
    http<Op | Problem>(stack.apiUrl, 'POST', `/v1/operations/${opId}/resolve`, {
      key,
      body: { status: 'FAILED', evidence: 'provider dashboard shows no charge' },
    });

  function expectRevokedMidRequest(answer: { status: number; body: unknown; headers: Headers }) {
    expect(answer.status).toBe(401);
    const body = answer.body as Problem;
    expect(body.type).toBe('https://verity.dev/problems/unauthorized');
    expect(body.detail).toMatch(/revoked while this request was under way; nothing was written/);
    expect(answer.headers.get('www-authenticate')).toMatch(/^Bearer/);
  }

  it('a resolution whose source read outlasts its key: the key is revoked during the read, and nothing is resolved', async () => {
    const { executionId, held } = await heldCharge();
    const reviewer = await newKey('reviewer');
    let arrived!: () => void;
    const reading = new Promise<void>((resolve) => (arrived = resolve));
    let open!: () => void;
    gate = { arrived, open: new Promise<void>((resolve) => (open = resolve)) };
    let answer: Awaited<ReturnType<typeof resolveFailed>>;
    try {
      const resolving = resolveFailed(held.id, reviewer.key);
      // The API admitted the key and is reading the source for the FAILED (I14): now the key is revoked.
      await reading;
      expect(await revokeApiKey(stack.db.dataSource.manager, reviewer.id)).toBe(true);
      open();
      answer = await resolving;
    } finally {
      gate = null;
      open();
    }
    expect(readsHeld).toBeGreaterThan(0);
    expectRevokedMidRequest(answer);
    const after = await getOperation(stack, held.id);
    expect(after.status).toBe('MANUAL_REVIEW');
    expect(after.recovery_obligation?.resolution ?? null).toBeNull();
    expect((await events(stack, executionId)).filter((e) => e.type === 'operation.resolved')).toEqual([]);
    // A reviewer whose key stands resolves it as before.
    const resolved = await resolveFailed(held.id, DEMO.reviewer);
    expect(resolved.status).toBe(200);
    expect((resolved.body as Op).status).toBe('FAILED');
  });

  it('an admin’s policy and connector settings changes made as the key’s revocation commits are not made', async () => {
    // The tenant's rule that a charge over 10.00 waits for a reviewer, set by an admin whose key stands.
    const rule = { connector: 'sandbox.payments', amount_above: 1000 };
    const set = await http(stack.apiUrl, 'PUT', '/v1/admin/policy', {
      key: DEMO.admin,
      body: { approval_rules: [rule] },
    });
    expect(set.status).toBe(200);
    const admin = await newKey('admin');
    expect((await http(stack.apiUrl, 'GET', '/v1/admin/policy', { key: admin.key })).status).toBe(200);
    const historyBefore = await http<{ data: unknown[] }>(stack.apiUrl, 'GET', '/v1/admin/changes', {
      key: DEMO.admin,
    });
    // A leaked admin key, revoked as it lifts the rule and opens the allowlist to another host.
    const lifted = await writeDuringRevocation(stack.db.dataSource, admin.id, () =>
      http<Problem>(stack.apiUrl, 'PUT', '/v1/admin/policy', { key: admin.key, body: { approval_rules: [] } }),
    );
    expectRevokedMidRequest(lifted);
    const admin2 = await newKey('admin');
    expect((await http(stack.apiUrl, 'GET', '/v1/admin/policy', { key: admin2.key })).status).toBe(200);
    const opened = await writeDuringRevocation(stack.db.dataSource, admin2.id, () =>
      http<Problem>(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
        key: admin2.key,
        body: { allow_hosts: [{ host: 'exfil.example.com' }] },
      }),
    );
    expectRevokedMidRequest(opened);
    const policy = await http<{ approval_rules: unknown[] }>(stack.apiUrl, 'GET', '/v1/admin/policy', {
      key: DEMO.admin,
    });
    expect(policy.body.approval_rules).toEqual([expect.objectContaining(rule)]);
    const settings = await http<{ allow_hosts: unknown[] }>(stack.apiUrl, 'GET', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
    });
    expect(settings.body.allow_hosts).toEqual([]);
    const historyAfter = await http<{ data: unknown[] }>(stack.apiUrl, 'GET', '/v1/admin/changes', {
      key: DEMO.admin,
    });
    expect(historyAfter.body.data).toEqual(historyBefore.body.data);
    // The tenant as the other tests expect it: no approval rule.
    const restored = await http(stack.apiUrl, 'PUT', '/v1/admin/policy', {
      key: DEMO.admin,
      body: { approval_rules: [] },
    });
    expect(restored.status).toBe(200);
  });

  it('an approval, a cancel and a retry made as their key’s revocation commits are not written', async () => {
    // Approval: an operation that waits for one.
    const waiting = await submit(stack, [charge(unique('mid-approve'), { requires_approval: true })]);
    const pending = await waitForOp(stack, waiting.id, 'charge', (o) => o.approval?.state === 'requested');
    const approver = await newKey('reviewer');
    // The key is known to the API (cached), as for any reviewer who has the operation open.
    expect((await http(stack.apiUrl, 'GET', `/v1/operations/${pending.id}`, { key: approver.key })).status).toBe(200);
    const approved = await writeDuringRevocation(stack.db.dataSource, approver.id, () =>
      http<Problem>(stack.apiUrl, 'POST', `/v1/operations/${pending.id}/approval`, {
        key: approver.key,
        body: { decision: 'approve' },
      }),
    );
    expectRevokedMidRequest(approved);
    expect((await getOperation(stack, pending.id)).approval?.state).toBe('requested');
    expect((await events(stack, waiting.id)).filter((e) => e.type === 'approval.decided')).toEqual([]);

    // Cancel: the same execution, by an agent key.
    const canceller = await newKey('agent');
    expect((await http(stack.apiUrl, 'GET', `/v1/executions/${waiting.id}`, { key: canceller.key })).status).toBe(200);
    const cancelled = await writeDuringRevocation(stack.db.dataSource, canceller.id, () =>
      http<Problem>(stack.apiUrl, 'POST', `/v1/executions/${waiting.id}/cancel`, { key: canceller.key }),
    );
    expectRevokedMidRequest(cancelled);
    expect((await getExecution(stack, waiting.id)).status).not.toBe('cancelled');

    // Retry: of an operation that FAILED (declined), by an agent key.
    const declined = await submit(stack, [charge(unique('decline-mid-retry'))]);
    const failed = await waitForOp(stack, declined.id, 'charge', (o) => o.status === 'FAILED');
    const retrier = await newKey('agent');
    expect((await http(stack.apiUrl, 'GET', `/v1/operations/${failed.id}`, { key: retrier.key })).status).toBe(200);
    const retried = await writeDuringRevocation(stack.db.dataSource, retrier.id, () =>
      http<Problem>(stack.apiUrl, 'POST', `/v1/operations/${failed.id}/retry`, { key: retrier.key }),
    );
    expectRevokedMidRequest(retried);
    const retryOf = (await stack.db.dataSource.query(`SELECT id FROM operations WHERE retry_of = $1`, [failed.id])) as {
      id: string;
    }[];
    expect(retryOf).toEqual([]);
    // Keys that stand do all three.
    expect(
      (
        await http(stack.apiUrl, 'POST', `/v1/operations/${pending.id}/approval`, {
          key: DEMO.reviewer,
          body: { decision: 'approve' },
        })
      ).status,
    ).toBe(200);
    expect((await http(stack.apiUrl, 'POST', `/v1/operations/${failed.id}/retry`, { key: DEMO.agent })).status).toBe(
      201,
    );
    // Both sends are let finish here: a send still on its way when the next case sets its one-shot fault would take it.
    await waitForOp(stack, waiting.id, 'charge', (o) => o.status === 'VERIFIED');
    await waitFor(
      async () =>
        (await stack.db.dataSource.query(`SELECT status FROM operations WHERE retry_of = $1`, [failed.id])) as {
          status: string;
        }[],
      (rows) => rows.length === 1 && rows[0].status === 'FAILED',
    );
  });
  it('a re-check request and a webhook redelivery made as their key’s revocation commits are not made', async () => {
    // Re-check: of a charge held because its source could not be read.
    const { executionId, held } = await heldCharge();
    const reviewer = await newKey('reviewer');
    expect((await http(stack.apiUrl, 'GET', `/v1/operations/${held.id}`, { key: reviewer.key })).status).toBe(200);
    const asked = await writeDuringRevocation(stack.db.dataSource, reviewer.id, () =>
      http<Problem>(stack.apiUrl, 'POST', `/v1/operations/${held.id}/recheck`, { key: reviewer.key }),
    );
    expectRevokedMidRequest(asked);
    // A reviewer whose key stands asks; once that read is recorded, none is recorded on the revoked key's request.
    expect((await http(stack.apiUrl, 'POST', `/v1/operations/${held.id}/recheck`, { key: DEMO.reviewer })).status).toBe(
      202,
    );
    const rechecked = await waitFor(
      async () => (await events(stack, executionId)).filter((e) => e.type === 'operation.rechecked'),
      (found) => found.some((e) => e.data.trigger === 'reviewer'),
    );
    expect(rechecked.map((e) => e.data.requested_by)).not.toContain(reviewer.id);

    // Redelivery: of a delivery that failed, to an endpoint of the tenant.
    const { endpoint } = (await createWebhookEndpoint(stack.db.dataSource, new SecretsCipher(undefined), {
      tenantId: 'demo',
      url: 'https://hooks.example.com/verity',
      events: ['execution.finished'],
      createdBy: (await newKey('admin')).id,
    }))!;
    const deliveryId = unique('msg_mid');
    await stack.db.dataSource.query(
      `INSERT INTO webhook_deliveries (id, endpoint_id, tenant_id, type, payload, status, attempts)
       VALUES ($1, $2, 'demo', 'execution.finished', $3, 'failed', 3)`,
      [
        deliveryId,
        endpoint.id,
        JSON.stringify({ type: 'execution.finished', timestamp: new Date().toISOString(), data: { status: 'failed' } }),
      ],
    );
    const admin = await newKey('admin');
    const path = `/v1/admin/webhooks/${endpoint.id}/deliveries/${deliveryId}/redeliver`;
    expect((await http(stack.apiUrl, 'GET', `/v1/admin/webhooks/${endpoint.id}`, { key: admin.key })).status).toBe(200);
    const redelivered = await writeDuringRevocation(stack.db.dataSource, admin.id, () =>
      http<Problem>(stack.apiUrl, 'POST', path, { key: admin.key }),
    );
    expectRevokedMidRequest(redelivered);
    const [row] = (await stack.db.dataSource.query(`SELECT status, round FROM webhook_deliveries WHERE id = $1`, [
      deliveryId,
    ])) as { status: string; round: number }[];
    expect(row).toEqual({ status: 'failed', round: 0 });
    // An admin whose key stands redelivers it.
    expect((await http(stack.apiUrl, 'POST', path, { key: DEMO.admin })).status).toBe(202);
  });
  it('a submission made as its key’s revocation commits is not accepted', async () => {
    const agent = await newKey('agent');
    expect((await http(stack.apiUrl, 'GET', '/v1/executions?limit=1', { key: agent.key })).status).toBe(200);
    const reference = unique('mid-submit');
    const submitted = await writeDuringRevocation(stack.db.dataSource, agent.id, () =>
      http<Problem>(stack.apiUrl, 'POST', '/v1/executions', {
        key: agent.key,
        body: { agent_id: 'mid-request', intent: 'a charge', operations: [charge(reference)] },
      }),
    );
    expectRevokedMidRequest(submitted);
    const written = (await stack.db.dataSource.query(
      `SELECT id FROM operations WHERE tenant_id = 'demo' AND params->>'reference' = $1`,
      [reference],
    )) as { id: string }[];
    expect(written).toEqual([]);
    // A key that stands submits it.
    expect((await submit(stack, [charge(reference)])).id).toMatch(/^exe_/);
  });
});
