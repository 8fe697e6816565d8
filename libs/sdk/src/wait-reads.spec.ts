import { createServer, ServerResponse } from 'node:http';
import { Verity } from './client';
import type { Execution, ExecutionEvent } from './types';
import { closedAfterEachTest, listenLocally, waitUntil } from '../../../test/support/local-server';

const KEY = 'sk-test-secret-key-789';
const closeAfterTest = closedAfterEachTest();

function execution(status: string, opStatus: string, extra: Partial<Execution> = {}): Execution {
  return {
    id: 'exe_1',
    status,
    criteria: [],
    criteria_results: null,
    operations: [
      {
        id: 'op_1',
        key: 'charge',
        status: opStatus,
        verification_method: 'read_after_write',
        evidence: null,
        failure: null,
      },
    ],
    ...extra,
  } as unknown as Execution;
}

/** A charge with a criterion on it, its stored verdict `verdict`: `pending` is owed a pass once the charge is VERIFIED. */
function withCriterion(status: string, opStatus: string, verdict: 'pending' | 'pass'): Execution {
  return execution(status, opStatus, {
    criteria: [{ key: 'charged', operation: 'charge', expect_status: 'VERIFIED' }],
    criteria_results: [
      {
        key: 'charged',
        operation: 'charge',
        expect_status: 'VERIFIED',
        verdict,
        rationale: 'x',
        evidence_event_ids: [],
      },
    ],
  } as unknown as Partial<Execution>);
}

/**
 * One execution behind a real HTTP server, as the API serves it: GET answers the state as it is now; the stream (from
 * its start) carries each event the test tells, after the state it leads to is in place (as a commit precedes its
 * notification). Counts the GETs of the execution (not of its log).
 */
async function scriptedExecution(initial: Execution) {
  let state = initial;
  let seq = 0;
  let gets = 0;
  const streams = new Set<ServerResponse>();
  const connected: (() => void)[] = [];
  const server = await listenLocally(
    createServer((req, res) => {
      if (req.url!.endsWith('/stream')) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('retry: 10\n\n');
        streams.add(res);
        res.on('close', () => streams.delete(res));
        connected.splice(0).forEach((resolve) => resolve());
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      // The log after the last event streamed (what a wait hands `onEvent` when its read is ahead): all was streamed.
      if (req.url!.includes('/events')) return res.end(JSON.stringify({ data: [], next_cursor: null }));
      gets += 1;
      res.end(JSON.stringify(state));
    }),
  );
  closeAfterTest(server);
  return {
    url: server.url,
    gets: () => gets,
    connected: () => new Promise<void>((resolve) => (streams.size > 0 ? resolve() : connected.push(resolve))),
    tell(type: string, toStatus: string | null, next: Execution = state) {
      state = next;
      seq += 1;
      const event = {
        id: `evt_${seq}`,
        seq,
        execution_id: 'exe_1',
        operation_id: type.startsWith('operation.') ? 'op_1' : null,
        type,
        from_status: null,
        to_status: toStatus,
        data: {},
      };
      for (const res of streams) res.write(`id: ${event.id}\nevent: ${type}\ndata: ${JSON.stringify(event)}\n\n`);
    },
  };
}

/** A wait for exe_1 to settle (10 s at most; `onEvent` if given) on scriptedExecution(initial), its stream connected. */
async function waitingOn(initial: Execution, onEvent?: (event: ExecutionEvent) => void) {
  const api = await scriptedExecution(initial);
  const waiting = new Verity({ baseUrl: api.url, apiKey: KEY }).waitForSettled('exe_1', { timeoutMs: 10_000, onEvent });
  await api.connected();
  return { api, waiting };
}

describe('waitForSettled reads only after an event that can settle the execution', () => {
  it('reads once after the first: at the execution reaching a terminal status, none for the steps before it', async () => {
    const seen: ExecutionEvent[] = [];
    const { api, waiting } = await waitingOn(execution('created', 'PREPARED'), (e) => seen.push(e));
    api.tell('execution.created', 'created');
    api.tell('execution.status_changed', 'running', execution('running', 'PREPARED'));
    api.tell('operation.status_changed', 'SENT', execution('running', 'SENT'));
    api.tell('operation.status_changed', 'ACKNOWLEDGED', execution('running', 'ACKNOWLEDGED'));
    // Settled as an operation, not yet as an execution: nothing to read for.
    api.tell('operation.status_changed', 'VERIFIED', execution('running', 'VERIFIED'));
    api.tell('execution.status_changed', 'validating_output', execution('validating_output', 'VERIFIED'));
    await waitUntil(() => seen.length === 6);
    // Every event so far was taken (each read comes before the next event is), and none of them was read after.
    expect(api.gets()).toBe(1);

    api.tell('execution.status_changed', 'completed', execution('completed', 'VERIFIED'));
    const settled = await waiting;
    expect(settled.status).toBe('completed');
    expect(api.gets()).toBe(2);
  });

  it('does not miss an operation that settles after the execution ended: its event is the one read after', async () => {
    const seen: ExecutionEvent[] = [];
    const { api, waiting } = await waitingOn(execution('running', 'SENT'), (e) => seen.push(e));
    api.tell('execution.created', 'created');
    api.tell('execution.status_changed', 'running');
    api.tell('operation.status_changed', 'SENT');
    api.tell('operation.status_changed', 'UNKNOWN', execution('running', 'UNKNOWN'));
    // Cancelled around a charge nobody can vouch for: terminal, not settled (the reconciler will read the source).
    api.tell('execution.status_changed', 'cancelled', execution('cancelled', 'UNKNOWN'));
    await waitUntil(() => api.gets() >= 2);
    api.tell('operation.status_changed', 'RECONCILING', execution('cancelled', 'RECONCILING'));
    await waitUntil(() => seen.some((e) => e.to_status === 'RECONCILING'));
    api.tell('operation.status_changed', 'VERIFIED', execution('cancelled', 'VERIFIED'));
    const settled = await waiting;
    expect(settled.operations[0].status).toBe('VERIFIED');
    expect(api.gets()).toBe(3);
  });

  it('does not miss the evaluation of the criteria owed after the last change: outcome.evaluated is read after', async () => {
    const { api, waiting } = await waitingOn(withCriterion('running', 'VERIFIED', 'pending'));
    api.tell('execution.created', 'created');
    api.tell('operation.status_changed', 'VERIFIED');
    // Terminal with every operation settled, and still owed the pass the criterion gives now: not settled yet.
    api.tell('execution.status_changed', 'cancelled', withCriterion('cancelled', 'VERIFIED', 'pending'));
    await waitUntil(() => api.gets() >= 2);
    api.tell('outcome.evaluated', null, withCriterion('cancelled', 'VERIFIED', 'pass'));
    const settled = await waiting;
    expect(settled.criteria_results?.[0].verdict).toBe('pass');
    expect(api.gets()).toBe(3);
  });

  it('reads after every status event while the stream has told no execution status (or one this SDK does not know)', async () => {
    const { api, waiting } = await waitingOn(execution('running', 'SENT'));
    // A stream resumed past its start: the operation's event is the one that tells the change.
    api.tell('operation.status_changed', 'MANUAL_REVIEW', execution('completed', 'MANUAL_REVIEW'));
    expect((await waiting).operations[0].status).toBe('MANUAL_REVIEW');
    expect(api.gets()).toBe(2);
  });
});
