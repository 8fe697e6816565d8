import IORedis from 'ioredis';
import { eventsChannel } from '@verity/queues';
import { TEST_REDIS_URL } from '../support/services';
import { DEMO, METRICS_TOKEN, Stack, waitFor } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import { openStream } from './api-sse';
import type { Execution } from '@verity/sdk';

/**
 * A stream reads the execution (whether it ends) only after a page of events that may change that: while the
 * execution is not terminal, only its move to a terminal status can. Counted by the API's own metric.
 */
describe('the reads of an execution by its stream', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'streamreads' });
  });
  afterAll(async () => stack?.stop());

  async function verdictReads(): Promise<number> {
    const text = await (
      await fetch(`${stack.apiUrl}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })
    ).text();
    const line = text.split('\n').find((l) => l.startsWith('verity_stream_verdict_reads_total '));
    return Number(line?.slice(line.lastIndexOf(' ') + 1) ?? 0);
  }

  /** An event no automatic step writes to an execution waiting for an approval, appended as a writer would. */
  async function appendEvent(executionId: string): Promise<string> {
    return stack.db.dataSource.transaction(async (tx) => {
      const [row] = (await tx.query(`SELECT event_seq::int AS seq FROM executions WHERE id = $1 FOR UPDATE`, [
        executionId,
      ])) as { seq: number }[];
      const id = `evt_reads${row.seq + 1}${unique('x').replace(/[^a-z0-9]/gi, '')}`;
      await tx.query(
        `INSERT INTO events (id, execution_id, tenant_id, seq, type, data)
         VALUES ($1, $2, 'demo', $3::int, 'operation.rechecked', '{}'::jsonb)`,
        [id, executionId, row.seq + 1],
      );
      await tx.query(`UPDATE executions SET event_seq = event_seq + 1 WHERE id = $1`, [executionId]);
      return id;
    });
  }

  it('does not read after pages that cannot end it, and ends on the page whose only such event is the cancel', async () => {
    const created = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('reads'), { requires_approval: true })]),
    });
    expect(created.status).toBe(201);
    const id = created.body.id;
    await waitFor(
      () => http<Execution>(stack.apiUrl, 'GET', `/v1/executions/${id}`, { key: DEMO.agent }),
      (r) => r.body.status === 'waiting_for_approval',
      30_000,
    );
    const publisher = new IORedis(TEST_REDIS_URL);
    try {
      const before = await verdictReads();
      const stream = await openStream(`${stack.apiUrl}/v1/executions/${id}/stream`, DEMO.agent);
      expect(stream.status).toBe(200);
      // Five commits, each announced and sent on a pass of its own: none can end the stream.
      for (let i = 0; i < 5; i += 1) {
        const eventId = await appendEvent(id);
        await publisher.publish(eventsChannel(stack.prefix), id);
        await stream.waitFor((frames) => frames.some((f) => f.id === eventId), 15_000);
      }
      // The first pass' read only (each later pass began after the one before it had read, when it did).
      expect((await verdictReads()) - before).toBe(1);

      // The cancel's move to a terminal status is what makes the stream read again, and end.
      expect((await http(stack.apiUrl, 'POST', `/v1/executions/${id}/cancel`, { key: DEMO.agent })).status).toBe(200);
      const frames = await stream.waitFor((all) => all.some((f) => f.event === 'end'), 30_000);
      expect(frames[frames.length - 1]).toMatchObject({ event: 'end' });
      expect(JSON.parse(frames[frames.length - 1].data)).toEqual({ reason: 'settled' });
      expect((await verdictReads()) - before).toBeGreaterThan(1);
    } finally {
      publisher.disconnect();
    }
  });
});
