import { eventsChannel } from '@verity/queues';
import { createParser } from 'eventsource-parser';
import type IORedis from 'ioredis';
import { unique } from '../support/http';
import { type Stack, waitFor } from '../support/stack';

/** A minimal SSE client for the API tests: fetch with the Bearer header (as the SDK and console do), parsed frames. */
export interface SseFrame {
  id?: string;
  event?: string;
  data: string;
}

export interface SseStream {
  status: number;
  contentType: string | null;
  frames: SseFrame[];
  comments: number;
  /** Resolves when the server closes the stream (or it is aborted). */
  closed: Promise<void>;
  isClosed(): boolean;
  abort(): void;
  /** Waits until a frame satisfies `until` (or the stream closes, or the timeout passes) and returns the frames. */
  waitFor(until: (frames: SseFrame[]) => boolean, timeoutMs?: number): Promise<SseFrame[]>;
}

export async function openStream(url: string, key: string, headers: Record<string, string> = {}): Promise<SseStream> {
  const controller = new AbortController();
  const res = await fetch(url, {
    headers: { authorization: `Bearer ${key}`, accept: 'text/event-stream', ...headers },
    signal: controller.signal,
  });
  const frames: SseFrame[] = [];
  let comments = 0;
  let closed = false;
  const waiters = new Set<() => void>();
  const notify = () => {
    for (const w of waiters) w();
  };
  const parser = createParser({
    onEvent: (e) => {
      frames.push({ id: e.id, event: e.event, data: e.data });
      notify();
    },
    onComment: () => {
      comments += 1;
    },
  });
  const closedPromise = (async () => {
    if (!res.body) return;
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        parser.feed(decoder.decode(value, { stream: true }));
      }
    } catch {
      // Aborted by the test: the stream is over either way.
    }
    closed = true;
    notify();
  })();
  return {
    status: res.status,
    contentType: res.headers.get('content-type'),
    frames,
    get comments() {
      return comments;
    },
    closed: closedPromise,
    isClosed: () => closed,
    abort: () => controller.abort(),
    waitFor(until, timeoutMs = 30_000) {
      return new Promise<SseFrame[]>((resolve, reject) => {
        const check = () => {
          if (until(frames)) {
            cleanup();
            resolve(frames);
          } else if (closed) {
            cleanup();
            reject(new Error(`stream closed first; frames: ${JSON.stringify(frames.map((f) => f.event))}`));
          }
        };
        const timer = setTimeout(() => {
          cleanup();
          reject(new Error(`timed out; frames: ${JSON.stringify(frames.map((f) => f.event))}`));
        }, timeoutMs);
        const cleanup = () => {
          clearTimeout(timer);
          waiters.delete(check);
        };
        waiters.add(check);
        check();
      });
    },
  };
}

/** Two more heartbeat comments on a stream that is still open: the server is holding it, not closing it. */
export async function heldOpen(stream: SseStream): Promise<void> {
  const from = stream.comments;
  await waitFor(
    async () => stream.comments,
    (n) => n >= from + 2,
    10_000,
    50,
  );
  expect(stream.isClosed()).toBe(false);
  expect(stream.frames.some((f) => f.event === 'end')).toBe(false);
}

/**
 * Commits an event noting `note` at the execution's next seq (its id begun with `idPrefix`), telling no one: a stream
 * opened later reads it. Resolves to its id.
 */
export async function noteEvent(stack: Stack, executionId: string, idPrefix: string, note: string): Promise<string> {
  return stack.db.dataSource.transaction(async (tx) => {
    const [row] = (await tx.query(`SELECT event_seq::int AS seq FROM executions WHERE id = $1 FOR UPDATE`, [
      executionId,
    ])) as { seq: number }[];
    const id = `${idPrefix}${row.seq + 1}${unique('x').replace(/[^a-z0-9]/gi, '')}`;
    await tx.query(
      `INSERT INTO events (id, execution_id, tenant_id, seq, type, data)
       VALUES ($1, $2, (SELECT tenant_id FROM executions WHERE id = $2), $3::int, 'operation.rechecked',
               jsonb_build_object('note', $4::text))`,
      [id, executionId, row.seq + 1, note],
    );
    await tx.query(`UPDATE executions SET event_seq = event_seq + 1 WHERE id = $1`, [executionId]);
    return id;
  });
}

/**
 * An event noting `note` (see noteEvent), announced on the stack's events channel through `publisher` as a writer of
 * events does: resolves to the data of the frame `stream` sends for it.
 */
export async function appendNotedEvent(
  to: { stack: Stack; publisher: IORedis; stream: SseStream; executionId: string; idPrefix: string },
  note: string,
): Promise<string> {
  const { stack, publisher, stream, executionId, idPrefix } = to;
  const eventId = await noteEvent(stack, executionId, idPrefix, note);
  await publisher.publish(eventsChannel(stack.prefix), executionId);
  const frames = await stream.waitFor((sent) => sent.some((f) => f.id === eventId), 15_000);
  return frames.find((f) => f.id === eventId)!.data;
}
