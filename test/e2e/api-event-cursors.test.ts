import { DEMO, Stack } from '../support/stack';
import { charge, http, sms, submission, unique } from '../support/http';
import type { ProblemDetails as Problem } from '@verity/sdk';
import { openStream } from './api-sse';

type FieldProblem = Problem & { errors: { field: string; rule: string; message: string }[] };
interface EventList {
  data: { id: string; seq: number }[];
  next_cursor: string | null;
}

/**
 * A cursor into an execution's log (`after`, `Last-Event-ID`) is judged alike by the page of the log and by the
 * stream (docs/api.md): a seq past the last event is none the client can have been given, and is 400 on both (the
 * log answered 200 with an empty page); and on the stream an `after` sent beside a `Last-Event-ID` is checked too,
 * even though the header is where the stream resumes (a malformed `after` was accepted without a word).
 */
describe('event cursors: the log and the stream judge them alike', () => {
  let stack: Stack;
  let executionId = '';
  let events: EventList['data'] = [];

  beforeAll(async () => {
    // No workers: the execution's log stays as its submission wrote it.
    stack = await Stack.start({ label: 'evcursors', dispatchers: 0, reconcilers: 0 });
    const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('cursor')), sms(unique('cursor'))]),
    });
    expect(created.status).toBe(201);
    executionId = created.body.id;
    // Cancelled: its operations and itself move, so the log has several events, and no more come.
    const cancelled = await http(stack.apiUrl, 'POST', `/v1/executions/${executionId}/cancel`, { key: DEMO.agent });
    expect(cancelled.status).toBe(200);
    const log = await http<EventList>(stack.apiUrl, 'GET', `/v1/executions/${executionId}/events`, {
      key: DEMO.agent,
    });
    expect(log.status).toBe(200);
    events = log.body.data;
    expect(events.length).toBeGreaterThanOrEqual(2);
  }, 60_000);
  afterAll(async () => stack?.stop());

  const page = (after: string) =>
    http<EventList & FieldProblem>(stack.apiUrl, 'GET', `/v1/executions/${executionId}/events?after=${after}`, {
      key: DEMO.agent,
    });

  it('the log refuses a seq past its last event (400 known_event), as the stream does; the last event is an empty page', async () => {
    const last = events[events.length - 1].seq;
    const atEnd = await page(String(last));
    expect([atEnd.status, atEnd.body.data, atEnd.body.next_cursor]).toEqual([200, [], null]);
    for (const past of [String(last + 1), '999999999999999']) {
      const refused = await page(past);
      expect(refused.status).toBe(400);
      expect(refused.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(refused.body.errors).toEqual([
        expect.objectContaining({ field: 'after', rule: 'known_event', message: expect.stringContaining(past) }),
      ]);
      const stream = await http<FieldProblem>(
        stack.apiUrl,
        'GET',
        `/v1/executions/${executionId}/stream?after=${past}`,
        { key: DEMO.agent },
      );
      expect([stream.status, stream.body.errors[0]?.field, stream.body.errors[0]?.rule]).toEqual([
        400,
        'after',
        'known_event',
      ]);
    }
  });

  it('the stream checks an `after` sent beside a valid Last-Event-ID: malformed, unknown or past the end is 400 naming it', async () => {
    const last = events[events.length - 1].seq;
    for (const bad of ['garbage', 'evt_nothere', String(last + 1)]) {
      const res = await http<FieldProblem>(stack.apiUrl, 'GET', `/v1/executions/${executionId}/stream?after=${bad}`, {
        key: DEMO.agent,
        headers: { 'last-event-id': events[0].id },
      });
      expect({ bad, status: res.status }).toEqual({ bad, status: 400 });
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(res.body.errors).toEqual([expect.objectContaining({ field: 'after', rule: 'known_event' })]);
    }
  });

  it('with both valid, the stream resumes after the Last-Event-ID (an EventSource reconnecting to a URL with ?after=)', async () => {
    const stream = await openStream(`${stack.apiUrl}/v1/executions/${executionId}/stream?after=0`, DEMO.agent, {
      'last-event-id': events[0].id,
    });
    try {
      expect(stream.status).toBe(200);
      const frames = await stream.waitFor((f) => f.some((frame) => frame.event === 'end'));
      expect(frames.filter((f) => f.event !== 'end').map((f) => f.id)).toEqual(events.slice(1).map((e) => e.id));
    } finally {
      stream.abort();
    }
  });
});
