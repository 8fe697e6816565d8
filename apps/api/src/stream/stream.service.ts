import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import {
  OperationEntity,
  SecretUnreadableError,
  contradictedOnRecord,
  findExecutionWithOperations,
  findLastStatusChanges,
  listEvents,
  listEventsWithinBytes,
} from '@verity/persistence';
import { ExecutionStatus, canStillChange, isOutcomeCurrent, lateReadUntil, latestByKey } from '@verity/status-model';
import { LOGGER, Logger, VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { PRODUCER_REDIS } from '@verity/queues';
import type { RedisClient as Redis } from '@verity/platform';
import type { Request, Response } from 'express';
import { DataSource } from 'typeorm';
import { ApiKeyService } from '../auth/api-key.service';
import type { Principal } from '../auth/principal';
import { Problem } from '../problem/problem';
import { EventCursorField, resolveEventCursor } from '../executions/event-cursor';
import { PAGE_BYTES } from '../http/parse';
import { findExecutionForAnswer } from '../executions/execution-read';
import { type Redact, TenantConnectors } from '@verity/connectors';
import { presentEvent } from '../executions/presenter';
import { EventNotifier } from './event-notifier.service';
import { TenantShare, releaseOnce } from '../held-counts';
import { StreamCap } from './stream-cap';
import { drained } from './drained';
import { canWrite, writeEnd, writeEvent, writeHeartbeat } from './sse-out';
import { StreamVerdict, streamMustRead, streamVerdict } from './stream-end';
import { streamVerdictReads } from '../metrics/metrics';

const POLL_FALLBACK_MS = 2_000;

/**
 * SSE over the append-only log (I11). The cursor is the per-execution `seq`, whose order is commit order, so
 * resuming after an event id can neither skip nor repeat. Every wake-up (announcement, poll, heartbeat) re-reads the
 * log; the execution itself is read again only after a page that may change whether the stream ends (streamMustRead).
 * The stream lasts as long as something can still change — through manual review and pending approvals — and ends
 * with `event: end`, data `{ "reason": "settled" | "deadline" | "key_revoked" }` (see stream-end.ts).
 */
@Injectable()
export class StreamService {
  private readonly active = new Set<Response>();
  private readonly cap: StreamCap;
  /**
   * Open streams in this process, whose memory, event loop and database pool they use (each reads the log on every
   * heartbeat and every announcement). The per-key cap does not bound them: a tenant with many keys could open as
   * many streams as it had keys.
   */
  private readonly share: TenantShare;
  /** Set by `closeAll`: a stream that starts after it ends at once, as those it ended did. */
  private stopping = false;

  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly notifier: EventNotifier,
    private readonly keys: ApiKeyService,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
    @Inject(PRODUCER_REDIS) redis: Redis,
    @Inject(LOGGER) private readonly logger: Logger,
    private readonly connectors: TenantConnectors,
  ) {
    // A lease outlives three missed heartbeats, so only a dead process' streams expire.
    this.cap = new StreamCap(redis, config.QUEUE_PREFIX, config.MAX_STREAMS_PER_KEY, config.SSE_HEARTBEAT_MS * 3);
    this.share = new TenantShare(config.MAX_STREAMS_PER_PROCESS);
  }

  /**
   * `cursors`: the `Last-Event-ID` header and the `after` query parameter as sent (absent or empty: not sent). Each one
   * sent is checked, and refused naming it; the stream resumes after the header's event when both are sent (an
   * EventSource reconnecting to a URL with `?after=` sends the header with the later position).
   */
  async open(principal: Principal, executionId: string, cursors: StreamCursors, req: Request, res: Response) {
    // Listened to from the first line: a client that leaves during the setup below (before or while the lease is
    // taken) closes before any later listener could hear it, and its lease would be renewed until the execution ends.
    const client = watchDeparture(req, res);
    try {
      await this.serve(principal, executionId, cursors, res, client, req.method === 'HEAD');
    } finally {
      client.dispose();
    }
  }

  private async serve(
    principal: Principal,
    executionId: string,
    cursors: StreamCursors,
    res: Response,
    client: Departure,
    head = false,
  ) {
    // When the stream was asked for: every change of the tenant's secrets committed before it is honoured from its first
    // page (confirmed once, below, before the 200).
    const since = this.connectors.secretsMoment();
    // Gone already: nothing to take, nobody to answer.
    if (client.gone) return;
    // The stream's place is taken before anything is read: the reads below are the request's (it is not among the key's
    // /v1 requests in flight), so they are bounded by the key's streams. Taken after them, a key sent any number of
    // stream requests at once (a HEAD, which never took a place, or any past its bound) and each read the execution.
    const lease = await this.takeLease(principal);
    let handedOver = false;
    let cursor: number;
    try {
      cursor = await this.setUp(principal, executionId, cursors, since, res, head);
      // Gone while it was set up (or a HEAD, answered): the place is given back below.
      handedOver = !head && !client.gone;
    } finally {
      if (!handedOver) lease.release();
    }
    if (!handedOver) return;
    this.active.add(res);

    streamHeaders(res).flushHeaders();
    res.write('retry: 1000\n\n');
    // Its request was still being answered when the process began to stop (closeAll has run): served, it would hold
    // server.close(), and the stop with it, until the execution settled or the forced exit. It ends as the others did.
    if (this.stopping) {
      this.active.delete(res);
      lease.release();
      res.end();
      return;
    }

    let closed = false;
    let wake: (() => void) | null = null;
    const poke = () => wake?.();
    const unsubscribe = this.notifier.subscribe(executionId, poke);
    // A revocation announced since the last pass: the key is read again before another page is sent (a long replay
    // would otherwise run to its end first).
    let revocationAnnounced = false;
    const unwatchKeys = this.keys.onRevocation(() => {
      revocationAnnounced = true;
      poke();
    });
    const heartbeat = setInterval(() => {
      // Renewed only for a client still there: a lease is never kept alive for a connection that is gone.
      if (client.gone) return close();
      // Not on top of what a client still has to take: the events wait for it (drained), so does a heartbeat.
      if (!closed) writeHeartbeat(res);
      lease.renew();
      poke();
    }, this.config.SSE_HEARTBEAT_MS);
    const close = () => {
      if (closed) return;
      closed = true;
      clearInterval(heartbeat);
      unsubscribe();
      unwatchKeys();
      this.active.delete(res);
      lease.release();
      poke();
    };
    client.onDeparture(close);

    // The execution's status at the last verdict read (undefined: none yet), the verdict it gave, and whether a page
    // sent since may change it (streamMustRead): most pages cannot, and are not followed by a read.
    let lastRead: ExecutionStatus | null | undefined;
    let verdict: StreamVerdict = { end: null, wakeAt: null };
    let clockOffsetMs = 0;
    let mustRead = true;
    try {
      while (!closed && canWrite(res)) {
        if (revocationAnnounced) {
          revocationAnnounced = false;
          if (!(await this.keys.isStillValid(principal))) {
            writeEnd(res, 'key_revoked');
            break;
          }
        }
        let pending = false;
        wake = () => {
          pending = true;
        };
        const { events, more } = await listEventsWithinBytes(
          this.db.manager,
          executionId,
          principal.tenantId,
          cursor,
          500,
          PAGE_BYTES,
        );
        // The tenant's secret values, read once for a page that has events: a value written in plain before it was made a
        // secret (a reason, params) is sent as its placeholder, as every other answer does (RedactSecretValues). As of the
        // stream's request (`since`): the round trip that confirmed no change committed before it was missed is not made
        // again for each page. A later change is honoured as soon as its NOTIFY reaches this process (the values kept
        // are dropped, and the next page reads them again); a page sent between its commit and that delivery — moments —
        // is as if sent just before the change, which came after this request was. While the LISTEN connection is down
        // nothing is kept (each page reads them), and a connection lost unseen keeps nothing longer than MAX_KEPT_MS.
        let redact: Redact | undefined;
        try {
          redact = events.length > 0 ? await this.connectors.answerRedactorOf(principal.tenantId, since) : undefined;
        } catch (error) {
          if (!(error instanceof SecretUnreadableError)) throw error;
          // The secrets stopped opening with this process' key since the stream began (re-sealed under another): the
          // page cannot be sent redacted, nor unredacted. The connection closes without `end` — the stream is not over,
          // as at a shutdown — and the client's reconnection is told why (503 secrets-unreadable, before its 200).
          this.logger.warn(
            { executionId, keyId: principal.keyId, lastSentSeq: cursor, err: error },
            'stream closed: the tenant’s secrets do not open with this SECRETS_KEY',
          );
          break;
        }
        let keptUp = true;
        for (const event of events) {
          // Ended under this page (closeAll at shutdown): the rest is for the client's next connection.
          if (!canWrite(res)) break;
          const view = redact!(presentEvent(event));
          const taken = writeEvent(res, view);
          cursor = view.seq;
          // A client that does not take what it was sent is not sent more: wait for it, or let it go (drained).
          if (!taken && !(await drained(res, this.config.SSE_DRAIN_TIMEOUT_MS))) {
            keptUp = false;
            break;
          }
        }
        if (!keptUp) {
          // Not an end the client should act on: the connection closes, and it resumes from its Last-Event-ID.
          this.logger.info(
            { executionId, keyId: principal.keyId, lastSentSeq: cursor },
            'stream closed: the client did not take what was sent',
          );
          res.destroy();
          break;
        }
        if (!canWrite(res)) break;
        mustRead ||= streamMustRead(
          lastRead,
          events.map((event) => ({ type: event.type, toStatus: event.toStatus })),
        );
        if (more) continue;
        if (mustRead) {
          const read = await this.verdict(principal.tenantId, executionId);
          ({ verdict, clockOffsetMs } = read);
          lastRead = read.executionStatus;
          mustRead = false;
        }
        if (verdict.end) {
          // Events written in the same commit as the last change were read above or will be on this pass. Whether one
          // follows is all this asks: the next pass reads them, a page within PAGE_BYTES.
          const tail = await listEvents(this.db.manager, executionId, principal.tenantId, cursor, 1);
          if (tail.length > 0) continue;
          writeEnd(res, verdict.end);
          break;
        }
        if (!(await this.keys.isStillValid(principal))) {
          writeEnd(res, 'key_revoked');
          break;
        }
        const { wakeAt } = verdict;
        if (pending) continue;
        await new Promise<void>((resolve) => {
          const poll = this.notifier.listening ? POLL_FALLBACK_MS * 5 : POLL_FALLBACK_MS;
          // A held execution's deadline ends the stream on time, not at the next poll. `wakeAt` is on the database's
          // clock: counted from its now (this process' clock plus the offset measured at the read).
          const untilDeadline = wakeAt ? Math.max(0, wakeAt.getTime() - (Date.now() + clockOffsetMs)) : poll;
          const timer = setTimeout(resolve, Math.min(poll, untilDeadline));
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
    } finally {
      close();
      if (canWrite(res)) res.end();
    }
  }

  /** The stream's place in this process (its tenant's share) and among the key's streams (all processes), or 429. */
  private async takeLease(principal: Principal): Promise<{ renew: () => void; release: () => void }> {
    const place = this.share.take(principal.tenantId);
    if (!place.taken) {
      throw tooManyStreams(
        place.bound === 'tenant'
          ? `at most ${place.limit} per tenant (all its keys together) in this API process`
          : `at most ${place.limit} in this API process (all tenants together)`,
      );
    }
    const acquired = await this.cap.acquire(principal.keyId).catch((error: unknown) => {
      place.release();
      throw error;
    });
    if (!acquired) {
      place.release();
      throw tooManyStreams(`at most ${this.config.MAX_STREAMS_PER_KEY} per key, across all API processes`);
    }
    return {
      renew: () => acquired.renew(),
      release: releaseOnce(() => {
        acquired.release();
        place.release();
      }),
    };
  }

  /**
   * What is read before the stream's 200: the execution (404), the cursors (400), the tenant's secrets (503); a HEAD is
   * answered here. The seq the stream resumes after.
   */
  private async setUp(
    principal: Principal,
    executionId: string,
    cursors: StreamCursors,
    since: ReturnType<TenantConnectors['secretsMoment']>,
    res: Response,
    head: boolean,
  ): Promise<number> {
    // Whether the tenant holds any secret is told by this read (after `since`): with none, the pages need no round trip.
    const execution = await findExecutionForAnswer(this.db.manager, this.connectors, executionId, principal.tenantId);
    if (!execution) throw Problem.notFound('Execution', executionId);
    // An unknown event, or a seq past the last one (none this client was sent), is refused naming where it came from,
    // as a page of the log refuses it; an `after` sent beside the header too, though the header is where it resumes.
    const fromHeader = await this.cursorOf(principal, executionId, cursors.lastEventId, 'Last-Event-ID');
    const fromAfter = await this.cursorOf(principal, executionId, cursors.after, 'after');
    // Each page is redacted with the tenant's secrets (below): secrets that do not open with this process's key are
    // answered as every other read answers them (503 secrets-unreadable), before the stream's 200 — not found at its
    // first page, which ended a stream already begun with no event and no `end` (a client reconnected every second).
    await this.connectors.answerRedactorOf(principal.tenantId, since);
    // A HEAD (express routes it here) gets the headers a GET would, and its answer ends: it has no body to wait for,
    // and held open it kept one of the key's streams (and a poll of the log) until the execution settled.
    if (head) streamHeaders(res).end();
    return fromHeader ?? fromAfter ?? 0;
  }

  /** The seq a cursor sent in `field` resumes after; undefined when it was not sent (absent or empty). */
  private async cursorOf(
    principal: Principal,
    executionId: string,
    sent: string | undefined,
    field: EventCursorField,
  ): Promise<number | undefined> {
    if (sent === undefined || sent === '') return undefined;
    return resolveEventCursor(this.db.manager, principal.tenantId, executionId, sent, field);
  }

  /**
   * The verdict on the execution as read now, judged by the database's clock at that read (the deadline and a
   * resolution's time were stamped by it; an API host whose clock ran ahead ended streams early), and how far that
   * clock is ahead of this process' (negative: behind).
   */
  private async verdict(
    tenantId: string,
    executionId: string,
  ): Promise<{ verdict: StreamVerdict; clockOffsetMs: number; executionStatus: ExecutionStatus | null }> {
    // One statement: the execution's status and its operations' as of the same snapshot, and the database's clock.
    streamVerdictReads.inc();
    const found = await findExecutionWithOperations(this.db.manager, executionId, tenantId);
    if (!found) return { verdict: { end: null, wakeAt: null }, clockOffsetMs: 0, executionStatus: null };
    const { execution, operations, databaseNow: now } = found;
    const clockOffsetMs = now.getTime() - Date.now();
    // The outcome is asked about only once nothing else can change: the one extra read, at the end.
    const outcomeCurrent =
      canStillChange(execution.status, operations) ||
      execution.criteria.length === 0 ||
      isOutcomeCurrent(
        execution.criteria,
        execution.criteriaResults,
        await this.criterionOperations(tenantId, operations),
      );
    const readWindowMs = this.config.CONNECTOR_TIMEOUT_MS + this.config.SEND_GRACE_MS;
    const verdict = streamVerdict(
      {
        executionStatus: execution.status,
        deadlineAt: execution.deadlineAt,
        operations,
        outcomeCurrent,
        lateReadUntil: lateReadUntil(operations, readWindowMs, now),
      },
      now,
    );
    return { verdict, clockOffsetMs, executionStatus: execution.status };
  }

  /** Each operation key's latest generation (a retry's), as the criteria see it, with the move that put it there. */
  private async criterionOperations(tenantId: string, operations: OperationEntity[]) {
    const latest = latestByKey(operations);
    const changes = await findLastStatusChanges(
      this.db.manager,
      [...latest.values()].map((op) => op.id),
      tenantId,
    );
    return (key: string) => {
      const op = latest.get(key);
      if (!op) return undefined;
      const lastChange = changes.get(op.id) ?? null;
      return {
        status: op.status,
        verificationMethod: op.verificationMethod,
        evidence: op.evidence,
        lastChange,
        contradicted: contradictedOnRecord(op),
      };
    };
  }

  /** On shutdown, end every stream so clients reconnect (with Last-Event-ID) to another process. */
  closeAll(): void {
    this.stopping = true;
    for (const res of this.active) if (canWrite(res)) res.end();
  }
}

/** Where a stream resumes, as the request sent it: the `Last-Event-ID` header and the `after` query parameter. */
export interface StreamCursors {
  lastEventId?: string;
  after?: string;
}

function tooManyStreams(detail: string): Problem {
  return new Problem(429, 'too-many-streams', 'Too many open streams', detail, {}, { 'retry-after': '5' });
}

interface Departure {
  /** The client closed the connection (or the response is over). */
  readonly gone: boolean;
  /** Called once when the client goes; at once if it is already gone. */
  onDeparture(callback: () => void): void;
  dispose(): void;
}

/**
 * Watches one request's client from the moment the handler starts, so no departure goes unseen. The socket and the
 * response say when the client leaves; the request does not: once a body has been read to its end (a GET may carry
 * one, and the JSON parser reads it), Node marks the request destroyed and emits its 'close' with the client still
 * there, and taking that for a departure would leave the client waiting for an answer that never comes.
 */
function watchDeparture(req: Request, res: Response): Departure {
  let gone = false;
  let callback: (() => void) | null = null;
  const socket = req.socket;
  const leave = () => {
    if (gone) return;
    gone = true;
    callback?.();
  };
  socket.on('close', leave);
  res.on('close', leave);
  // Closed before the handler ran (during authentication): the 'close' events have already been emitted.
  if (socket.destroyed || res.destroyed || res.closed) leave();
  return {
    get gone() {
      return gone || res.destroyed || res.closed || socket.destroyed;
    },
    onDeparture(fn) {
      callback = fn;
      if (this.gone) {
        gone = true;
        fn();
      }
    },
    dispose() {
      socket.off('close', leave);
      res.off('close', leave);
    },
  };
}

/** The answer's status and headers as an event stream: the same for a GET and the HEAD of it. */
function streamHeaders(res: Response): Response {
  res.status(200);
  res.setHeader('content-type', 'text/event-stream; charset=utf-8');
  res.setHeader('cache-control', 'no-cache, no-transform');
  // No Connection header: Node keeps the connection or closes it as the request asked. `keep-alive` set here overrode
  // a request's `Connection: close` (and HTTP/1.0): the connection stayed open after the stream's end.
  res.setHeader('x-accel-buffering', 'no');
  return res;
}
