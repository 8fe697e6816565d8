import { createServer } from 'node:http';
import { Stack } from '../support/stack';
import { listenLocally, type LocalServer } from '../support/local-server';
import { Call, Execution, httpOp, recordingClient, settled, submitOps, allowLoopbackPort } from './connectors-support';

/** Nested arrays deeper than JSON.stringify (and any recursive walk) can follow, in well under 64 KiB. */
const DEEP = '['.repeat(20_000) + ']'.repeat(20_000);

/**
 * A target that answers its reads with well-formed JSON (under the 64 KiB read limit) whose field holds a value no
 * record can keep as written: nested 20 000 levels deep, or a number past a double's range (`1e400`, which JSON.parse
 * reads as Infinity and JSON writes as null). Such a field is not read — inconclusive, as a number a double keeps only
 * rounded already is — never a verdict. Before: the deep value threw a RangeError inside the connector (a context read
 * then failed its job again and again: the execution stayed `created`, the target asked ten times a second), and
 * `1e400` read back as `null`, VERIFIED an operation whose read-back expected `null`.
 */
describe('a target whose read answers a value no record can keep (deep nesting, a number past a double)', () => {
  let stack: Stack;
  let target: LocalServer;
  let call: Call;
  const reads: Record<string, number> = {};

  beforeAll(async () => {
    const server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        const path = (req.url ?? '').split('?')[0];
        reads[path] = (reads[path] ?? 0) + 1;
        const body =
          path === '/deep' ? `{"status":${DEEP}}` : path === '/overflow' ? '{"status":1e400}' : '{"id":"o1"}';
        res.writeHead(200, { 'content-type': 'application/json' }).end(body);
      });
    });
    target = await listenLocally(server);
    stack = await Stack.start({ label: 'answervalues' });
    ({ call } = recordingClient(stack));
    await allowLoopbackPort(call, target.port);
  });
  afterAll(async () => {
    await stack?.stop();
    await target?.close();
  });

  const order = (extra: Record<string, unknown>) =>
    httpOp('order', { method: 'POST', url: `${target.url}/orders`, body: { item: 'book' }, ...extra });
  const evidenceOf = (execution: Execution) => JSON.stringify(execution.operations[0].evidence);

  it('a read-back answering a field nested 20 000 levels deep: held, the evidence saying why (no RangeError)', async () => {
    const submitted = await submitOps(call, [
      order({ read_back: { url: `${target.url}/deep`, field: 'status', equals: 'created' } }),
    ]);
    const done = await settled(call, submitted.id);
    expect(done.operations[0].status).toBe('MANUAL_REVIEW');
    expect(evidenceOf(done)).toContain('nests deeper than 64 levels');
    expect(evidenceOf(done)).not.toContain('RangeError');
  }, 90_000);

  it('a context read answering a field nested 20 000 levels deep: the execution goes on, the read is not repeated', async () => {
    const before = reads['/deep'] ?? 0;
    const submitted = await submitOps(call, [
      order({ context: { url: `${target.url}/deep`, field: 'status', equals: 'created' } }),
    ]);
    const done = await settled(call, submitted.id);
    expect(done.status).not.toBe('created');
    // One read when the execution is prepared (and at most the dispatch's own): not a job failing and retrying.
    expect((reads['/deep'] ?? 0) - before).toBeLessThanOrEqual(2);
  }, 90_000);

  it('a read-back expecting null, answered 1e400 (read as Infinity): never VERIFIED, the evidence naming the number', async () => {
    const submitted = await submitOps(call, [
      order({ read_back: { url: `${target.url}/overflow`, field: 'status', equals: null } }),
    ]);
    const done = await settled(call, submitted.id);
    expect(done.operations[0].status).toBe('MANUAL_REVIEW');
    expect(evidenceOf(done)).toContain('a double cannot keep');
  }, 90_000);
});
