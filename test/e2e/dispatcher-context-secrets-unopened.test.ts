import { Stack, waitFor } from '../support/stack';
import { submission } from '../support/http';
import {
  Call,
  Execution,
  Op,
  TargetServer,
  httpOp,
  recordingClient,
  startTarget,
  submitOps,
  allowLoopbackPort,
} from './connectors-support';

const SEALED_WITH = Buffer.alloc(32, 3).toString('base64');
const ANOTHER_KEY = Buffer.alloc(32, 4).toString('base64');
const SECRET = 'crm-token-of-a-rotated-key';
/** PRECONDITION_READ_BUDGET of the stack (test/support/stack.ts TEST_TIMINGS). */
const BUDGET = 6;

type Logged = { type: string; operation_id: string | null; to_status: string | null; data: Record<string, unknown> };

/**
 * A dispatcher whose SECRETS_KEY does not open the tenant's connector secrets (the key rotated on one process and not
 * the other). The secrets are opened where an advance job reads the execution with its tenant's settings, before any
 * context read and its own failure handling: every try of the preparation threw, and the execution sat in `created`,
 * retried, until its deadline — nothing recorded of why. Now the context read is a failed one under the rules of any
 * other (I15): an irreversible operation with an expected_state is not sent, its read is retried, and it is held
 * (SOURCE_UNREACHABLE) when the budget runs out, the reason in each failed read's event.
 */
describe('a context read, or a send, whose tenant secrets do not open with the dispatcher’s SECRETS_KEY', () => {
  let stack: Stack;
  let target: TargetServer;
  let call: Call;

  beforeAll(async () => {
    target = await startTarget();
    stack = await Stack.start({ label: 'ctxsecrets', env: { SECRETS_KEY: SEALED_WITH }, dispatchers: 0 });
    await stack.startApp('dispatcher', { SECRETS_KEY: ANOTHER_KEY });
    ({ call } = recordingClient(stack));
    await allowLoopbackPort(call, target.port, { secrets: { crm_token: SECRET } }, { secrets: ['crm_token'] });
  }, 60_000);
  afterAll(async () => {
    await stack?.stop();
    await target?.close();
  });

  it('is a failed read: the irreversible operation is not sent, its read retried, then held SOURCE_UNREACHABLE', async () => {
    target.setState('ctx-secret', 'open');
    const auth = { authorization: 'Bearer {{secret:crm_token}}' };
    const created = await submitOps(call, [
      httpOp(
        'order',
        {
          method: 'POST',
          url: `${target.base}/orders`,
          headers: auth,
          body: { id: '{{operation_id}}' },
          context: { url: `${target.base}/state/ctx-secret`, headers: auth, field: '$.data.value' },
        },
        { expected_state: { 'data.value': 'open' } },
      ),
    ]);
    const opId = created.operations[0].id;
    const held = await waitFor(
      async () => (await call<Op>('GET', `/v1/operations/${opId}`)).body,
      (op) => op.status !== 'PREPARED',
      60_000,
      200,
    );
    expect(held).toMatchObject({ status: 'MANUAL_REVIEW', terminal_reason: 'SOURCE_UNREACHABLE', attempt: 0 });
    expect(held.evidence).toMatchObject({ precondition: 'expected_state', failed_reads: BUDGET });
    // The execution left `created`: prepared, and waiting on the held operation.
    const execution = (await call<Execution>('GET', `/v1/executions/${created.id}`)).body;
    expect(execution.status).not.toBe('created');
    const log = (await call<{ data: Logged[] }>('GET', `/v1/executions/${created.id}/events`)).body.data;
    const failed = log.filter((e) => e.type === 'context.unavailable' && e.operation_id === opId);
    expect(failed).toHaveLength(BUDGET);
    // The reason, as far as it is named without a value: the error's class (the message says nothing more).
    for (const event of failed) {
      expect(event.data).toMatchObject({ evidence: { error: 'context read error: SecretUnreadableError' } });
    }
    // What the dispatcher held of the secret is its sealed value (it cannot open it): in no row this execution wrote,
    // as stored (the API's presenter redacts what it knows; the rows are what an export or a database reader sees).
    const [sealed] = (await stack.db.dataSource.query(
      `SELECT value FROM tenant_connector_secrets WHERE connector = 'http' AND name = 'crm_token'`,
    )) as { value: string }[];
    expect(sealed.value.length).toBeGreaterThan(16);
    const written = JSON.stringify(
      await stack.db.dataSource.query(
        `SELECT e.data, o.evidence, o.params, o.obligation FROM events e JOIN operations o ON o.execution_id = e.execution_id
         WHERE e.execution_id = $1`,
        [created.id],
      ),
    );
    expect(written).toContain('SecretUnreadableError');
    for (const kept of [sealed.value, SECRET]) expect(written).not.toContain(kept);
    expect(log.some((e) => e.operation_id === opId && e.to_status === 'SENT')).toBe(false);
    // Nothing reached the target: no read could be made without its secret, and nothing was sent.
    expect(target.seen).toHaveLength(0);
  }, 90_000);

  /**
   * A send whose tenant secrets do not open with the dispatcher's SECRETS_KEY (the key rotated on one process and not
   * the other). With no expected_state, no context read holds the operation back: the advance job reaches the send with
   * settings whose secrets it could not open. Handed those settings, the send would be built without the secret the
   * tenant set and recorded FAILED SOURCE_UNREACHABLE "secret … is not set" — a false record (the secret is set). The
   * send is not made until the key is fixed, and the history says why (once, however often the send is retried).
   */
  it('a send is never FAILED "secret not set" (it is set): nothing is sent until the key is fixed', async () => {
    target.setState('send-secret', 'open');
    const auth = { authorization: 'Bearer {{secret:crm_token}}' };
    const created = await call<Execution>('POST', '/v1/executions', {
      body: submission(
        [
          httpOp('order', {
            method: 'POST',
            url: `${target.base}/orders`,
            headers: auth,
            body: { id: '{{operation_id}}' },
            context: { url: `${target.base}/state/send-secret`, headers: auth, field: '$.data.value' },
          }),
        ],
        { deadline_seconds: 10 },
      ),
    });
    expect(created.status).toBe(201);
    const opId = created.body.operations[0].id;
    // The send is tried more than once (each try fails its job): the event below is still written once.
    const triesLogged = () => stack.logs('dispatcher').split('send not made: a secret does not open').length - 1;
    await waitFor(
      async () => triesLogged(),
      (tries) => tries >= 2,
      30_000,
      100,
    );
    const done = await waitFor(
      async () => (await call<Op>('GET', `/v1/operations/${opId}`)).body,
      (op) => !['PREPARED', 'PENDING'].includes(op.status),
      60_000,
      200,
    );
    const log = (await call<{ data: Logged[] }>('GET', `/v1/executions/${created.body.id}/events`)).body.data;
    expect(done.status).not.toBe('FAILED');
    expect(log.some((e) => e.operation_id === opId && e.to_status === 'SENT')).toBe(false);
    expect(target.seen).toHaveLength(0);
    // The wait is not silent: the history names the cause once (the error's class; every retry fails the same way).
    const unopened = log.filter((e) => e.operation_id === opId && e.type === 'send.secrets_unopened');
    expect(unopened).toHaveLength(1);
    expect(unopened[0].data).toEqual({ error: 'SecretUnreadableError', sent: false });
  }, 90_000);
});
