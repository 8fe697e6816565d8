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

  /** One of the API's own counters, as its metrics show it now. */
  async function counted(name: string): Promise<number> {
    const text = await (
      await fetch(`${stack.apiUrl}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })
    ).text();
    const line = text.split('\n').find((l) => l.startsWith(`${name} `));
    return Number(line?.slice(line.lastIndexOf(' ') + 1) ?? 0);
  }
  const verdictReads = () => counted('verity_stream_verdict_reads_total');

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

  /** A charge that asks for approval, submitted and waited for until its execution waits for that approval. */
  async function waitingForApproval(name: string): Promise<string> {
    const created = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique(name), { requires_approval: true })]),
    });
    expect(created.status).toBe(201);
    const id = created.body.id;
    await waitFor(
      () => http<Execution>(stack.apiUrl, 'GET', `/v1/executions/${id}`, { key: DEMO.agent }),
      (r) => r.body.status === 'waiting_for_approval',
      30_000,
    );
    return id;
  }

  it('does not read after pages that cannot end it, and ends on the page whose only such event is the cancel', async () => {
    const id = await waitingForApproval('reads');
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

  it('ends on a move to a terminal status sent in a full page that more pages without one follow', async () => {
    const id = await waitingForApproval('full');
    const publisher = new IORedis(TEST_REDIS_URL);
    try {
      const before = await verdictReads();
      const stream = await openStream(`${stack.apiUrl}/v1/executions/${id}/stream`, DEMO.agent);
      expect(stream.status).toBe(200);
      // Its first pass has read the execution waiting for the approval.
      await waitFor(verdictReads, (reads) => reads > before, 15_000);
      // One commit, read by the stream in one pass of pages of 500: the cancel (its operation's move and the
      // execution's) lands in the first page, and 600 events that cannot end anything follow it.
      const lastId = await stack.db.dataSource.transaction(async (tx) => {
        const [row] = (await tx.query(`SELECT event_seq::int AS seq FROM executions WHERE id = $1 FOR UPDATE`, [
          id,
        ])) as { seq: number }[];
        const [op] = (await tx.query(`SELECT id, status FROM operations WHERE execution_id = $1 FOR UPDATE`, [id])) as {
          id: string;
          status: string;
        }[];
        await tx.query(`UPDATE operations SET status = 'CANCELLED', updated_at = clock_timestamp() WHERE id = $1`, [
          op.id,
        ]);
        await tx.query(`UPDATE executions SET status = 'cancelled' WHERE id = $1`, [id]);
        const tag = unique('full').replace(/[^a-z0-9]/gi, '');
        let seq = row.seq;
        const insert = async (type: string, operationId: string | null, from: string | null, to: string | null) => {
          seq += 1;
          const eventId = `evt_full${seq}${tag}`;
          await tx.query(
            `INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, from_status, to_status, data)
             VALUES ($1, $2, 'demo', $3::int, $4, $5, $6, $7, '{}'::jsonb)`,
            [eventId, id, seq, operationId, type, from, to],
          );
          return eventId;
        };
        await insert('operation.status_changed', op.id, op.status, 'CANCELLED');
        await insert('execution.status_changed', null, 'waiting_for_approval', 'cancelled');
        let eventId = '';
        for (let i = 0; i < 600; i += 1) eventId = await insert('operation.rechecked', op.id, null, null);
        await tx.query(`UPDATE executions SET event_seq = $2::int WHERE id = $1`, [id, seq]);
        return eventId;
      });
      await publisher.publish(eventsChannel(stack.prefix), id);
      const frames = await stream.waitFor((all) => all.some((f) => f.event === 'end'), 30_000);
      expect(frames.some((f) => f.id === lastId)).toBe(true);
      expect(frames[frames.length - 1]).toMatchObject({ event: 'end' });
      expect(JSON.parse(frames[frames.length - 1].data)).toEqual({ reason: 'settled' });
    } finally {
      publisher.disconnect();
    }
  });

  it("confirms the tenant's secrets are current once for the stream, not again for each page it sends", async () => {
    // Each page is redacted with the tenant's secret values kept by the process; that none of them changed before the
    // stream was asked for is confirmed by one round trip on the LISTEN connection. A change after that drops what was
    // kept (its NOTIFY), and the next page reads the values again: no page needs a round trip of its own.
    const id = await waitingForApproval('fresh');
    const publisher = new IORedis(TEST_REDIS_URL);
    try {
      const roundTrips = () => counted('verity_secrets_freshness_round_trips_total');
      const before = await roundTrips();
      const stream = await openStream(`${stack.apiUrl}/v1/executions/${id}/stream`, DEMO.agent);
      expect(stream.status).toBe(200);
      for (let i = 0; i < 5; i += 1) {
        const eventId = await appendEvent(id);
        await publisher.publish(eventsChannel(stack.prefix), id);
        await stream.waitFor((frames) => frames.some((f) => f.id === eventId), 15_000);
      }
      // Six answers (the 200 and five pages of events): one round trip at most (none when nothing was kept yet).
      expect((await roundTrips()) - before).toBeLessThanOrEqual(1);
      stream.abort();
    } finally {
      publisher.disconnect();
    }
  });
});
