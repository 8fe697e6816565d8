import { type ExecutionEvent, VerityError } from '@verity/sdk';
import { maskString } from '../mask';
import { h, json, time, written } from './dom';
import { recheckNote } from './status-text';
import { checkUnauthorized, clientFor, session } from './session';

export interface Timeline {
  readonly element: HTMLElement;
  /** Re-opens the stream after it ended (a reviewer's action appends events to a settled execution). */
  resume(): void;
  dispose(): void;
}

type StreamState = 'connecting' | 'live' | 'reconnecting' | 'ended' | 'error';

const STATE_TEXT: Record<StreamState, string> = {
  connecting: 'Connecting to the live stream…',
  live: 'Live: new events appear as they are recorded.',
  reconnecting: 'Connection lost; reconnecting and resuming after the last event received…',
  ended: 'Stream ended. It reopens after any action taken here.',
  error: 'The stream could not be opened.',
};

/** Why the server ended the stream (the SDK's `endReason`). */
const END_TEXT: Record<string, string> = {
  settled: 'Nothing can change any more.',
  deadline: "The execution's deadline has passed; what is still open is not followed live.",
  key_revoked: 'The API key was revoked.',
};

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * The execution's event log, kept live by the SDK's stream (fetch + Bearer header, resuming with Last-Event-ID so
 * nothing is missed or shown twice). A dropped connection is not retried inside the SDK (`maxReconnects: 0`) but
 * here, so the reviewer sees that the timeline is reconnecting; the new stream resumes after the last event shown.
 */
export function timeline(
  executionId: string,
  options: {
    focusOperationId?: string;
    keyOf: (operationId: string) => string | undefined;
    onEvent: (event: ExecutionEvent) => void;
  },
): Timeline {
  const list = h('ol', { class: 'events', 'aria-label': 'Events, oldest first' });
  const state = h('p', { class: 'stream-state', role: 'status' });
  const count = h('span', { class: 'count' }, '0');
  const element = h(
    'section',
    { id: 'timeline', class: 'panel timeline', 'aria-labelledby': 'timeline-title' },
    h('h2', { id: 'timeline-title' }, 'Event timeline ', count),
    state,
    list,
  );
  const seen = new Set<string>();
  let lastEventId: string | undefined;
  let disposed = false;
  let running = false;
  let current: AbortController | null = null;

  const setState = (next: StreamState, detail = '') => {
    state.dataset.state = next;
    state.textContent = detail ? `${STATE_TEXT[next]} ${detail}` : STATE_TEXT[next];
  };

  const add = (event: ExecutionEvent) => {
    if (seen.has(event.id)) return;
    seen.add(event.id);
    list.append(renderEvent(event, options.focusOperationId, options.keyOf));
    count.textContent = String(seen.size);
    options.onEvent(event);
  };

  const run = async () => {
    if (running || disposed) return;
    running = true;
    let delay = 1000;
    try {
      while (!disposed) {
        const key = session.key();
        if (!key) return;
        const controller = new AbortController();
        current = controller;
        setState(seen.size ? 'live' : 'connecting');
        const stream = clientFor(key).executions.stream(executionId, {
          lastEventId,
          signal: controller.signal,
          maxReconnects: 0,
          retryOnBusy: false,
        });
        try {
          for await (const event of stream) {
            setState('live');
            lastEventId = event.id;
            delay = 1000;
            add(event);
          }
        } catch (error) {
          checkUnauthorized(error);
          if (disposed) return;
          if (error instanceof VerityError && error.status !== 429 && error.status < 500) {
            setState('error', `${error.title}: ${error.detail ?? ''}`);
            return;
          }
        }
        if (disposed) return;
        if (stream.endReason) {
          setState('ended', END_TEXT[stream.endReason] ?? '');
          return;
        }
        setState('reconnecting');
        await sleep(delay);
        delay = Math.min(delay * 2, 10_000);
      }
    } finally {
      running = false;
    }
  };

  void run();
  return {
    element,
    resume: () => void run(),
    dispose: () => {
      disposed = true;
      current?.abort();
    },
  };
}

function renderEvent(
  event: ExecutionEvent,
  focus: string | undefined,
  keyOf: (id: string) => string | undefined,
): HTMLElement {
  const subject = event.operation_id ? (keyOf(event.operation_id) ?? event.operation_id) : 'execution';
  const { reason, actor, ...rest } = event.data ?? {};
  // A string child is shown() by h(): the status named comes from the event's data.
  const note = recheckNote(event);
  const mine = !focus || !event.operation_id || event.operation_id === focus;
  const move =
    event.from_status || event.to_status
      ? h(
          'span',
          { class: 'move' },
          h('span', { class: 'subject' }, written(subject), ': '),
          event.from_status ? h('span', { class: 'from' }, event.from_status) : null,
          event.from_status ? ' → ' : null,
          h('strong', { class: 'to' }, event.to_status ?? ''),
        )
      : h('span', { class: 'move' }, h('span', { class: 'subject' }, written(subject)));
  return h(
    'li',
    {
      id: event.id,
      class: `event${mine ? '' : ' event-other'}`,
      'data-type': event.type,
      'data-to': event.to_status ?? undefined,
      'data-operation': event.operation_id ?? undefined,
    },
    h(
      'div',
      { class: 'event-head' },
      time(event.created_at, { millis: true }),
      h('span', { class: 'event-type' }, event.type),
    ),
    h(
      'div',
      { class: 'event-body' },
      move,
      reason ? h('span', { class: 'reason' }, ' · ', written(maskString(String(reason)))) : null,
      actor === 'human' ? h('span', { class: 'actor' }, ' · by a reviewer') : null,
      note ? h('span', { class: 'recheck-note' }, ' · ', note) : null,
    ),
    Object.keys(rest).length
      ? h('details', {}, h('summary', {}, 'Details'), json(rest, `Details of event ${event.id}`))
      : null,
  );
}
