import { DEMO, Stack } from '../support/stack';
import { http, sms, submission, unique } from '../support/http';
import type { LocalServer } from '../support/local-server';
import { stackBehindProxy } from '../support/provider-proxy';
import type { Execution } from '@verity/sdk';
import { ended } from './dispatcher-helpers';

/** Nested arrays deeper than JSON.stringify (and Postgres's jsonb parser) can follow, in well under 64 KiB. */
const DEEP = '['.repeat(20_000) + ']'.repeat(20_000);

/**
 * The SMS provider takes a message (its 201 is the acceptance) and names it with an id no record can keep: nested
 * 20 000 levels deep. The acceptance is recorded — ACKNOWLEDGED, once — and the id kept cut where it nests too deep.
 * Before: the walks of the connector's result threw, and the accepted message was held as an unknown outcome
 * (MANUAL_REVIEW: an SMS cannot be read back).
 */
describe('a provider whose answer to a send names its record with a value no record can keep', () => {
  let stack: Stack;
  let proxy: LocalServer;

  beforeAll(async () => {
    // The dispatcher sends through this: the message reaches the provider, its answer's id is replaced. It waits 10 s
    // for the answer: the stack's 1 s connector timeout was outlasted on a loaded machine by the way there and back
    // (this test's proxy, then the sandbox provider), and the send was then rightly held as an unknown outcome
    // (ETIMEDOUT, MANUAL_REVIEW) — before the answer this test is about was ever read.
    const env = { CONNECTOR_TIMEOUT_MS: '10000' };
    ({ stack, proxy } = await stackBehindProxy({ label: 'oddproviderref', env }, 'dispatcher', {
      rewrite: (req, answer) =>
        req.method === 'POST' && answer.status >= 200 && answer.status < 300
          ? { ...answer, headers: { 'content-type': 'application/json' }, body: `{"id":${DEEP}}` }
          : { ...answer, headers: { 'content-type': 'application/json' } },
    }));
  });
  afterAll(async () => {
    await stack?.stop();
    await proxy?.close();
  });

  it('records the acceptance (ACKNOWLEDGED, sent once), the id cut at 100 levels', async () => {
    const clientRef = unique('oddref');
    const created = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([sms(clientRef)]),
    });
    expect(created.status).toBe(201);
    const done = await ended(stack, created.body.id);
    expect(done.operations[0].status).toBe('ACKNOWLEDGED');
    expect((await stack.effects()).messages[clientRef].count).toBe(1);
    const [row] = (await stack.db.dataSource.query('SELECT provider_ref FROM operations WHERE id = $1', [
      done.operations[0].id,
    ])) as { provider_ref: unknown }[];
    expect(JSON.stringify(row.provider_ref)).toContain('{"verity:cut":"deeper than 100 levels"}');
  }, 90_000);
});
