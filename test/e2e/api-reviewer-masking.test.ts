import { DEMO, Stack, waitFor } from '../support/stack';
import { http, sms, submission, unique } from '../support/http';
import type { Execution } from './dispatcher-helpers';
import { openStream } from './api-sse';

// A credential an agent wrote into what it submitted (not one of the tenant's secrets, which intake refuses).
const CREDENTIAL = 'sk_live_Qw3rTy9Zx';

/**
 * A reviewer judges whether an effect happened and never needs a credential to do it: what an agent wrote or a
 * provider answered reaches a reviewer's key masked, through every read — the execution, the list, the operation, the
 * event log and the live stream — as the review console shows it. The agent reads what it wrote.
 */
describe('what a reviewer reads is masked', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'reviewermask' });
  }, 60_000);
  afterAll(async () => stack?.stop());

  const read = (path: string, key: string) => http(stack.apiUrl, 'GET', path, { key });

  it('the execution, the list, the operation, the events and the stream: masked for the reviewer, as written for the agent', async () => {
    const created = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission(
        [
          sms(unique('mask'), {
            requires_approval: true,
            params: { to: '+15550100', body: `Authorization: Bearer ${CREDENTIAL}` },
          }),
        ],
        { intent: `notify with Bearer ${CREDENTIAL}` },
      ),
    });
    expect(created.status).toBe(201);
    const { id } = created.body;
    const opId = created.body.operations[0].id;
    await waitFor(
      () => read(`/v1/executions/${id}/events`, DEMO.agent),
      (r) => r.text.includes('approval.requested'),
    );
    const cancelled = await http(stack.apiUrl, 'POST', `/v1/executions/${id}/cancel`, {
      key: DEMO.agent,
      body: { reason: `rotating Bearer ${CREDENTIAL}` },
    });
    expect(cancelled.status).toBe(200);

    const paths = [`/v1/executions/${id}`, '/v1/executions', `/v1/operations/${opId}`, `/v1/executions/${id}/events`];
    for (const path of paths) {
      const agent = await read(path, DEMO.agent);
      const reviewer = await read(path, DEMO.reviewer);
      expect({ path, statuses: [agent.status, reviewer.status] }).toEqual({ path, statuses: [200, 200] });
      expect({ path, agentSees: agent.text.includes(CREDENTIAL) }).toEqual({ path, agentSees: true });
      expect({ path, reviewerSees: reviewer.text.includes(CREDENTIAL) }).toEqual({ path, reviewerSees: false });
      expect(reviewer.text).toContain('Bearer ••••••');
    }
    // Only the masked fields differ: the reviewer's execution is the agent's with those values replaced.
    const asAgent = (await read(`/v1/executions/${id}`, DEMO.agent)).text;
    expect((await read(`/v1/executions/${id}`, DEMO.reviewer)).text).toBe(asAgent.split(CREDENTIAL).join('••••••'));

    const stream = await openStream(`${stack.apiUrl}/v1/executions/${id}/stream`, DEMO.reviewer);
    expect(stream.status).toBe(200);
    const frames = await stream.waitFor((f) => f.some((frame) => frame.event === 'end'), 30_000);
    stream.abort();
    const sent = frames.map((frame) => frame.data).join('\n');
    expect(sent).toContain('rotating Bearer ••••••');
    expect(sent).not.toContain(CREDENTIAL);
  });
});
