import { Stack } from '../support/stack';
import { submission } from '../support/http';
import {
  Execution,
  TargetServer,
  httpOp,
  recordingClient,
  settled,
  startTarget,
  allowLoopbackPort,
} from './connectors-support';

/**
 * A quiet preparation's moves are written with its one send (the SENT statement): the deadline, judged before the
 * step, is judged again after the context read (a network call) — passed meanwhile, nothing is sent and the execution
 * expires, as it did when the moves were a statement of their own and the next step judged it.
 */
describe('dispatcher: the deadline passes during the context read of a quiet preparation', () => {
  let stack: Stack;
  let target: TargetServer;
  beforeAll(async () => {
    target = await startTarget();
    // No sweep in the test's time: the expiry must come from the advance job's own look, not the sweeper's.
    stack = await Stack.start({
      label: 'deadlineprep',
      env: { SEND_IN_ADVANCE: 'true', CONNECTOR_TIMEOUT_MS: '5000', SWEEP_INTERVAL_MS: '60000' },
    });
    const { call } = recordingClient(stack);
    await allowLoopbackPort(call, target.port);
  });
  afterAll(async () => {
    await stack?.stop();
    await target?.close();
  });

  it('sends nothing: the operation is cancelled and the execution expires', async () => {
    const { call } = recordingClient(stack);
    const name = `deadline-${Date.now()}`;
    // The context read answers after 1.5 s; the execution's deadline is 1 s.
    target.setState(name, 'ready', 1500);
    const created = await call<Execution>('POST', '/v1/executions', {
      body: submission(
        [
          httpOp('late', {
            method: 'POST',
            url: `${target.base}/orders`,
            body: { id: '{{operation_id}}', item: 'book' },
            context: { url: `${target.base}/state/${name}`, field: '$.data.value' },
          }),
        ],
        { deadline_seconds: 1 },
      ),
    });
    expect(created.status).toBe(201);
    const done = await settled(call, created.body.id);
    expect(done.status).toBe('expired');
    expect(done.operations[0]).toMatchObject({ status: 'CANCELLED', attempt: 0 });
    const events = (
      await call<{ data: { operation_id: string | null; to_status: string | null }[] }>(
        'GET',
        `/v1/executions/${created.body.id}/events`,
      )
    ).body.data;
    expect(events.filter((e) => e.to_status === 'SENT')).toEqual([]);
    // Nothing reached the target but the context read (a POST could only follow a SENT).
    expect(target.seen.filter((s) => s.method === 'POST')).toEqual([]);
  });
});
