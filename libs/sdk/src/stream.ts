import { createParser } from 'eventsource-parser';
import { VerityError, VerityNetworkError, errorFromResponse } from './errors';
import { HEADER_VALUE, MAX_RETRY_AFTER_MS, Transport, backoff, pathSegment, sleep } from './http';
import type { ExecutionEvent, StreamEndReason } from './types';

export interface StreamOptions {
  /** Resume after this event id (as if reconnecting): events with a greater `seq` only. */
  lastEventId?: string;
  /** Aborting ends the iteration: the pending `next()` rejects with the signal's reason. */
  signal?: AbortSignal;
  /**
   * Consecutive failed (re)connections tolerated before the iterator throws (default 10): the last answer's error
   * when the last one was answered (a 503 `secrets-unreadable`, say), a VerityNetworkError when it got no answer.
   * The count resets whenever the server accepts a connection.
   */
  maxReconnects?: number;
  /**
   * Delay before reconnecting; by default the server's `retry:` value (1 s; at least 100 ms and at most 10 s is taken),
   * then backing off on failures.
   */
  reconnectDelayMs?: number;
  /**
   * A connection that delivers nothing (not even a heartbeat comment) for this long is dropped and re-established
   * (default 45 s; the server sends a heartbeat every 15 s).
   */
  idleTimeoutMs?: number;
  /**
   * Whether a connection refused with 429, 502, 503 or 504 is tried again (default true, honouring Retry-After).
   * When false, or when Retry-After asks for more than 10 s, the iterator throws the VerityError at once
   * (waitForSettled then polls instead).
   */
  retryOnBusy?: boolean;
}

const DEFAULT_RETRY_MS = 1_000;
/** The shortest reconnection delay a server's `retry:` hint can set (a caller's `reconnectDelayMs` is taken as given). */
const MIN_SERVER_RETRY_MS = 100;
const RETRYABLE_STATUSES = new Set([429, 502, 503, 504]);

class IdleTimeout extends Error {
  override name = 'IdleTimeout';
}

/** The server sent an event whose data is not JSON: not a network problem, so no reconnection hides it. */
export class MalformedFrame extends Error {
  override name = 'MalformedFrame';
}

/**
 * The most a stream holds of one unfinished frame (an event, a comment, a line): 1 MiB. The API's events are far
 * smaller (a request body is at most 256 KiB, a connector's answer 64 KiB); without a bound, a broken or hostile
 * server sending one endless line, or data lines with no blank line to end the event, grew the reader's memory until
 * the process died.
 */
export const MAX_STREAM_FRAME_BYTES = 1024 * 1024;

/**
 * The server sent more than MAX_STREAM_FRAME_BYTES without finishing a frame. Like MalformedFrame it is the server's
 * fault, not the network's: the stream fails instead of reconnecting to the same frame.
 */
export class OversizedFrame extends Error {
  override name = 'OversizedFrame';
  readonly limitBytes = MAX_STREAM_FRAME_BYTES;
}

/**
 * The events of one execution, live, as an async iterable (`for await (const event of dx.stream(id))`).
 *
 * Reads `GET /v1/executions/{id}/stream` with `fetch` and the Bearer header (never a key in the URL). When the
 * connection drops it reconnects by itself with `Last-Event-ID`, so the sequence it yields has no gap and no
 * duplicate. It lasts as long as something can still change — through pending approvals and manual review, also
 * after the execution completed, so a reviewer's resolution and later evaluations arrive too — and ends when the
 * server sends `event: end`: `endReason` is `settled` (nothing can change any more), `deadline` (the execution's
 * deadline passed while something could still change) or `key_revoked`. Breaking out of the loop closes the
 * connection.
 */
export class ExecutionStream implements AsyncIterable<ExecutionEvent> {
  /** The id of the last event yielded: where a new stream would resume. */
  lastEventId: string | undefined;
  /** Why the server ended the stream; undefined while it runs or if it was abandoned. */
  endReason: StreamEndReason | undefined;
  /** Connections the server accepted (1 + reconnections). */
  connections = 0;
  private started = false;

  constructor(
    private readonly transport: Transport,
    readonly executionId: string,
    private readonly options: StreamOptions = {},
  ) {
    this.lastEventId = options.lastEventId;
  }

  [Symbol.asyncIterator](): AsyncIterator<ExecutionEvent> {
    if (this.started) throw new Error('an ExecutionStream can be iterated once; call stream() again to resume');
    this.started = true;
    return this.run();
  }

  /** Collects every event until the stream ends. */
  async toArray(): Promise<ExecutionEvent[]> {
    const events: ExecutionEvent[] = [];
    for await (const event of this) events.push(event);
    return events;
  }

  private async *run(): AsyncGenerator<ExecutionEvent, void, undefined> {
    const { signal } = this.options;
    const maxReconnects = this.options.maxReconnects ?? 10;
    const idleTimeoutMs = this.options.idleTimeoutMs ?? 45_000;
    const path = `/v1/executions/${pathSegment(this.executionId)}/stream`;
    // A value no header can carry would fail every connection before it is sent: ten reconnects (about 17 minutes at
    // the default delays) and then "no response", for a stream that was never asked for.
    if (this.lastEventId !== undefined && this.lastEventId !== '' && !HEADER_VALUE.token.test(this.lastEventId)) {
      throw new RangeError('Verity: lastEventId must be printable ASCII without spaces (an event id or a seq)');
    }
    let serverRetryMs = DEFAULT_RETRY_MS;
    let failures = 0;
    let lastCause: unknown;
    let retryAfterMs = 0;

    while (true) {
      signal?.throwIfAborted();
      if (failures > 0) {
        if (failures > maxReconnects) {
          // The last (re)connection was answered (a 503 and its problem, such as `secrets-unreadable`): that answer is
          // what the caller is given, not a "no response" it was not.
          if (lastCause instanceof VerityError) throw lastCause;
          throw new VerityNetworkError({
            method: 'GET',
            path,
            attempts: failures,
            outcomeUnknown: false,
            cause: lastCause,
          });
        }
        const base = this.options.reconnectDelayMs ?? serverRetryMs;
        const delay = failures === 1 ? base : Math.max(base, backoff(base, failures - 1));
        await sleep(Math.max(delay, retryAfterMs), signal);
        retryAfterMs = 0;
      }

      const connection = new AbortController();
      const abortFromCaller = () => connection.abort(signal?.reason);
      signal?.addEventListener('abort', abortFromCaller, { once: true });
      let idleTimer: ReturnType<typeof setTimeout> | undefined;
      const armIdle = () => {
        clearTimeout(idleTimer);
        idleTimer = setTimeout(() => connection.abort(new IdleTimeout('no data, not even a heartbeat')), idleTimeoutMs);
      };
      try {
        armIdle();
        let response: Response;
        try {
          response = await this.transport.fetch(this.transport.url(path), {
            method: 'GET',
            headers: this.transport.headers({
              accept: 'text/event-stream',
              'cache-control': 'no-cache',
              ...(this.lastEventId ? { 'last-event-id': this.lastEventId } : {}),
            }),
            signal: connection.signal,
          });
        } catch (error) {
          signal?.throwIfAborted();
          lastCause = error;
          failures += 1;
          continue;
        }
        if (!response.ok || !response.body) {
          const text = await response.text().catch(() => '');
          const error = errorFromResponse(response.status, response.headers, text);
          const waitTooLong = (error.retryAfterMs ?? 0) > MAX_RETRY_AFTER_MS;
          if (!RETRYABLE_STATUSES.has(response.status) || this.options.retryOnBusy === false || waitTooLong) {
            throw error;
          }
          lastCause = error;
          failures += 1;
          retryAfterMs = error.retryAfterMs ?? 0;
          continue;
        }
        this.connections += 1;
        failures = 0;

        // Each event with the SSE `id:` of its frame, where its data names none.
        const queue: { event: ExecutionEvent; frameId: string | undefined }[] = [];
        let end: StreamEndReason | undefined;
        let malformed: string | undefined;
        // Bytes received since the last frame ended (its blank line), whatever it carried: an event, a comment, a retry
        // hint, or nothing the parser reports. Not reset by the parser's callbacks: a comment or a retry hint between
        // the data lines of one event ends no frame, and the event's data is still held. Checked per chunk, so what is
        // held may pass the bound by one chunk before it is refused.
        let unfinishedBytes = 0;
        const lineEnds = new LineEnds();
        const frameEnds = new FrameEnds();
        const parser = createParser({
          onEvent: (message) => {
            if (malformed !== undefined) return;
            if (message.event === 'end') {
              end = parseEndReason(message.data);
              return;
            }
            try {
              queue.push({ event: JSON.parse(message.data) as ExecutionEvent, frameId: message.id || undefined });
            } catch {
              malformed ??= message.data.slice(0, 200);
            }
          },
          onRetry: (ms) => {
            // A timer longer than 2^31 - 1 ms fires at once: an absurd hint would become a reconnect storm. So would
            // `retry: 0` from a server (or proxy) that then closes at once: each accepted connection resets the
            // failure count, so nothing would ever slow the loop down.
            serverRetryMs = Math.max(MIN_SERVER_RETRY_MS, Math.min(ms, MAX_RETRY_AFTER_MS));
          },
        });
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        try {
          while (true) {
            const { done, value } = await reader.read();
            if (done) break;
            armIdle();
            const text = lineEnds.toLF(decoder.decode(value, { stream: true }));
            const frameEnd = frameEnds.lastIn(text);
            unfinishedBytes =
              frameEnd < 0 ? unfinishedBytes + value.byteLength : utf8.encode(text.slice(frameEnd)).byteLength;
            parser.feed(text);
            while (queue.length > 0) {
              const { event, frameId } = queue.shift()!;
              const id = event.id || frameId;
              // An id no Last-Event-ID header can carry (above U+00FF, a CR or LF in the data's id, a space) would fail
              // every reconnection while its headers are built: ten of them (about 17 minutes) and then "no response".
              // Keeping the last sendable id instead would resume before this event and yield it twice. The server's
              // fault, like a frame that is not JSON: the stream fails at once, the event not yielded.
              if (id && !HEADER_VALUE.token.test(id)) {
                throw new MalformedFrame(
                  `an event id no Last-Event-ID header can carry (printable ASCII without spaces): ${JSON.stringify(id.slice(0, 200))}`,
                );
              }
              // Never back to undefined: a reconnection without Last-Event-ID would replay the log from its start.
              this.lastEventId = id || this.lastEventId;
              yield event;
            }
            if (malformed !== undefined) throw new MalformedFrame(`an event frame is not JSON: ${malformed}`);
            if (unfinishedBytes > MAX_STREAM_FRAME_BYTES) {
              throw new OversizedFrame(
                `the server sent more than ${MAX_STREAM_FRAME_BYTES} bytes without ending a frame`,
              );
            }
            if (end) {
              this.endReason = end;
              return;
            }
          }
          lastCause = new Error('the server closed the stream without an end event');
        } catch (error) {
          if (error instanceof MalformedFrame || error instanceof OversizedFrame) throw error;
          signal?.throwIfAborted();
          // A reset, a torn body or an idle connection: the partial frame is dropped with this parser.
          lastCause = error;
        }
        failures += 1;
      } finally {
        clearTimeout(idleTimer);
        signal?.removeEventListener('abort', abortFromCaller);
        connection.abort();
      }
    }
  }
}

const utf8 = new TextEncoder();
const LF = 0x0a;

/**
 * SSE lines end with CRLF, LF or a bare CR. Each becomes an LF as it arrives, so that a CR at the end of a chunk ends
 * its line at once: the parser, left with it, waited for the next byte to tell a bare CR from a CRLF — a frame whose
 * blank line was that CR was yielded only with the next chunk (a heartbeat, 15 s later) and the `end` frame of a stream
 * with bare CRs never (closed, reconnected, again). An LF that starts the next chunk after such a CR is the rest of
 * its CRLF and is dropped, never taken for a blank line (a frame's end).
 */
class LineEnds {
  /** The last character converted was a CR. */
  private afterCR = false;

  toLF(text: string): string {
    if (text === '') return text;
    const from = this.afterCR && text.charCodeAt(0) === LF ? 1 : 0;
    this.afterCR = text.endsWith('\r');
    return text.slice(from).replace(/\r\n?/g, '\n');
  }
}

/**
 * Where the frames of a stream end, chunk by chunk (the text with every line ended by LF, see LineEnds): at a blank
 * line, that is an LF right after another — as the parser ends them, also when it reports nothing for the frame (no
 * data line in it).
 */
class FrameEnds {
  /** The last character read ended a line (or nothing was read yet): an LF now ends a blank line. */
  private atLineStart = true;

  /** The index in `text` just past the last blank line in it (so what follows starts a frame), or -1 if none. */
  lastIn(text: string): number {
    let end = -1;
    for (let i = 0; i < text.length; i += 1) {
      if (text.charCodeAt(i) === LF) {
        if (this.atLineStart) end = i + 1;
        this.atLineStart = true;
      } else {
        this.atLineStart = false;
      }
    }
    return end;
  }
}

const END_REASONS: readonly StreamEndReason[] = ['settled', 'deadline', 'key_revoked'];

/** An end without a reason this SDK knows (an older server sent none) is read as `settled`, as servers meant it. */
function parseEndReason(data: string): StreamEndReason {
  try {
    const reason = (JSON.parse(data) as { reason?: unknown }).reason;
    return END_REASONS.find((known) => known === reason) ?? 'settled';
  } catch {
    return 'settled';
  }
}
