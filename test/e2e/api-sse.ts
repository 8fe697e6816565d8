import { createParser } from 'eventsource-parser';
import { waitFor } from '../support/stack';

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
