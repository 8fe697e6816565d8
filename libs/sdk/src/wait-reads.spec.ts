import { createServer, ServerResponse } from 'node:http';
import { Verity } from './client';
import type { Execution, ExecutionEvent } from './types';
import { VerityConditionError, VerityError, VerityTimeoutError } from './errors';
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
  it('reads once: at the execution reaching a terminal status, none for the steps before it', async () => {
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
    expect(api.gets()).toBe(0);

    api.tell('execution.status_changed', 'completed', execution('completed', 'VERIFIED'));
    const settled = await waiting;
    expect(settled.status).toBe('completed');
    expect(api.gets()).toBe(1);
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
    await waitUntil(() => api.gets() >= 1);
    api.tell('operation.status_changed', 'RECONCILING', execution('cancelled', 'RECONCILING'));
    await waitUntil(() => seen.some((e) => e.to_status === 'RECONCILING'));
    api.tell('operation.status_changed', 'VERIFIED', execution('cancelled', 'VERIFIED'));
    const settled = await waiting;
    expect(settled.operations[0].status).toBe('VERIFIED');
    expect(api.gets()).toBe(2);
  });

  it('does not miss the evaluation of the criteria owed after the last change: outcome.evaluated is read after', async () => {
    const { api, waiting } = await waitingOn(withCriterion('running', 'VERIFIED', 'pending'));
    api.tell('execution.created', 'created');
    api.tell('operation.status_changed', 'VERIFIED');
    // Terminal with every operation settled, and still owed the pass the criterion gives now: not settled yet.
    api.tell('execution.status_changed', 'cancelled', withCriterion('cancelled', 'VERIFIED', 'pending'));
    await waitUntil(() => api.gets() >= 1);
    api.tell('outcome.evaluated', null, withCriterion('cancelled', 'VERIFIED', 'pass'));
    const settled = await waiting;
    expect(settled.criteria_results?.[0].verdict).toBe('pass');
    expect(api.gets()).toBe(2);
  });

  it('reads after every status event while the stream has told no execution status (or one this SDK does not know)', async () => {
    const { api, waiting } = await waitingOn(execution('running', 'SENT'));
    // A stream resumed past its start: the operation's event is the one that tells the change.
    api.tell('operation.status_changed', 'MANUAL_REVIEW', execution('completed', 'MANUAL_REVIEW'));
    expect((await waiting).operations[0].status).toBe('MANUAL_REVIEW');
    expect(api.gets()).toBe(1);
  });
});

/**
 * One execution whose log is already written, behind a real HTTP server: the stream (from its start) delivers `log`
 * at once and then ends with `end` (or stays open when none), or is refused with `streamStatus`; GET answers `state`
 * (or `getStatus`). Every request is recorded as `<kind>` (`get`, `stream`, `events`), in order.
 */
async function loggedExecution(opts: {
  state: Execution;
  log: [type: string, toStatus: string | null][];
  end?: 'settled' | 'deadline';
  streamStatus?: number;
  getStatus?: number;
}) {
  const requests: string[] = [];
  const server = await listenLocally(
    createServer((req, res) => {
      const problem = (status: number) => {
        res.writeHead(status, { 'content-type': 'application/problem+json' });
        res.end(JSON.stringify({ type: 'about:blank', title: 'x', status }));
      };
      if (req.url!.endsWith('/stream')) {
        requests.push('stream');
        if (opts.streamStatus) return problem(opts.streamStatus);
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('retry: 10\n\n');
        opts.log.forEach(([type, toStatus], i) => {
          const event = { id: `evt_${i + 1}`, seq: i + 1, execution_id: 'exe_1', type, to_status: toStatus, data: {} };
          res.write(`id: ${event.id}\nevent: ${type}\ndata: ${JSON.stringify(event)}\n\n`);
        });
        if (opts.end) res.end(`event: end\ndata: ${JSON.stringify({ reason: opts.end })}\n\n`);
        return;
      }
      if (req.url!.includes('/events')) {
        requests.push('events');
        res.writeHead(200, { 'content-type': 'application/json' });
        return res.end(JSON.stringify({ data: [], next_cursor: null }));
      }
      requests.push('get');
      if (opts.getStatus) return problem(opts.getStatus);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(opts.state));
    }),
  );
  closeAfterTest(server);
  return { dx: new Verity({ baseUrl: server.url, apiKey: KEY, backoffMs: 5 }), requests };
}

const SETTLED_LOG: [string, string | null][] = [
  ['execution.created', 'created'],
  ['execution.status_changed', 'running'],
  ['operation.status_changed', 'SENT'],
  ['operation.status_changed', 'VERIFIED'],
  ['execution.status_changed', 'completed'],
];

describe('a wait opens the stream without reading the execution first', () => {
  it('waits for a submitted execution with one read and the stream: the read after the event that settles it', async () => {
    const seen: ExecutionEvent[] = [];
    const { api, waiting } = await waitingOn(execution('created', 'PREPARED'), (e) => seen.push(e));
    api.tell('execution.created', 'created');
    await waitUntil(() => seen.length === 1);
    expect(api.gets()).toBe(0);
    api.tell('operation.status_changed', 'VERIFIED', execution('running', 'VERIFIED'));
    api.tell('execution.status_changed', 'completed', execution('completed', 'VERIFIED'));
    expect((await waiting).status).toBe('completed');
    expect(api.gets()).toBe(1);
  });

  it('resolves on an execution already settled: the stream delivers its log, one read after the terminal event', async () => {
    const { dx, requests } = await loggedExecution({
      state: execution('completed', 'VERIFIED'),
      log: SETTLED_LOG,
      end: 'settled',
    });
    const seen: ExecutionEvent[] = [];
    const settled = await dx.waitForSettled('exe_1', { timeoutMs: 10_000, onEvent: (e) => seen.push(e) });
    expect(settled.status).toBe('completed');
    expect(requests).toEqual(['stream', 'get', 'events']);
    // onEvent was handed the log up to the read, from the stream and then the rest of the log (none here).
    expect(seen.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5]);
  });

  it('waitFor resolves on a predicate that already holds, from the first event of the log', async () => {
    const { dx, requests } = await loggedExecution({ state: execution('completed', 'VERIFIED'), log: SETTLED_LOG });
    const done = await dx.waitFor('exe_1', (e) => e.status === 'completed', { timeoutMs: 10_000 });
    expect(done.status).toBe('completed');
    expect(requests).toEqual(['stream', 'get']);
  });

  it('waitFor rejects with a VerityConditionError when the stream of a settled execution ends and it does not hold', async () => {
    const { dx, requests } = await loggedExecution({
      state: execution('completed', 'FAILED'),
      log: [['execution.created', 'created']],
      end: 'settled',
    });
    const error = await dx.waitFor('exe_1', (e) => e.status === 'failed', { timeoutMs: 10_000 }).catch((e) => e);
    expect(error).toBeInstanceOf(VerityConditionError);
    expect(requests).toEqual(['stream', 'get', 'get']);
  });

  it.each([404, 401, 403, 400])(
    'rejects with the API’s %i given when the stream is opened, with no read',
    async (status) => {
      const { dx, requests } = await loggedExecution({
        state: execution('completed', 'VERIFIED'),
        log: [],
        streamStatus: status,
        getStatus: status,
      });
      const error = await dx.waitForSettled('exe_1', { timeoutMs: 10_000 }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(VerityError);
      expect((error as VerityError).status).toBe(status);
      expect(requests).toEqual(['stream']);
    },
  );

  it('polls GET when the stream is refused (too many streams), from the first read', async () => {
    const { dx, requests } = await loggedExecution({
      state: execution('completed', 'VERIFIED'),
      log: [],
      streamStatus: 429,
    });
    expect((await dx.waitForSettled('exe_1', { timeoutMs: 10_000 })).status).toBe('completed');
    expect(requests).toEqual(['stream', 'get']);
  });

  it('reads the execution once at expiry when no event was worth a read, for the timeout to carry it', async () => {
    const { dx, requests } = await loggedExecution({
      state: execution('waiting_for_approval', 'PREPARED'),
      log: [
        ['execution.created', 'created'],
        ['execution.status_changed', 'waiting_for_approval'],
      ],
    });
    const error = (await dx.waitForSettled('exe_1', { timeoutMs: 300 }).catch((e: unknown) => e)) as VerityTimeoutError;
    expect(error).toBeInstanceOf(VerityTimeoutError);
    expect(error.lastExecution?.status).toBe('waiting_for_approval');
    expect(requests).toEqual(['stream', 'get']);
  });

  it('does not read at expiry when the caller aborted the wait', async () => {
    const { dx, requests } = await loggedExecution({
      state: execution('waiting_for_approval', 'PREPARED'),
      log: [['execution.created', 'created']],
    });
    const controller = new AbortController();
    const waiting = dx.waitForSettled('exe_1', { timeoutMs: 10_000, signal: controller.signal }).catch((e) => e);
    await waitUntil(() => requests.length === 1);
    controller.abort(new Error('enough'));
    expect(await waiting).toEqual(new Error('enough'));
    expect(requests).toEqual(['stream']);
  });
});

/**
 * An execution whose stream delivers `log` at once and stays open; its GETs are answered from `reads` in turn: an
 * execution, or `held` — never answered, as a read cut short by the wait's expiry (the request ends when the client
 * aborts it). Every request is recorded as `<kind>`, in order.
 */
async function readsCutAtExpiry(log: [type: string, toStatus: string | null][], reads: (Execution | 'held')[]) {
  const requests: string[] = [];
  const server = await listenLocally(
    createServer((req, res) => {
      if (req.url!.endsWith('/stream')) {
        requests.push('stream');
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('retry: 10\n\n');
        log.forEach(([type, toStatus], i) => {
          const event = { id: `evt_${i + 1}`, seq: i + 1, execution_id: 'exe_1', type, to_status: toStatus, data: {} };
          res.write(`id: ${event.id}\nevent: ${type}\ndata: ${JSON.stringify(event)}\n\n`);
        });
        return;
      }
      requests.push('get');
      const answer = reads.shift() ?? 'held';
      if (answer === 'held') return;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(answer));
    }),
  );
  closeAfterTest(server);
  return { dx: new Verity({ baseUrl: server.url, apiKey: KEY, backoffMs: 5 }), requests };
}

describe('a wait whose time runs out as the event that settles the execution arrives', () => {
  // The read after the settling event was under way when time ran out: the read at expiry finds the state waited for,
  // which is the wait's answer — not a VerityTimeoutError saying it did not settle while carrying it settled.
  it('resolves with the execution the read at expiry finds settled, when the read after its settling event was cut', async () => {
    const { dx, requests } = await readsCutAtExpiry(SETTLED_LOG, ['held', execution('completed', 'VERIFIED')]);
    const settled = await dx.waitForSettled('exe_1', { timeoutMs: 1_500 });
    expect(settled.status).toBe('completed');
    expect(requests).toEqual(['stream', 'get', 'get']);
  });

  it('reads again at expiry when a read was cut short though an earlier one was made, and resolves on what it finds', async () => {
    const { dx, requests } = await readsCutAtExpiry(
      [
        ['execution.created', 'created'],
        ['operation.status_changed', 'UNKNOWN'],
        ['execution.status_changed', 'cancelled'],
        ['operation.status_changed', 'VERIFIED'],
      ],
      // The read after `cancelled` (the charge still UNKNOWN), the one after VERIFIED cut, then the read at expiry.
      [execution('cancelled', 'UNKNOWN'), 'held', execution('cancelled', 'VERIFIED')],
    );
    const settled = await dx.waitForSettled('exe_1', { timeoutMs: 1_500 });
    expect(settled.operations[0].status).toBe('VERIFIED');
    expect(requests).toEqual(['stream', 'get', 'get', 'get']);
  });

  it('resolves with the state it read settled when time runs out while it hands onEvent the rest of the log', async () => {
    // The read after the terminal event finds it settled; the page of the log after the stream's last event is cut.
    const { dx, requests } = await readsCutAtExpiry(SETTLED_LOG, [execution('completed', 'VERIFIED'), 'held']);
    const seen: ExecutionEvent[] = [];
    const settled = await dx.waitForSettled('exe_1', { timeoutMs: 1_500, onEvent: (e) => seen.push(e) });
    expect(settled.status).toBe('completed');
    expect(seen.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5]);
    // The read, then the log's page (counted as a read here): nothing read again at expiry.
    expect(requests).toEqual(['stream', 'get', 'get']);
  });

  it('still rejects with a VerityTimeoutError carrying the state read at expiry when it is not the one waited for', async () => {
    const { dx, requests } = await readsCutAtExpiry(SETTLED_LOG, ['held', execution('completed', 'MANUAL_REVIEW')]);
    const waitForVerified = (e: Execution) => e.operations[0].status === 'VERIFIED';
    const error = (await dx
      .waitFor('exe_1', waitForVerified, { timeoutMs: 1_500 })
      .catch((e: unknown) => e)) as VerityTimeoutError;
    expect(error).toBeInstanceOf(VerityTimeoutError);
    expect(error.lastExecution?.operations[0].status).toBe('MANUAL_REVIEW');
    expect(requests).toEqual(['stream', 'get', 'get']);
  });
});
