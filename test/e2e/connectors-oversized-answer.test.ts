import { DEMO, Stack } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import type { LocalServer } from '../support/local-server';
import { stackBehindProxy } from '../support/provider-proxy';
import type { Execution } from '@verity/sdk';
import { ended } from './dispatcher-helpers';

/** Past the connectors' 64 KiB limit on what they read of an answer. */
const OVERSIZED = JSON.stringify({ id: 'ch_oversized', padding: 'x'.repeat(100 * 1024) });

/**
 * The payment provider takes the charge (the request reaches it and it charges), and the answer the dispatcher gets
 * says it replays an earlier request's charge, in a body larger than a connector reads. Before: the cut body was read
 * as no charge at all, its amount unlike this request's — FAILED "no charge was made for it", while the provider
 * held the charge. Whose charge a replay cut at the limit names is unknown: the outcome is UNKNOWN, and the read-back
 * finds the charge (VERIFIED). (A 2xx cut at the limit that is not a replay is ACKNOWLEDGED, with no reference.)
 */
describe('a provider whose answer to a send is larger than a connector reads', () => {
  let stack: Stack;
  let proxy: LocalServer;

  beforeAll(async () => {
    // The dispatcher sends through this; the reconciler reads the provider directly.
    ({ stack, proxy } = await stackBehindProxy({ label: 'oversizedanswer' }, 'dispatcher', {
      rewrite: (req, answer) =>
        req.method === 'POST' && answer.status >= 200 && answer.status < 300
          ? {
              status: answer.status,
              headers: { 'content-type': 'application/json', 'idempotent-replayed': 'true' },
              body: OVERSIZED,
            }
          : answer,
    }));
  });
  afterAll(async () => {
    await stack?.stop();
    await proxy?.close();
  });

  it('is an unknown outcome the read-back settles (VERIFIED), never FAILED: the provider made the charge', async () => {
    const reference = unique('oversized');
    const created = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(reference)]),
    });
    expect(created.status).toBe(201);
    const done = await ended(stack, created.body.id, 60_000);
    expect((await stack.effects()).charges[reference].count).toBe(1);
    expect(done.operations[0].status).toBe('VERIFIED');
    const [row] = (await stack.db.dataSource.query(
      `SELECT data FROM events WHERE operation_id = $1 AND to_status = 'UNKNOWN'`,
      [done.operations[0].id],
    )) as { data: unknown }[];
    expect(JSON.stringify(row?.data)).toContain('larger than the connector reads');
  }, 90_000);
});
