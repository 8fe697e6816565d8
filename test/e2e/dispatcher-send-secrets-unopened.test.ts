import { DEMO, Stack, waitFor } from '../support/stack';
import { submission } from '../support/http';
import { Call, Execution, Op, TargetServer, httpOp, recordingClient, startTarget } from './connectors-support';

const SEALED_WITH = Buffer.alloc(32, 3).toString('base64');
const ANOTHER_KEY = Buffer.alloc(32, 4).toString('base64');

type Logged = { type: string; operation_id: string | null; to_status: string | null; data: Record<string, unknown> };

/**
 * A send whose tenant secrets do not open with the dispatcher's SECRETS_KEY (the key rotated on one process and not
 * the other). With no expected_state, no context read holds the operation back: the advance job reaches the send with
 * settings whose secrets it could not open. Handed those settings, the send would be built without the secret the
 * tenant set and recorded FAILED SOURCE_UNREACHABLE "secret … is not set" — a false record (the secret is set). The
 * send is not made until the key is fixed, and the history says why (once, however often the send is retried).
 */
describe('a send whose tenant secrets do not open with the dispatcher’s SECRETS_KEY', () => {
  let stack: Stack;
  let target: TargetServer;
  let call: Call;

  beforeAll(async () => {
    target = await startTarget();
    stack = await Stack.start({ label: 'sendsecrets', env: { SECRETS_KEY: SEALED_WITH }, dispatchers: 0 });
    await stack.startApp('dispatcher', { SECRETS_KEY: ANOTHER_KEY });
    ({ call } = recordingClient(stack));
    const put = await call('PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: {
        allow_hosts: [{ host: '127.0.0.1', ports: [target.port], allow_private: true, secrets: ['crm_token'] }],
        secrets: { crm_token: 'the-secret' },
      },
    });
    expect(put.status).toBe(200);
  }, 60_000);
  afterAll(async () => {
    await stack?.stop();
    await target?.close();
  });

  it('is never FAILED "secret not set" (it is set): nothing is sent until the key is fixed', async () => {
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
