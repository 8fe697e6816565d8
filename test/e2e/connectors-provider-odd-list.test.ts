import { DEMO, Stack } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import type { LocalServer } from '../support/local-server';
import { stackBehindProxy } from '../support/provider-proxy';
import type { Execution } from '@verity/sdk';
import { ended } from './dispatcher-helpers';

/**
 * The payment provider's read side answers 200 with a charge list whose entries are no charges (`null`, a number): the
 * dispatcher reads it as a charge's context before anything is sent. That read shows nothing — unread, as a body that
 * is no JSON is — and the execution goes on. Before: the connector threw a TypeError on `null.reference`, the job that
 * prepares the execution failed, and every retry and sweep read again and failed again: the execution stayed `created`
 * until its deadline, asking the provider several times a second.
 */
const JSON_TYPE = { 'content-type': 'application/json' };

describe('a provider whose charge list holds entries that are no charges', () => {
  let stack: Stack;
  let proxy: LocalServer;
  let oddReads = 0;

  beforeAll(async () => {
    // The dispatcher talks to the provider through this: its reads get the odd list, its sends go through unchanged.
    ({ stack, proxy } = await stackBehindProxy({ label: 'oddchargelist' }, 'dispatcher', {
      answer: (req) => {
        if (req.method !== 'GET' || !(req.url ?? '').startsWith('/v1/charges')) return undefined;
        oddReads += 1;
        return { status: 200, headers: JSON_TYPE, body: '{"data":[null,7],"as_of_version":1}' };
      },
    }));
  });
  afterAll(async () => {
    await stack?.stop();
    await proxy?.close();
  });

  it('reads it as unread: the charge is prepared and sent once, and the read is not repeated by failing jobs', async () => {
    const reference = unique('oddlist');
    const created = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(reference)]),
    });
    expect(created.status).toBe(201);
    const done = await ended(stack, created.body.id);
    expect(done.operations[0].status).toBe('VERIFIED');
    expect((await stack.effects()).charges[reference].count).toBe(1);
    // The context read when it was prepared and the read-back right after the send (the reconciler reads the provider
    // directly): no job failing and reading again.
    expect(oddReads).toBeLessThanOrEqual(2);
  }, 90_000);
});
