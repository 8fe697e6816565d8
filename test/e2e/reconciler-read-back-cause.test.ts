import { Stack, waitFor } from '../support/stack';
import {
  Call,
  Op,
  TargetServer,
  httpOp,
  recordingClient,
  startTarget,
  submitOps,
  allowLoopbackPort,
} from './connectors-support';

const SEALED_WITH = Buffer.alloc(32, 1).toString('base64');
const ANOTHER_KEY = Buffer.alloc(32, 2).toString('base64');
const SECRET = 'crm-token-never-in-evidence';

/**
 * A read-back that throws — here because the reconciler's SECRETS_KEY does not open the tenant's secrets (a key rotated
 * on one process and not the other) — leaves the source unread. The evidence a reviewer gets with the held operation
 * said only "read-back error": the same words for a provider that is down as for a key to fix. It now names the cause
 * as far as it can be named without a value: the error's class and code.
 */
describe('a read-back that throws: the evidence says why', () => {
  let stack: Stack;
  let target: TargetServer;
  let call: Call;

  beforeAll(async () => {
    target = await startTarget();
    stack = await Stack.start({ label: 'readbackcause', env: { SECRETS_KEY: SEALED_WITH }, reconcilers: 0 });
    await stack.startApp('reconciler', { SECRETS_KEY: ANOTHER_KEY });
    ({ call } = recordingClient(stack));
    await allowLoopbackPort(call, target.port, { secrets: { crm_token: SECRET } }, { secrets: ['crm_token'] });
  });
  afterAll(async () => {
    await stack?.stop();
    await target?.close();
  });

  it('held after reads the reconciler could not make: evidence "read-back error: SecretUnreadableError"', async () => {
    // Acknowledged (201), but the record is filed under another id: the dispatcher's read at send finds nothing, and
    // the reads after it are the reconciler's.
    const execution = await submitOps(call, [
      httpOp('order', {
        method: 'POST',
        url: `${target.base}/orders`,
        headers: { authorization: 'Bearer {{secret:crm_token}}' },
        body: { id: 'filed-elsewhere' },
        read_back: { method: 'GET', url: `${target.base}/orders/{{operation_id}}`, field: 'data.status', equals: 'x' },
      }),
    ]);
    const id = execution.operations[0].id;
    const held = await waitFor(
      async () => (await call<Op>('GET', `/v1/operations/${id}`)).body,
      (op) => op.status === 'MANUAL_REVIEW' || op.status === 'VERIFIED' || op.status === 'FAILED',
      60_000,
      200,
    );
    expect(held.status).toBe('MANUAL_REVIEW');
    expect(held.evidence).toMatchObject({ error: 'read-back error: SecretUnreadableError' });
    // The class only: neither the secret nor the error's message ("… does not open with this SECRETS_KEY").
    const shown = JSON.stringify(held);
    expect(shown).not.toContain(SECRET);
    expect(shown).not.toContain('does not open');
    // Nothing was read from the source by the reconciler: the one GET is the dispatcher's read at send.
    expect(target.seen.filter((s) => s.method === 'GET')).toHaveLength(1);
  }, 90_000);
});
