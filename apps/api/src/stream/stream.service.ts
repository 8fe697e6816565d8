import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { findExecution, findOperations, listEvents } from '@verity/persistence';
import { VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { PRODUCER_REDIS } from '@verity/queues';
import type { Redis } from 'ioredis';
import { isSettledOperation, isTerminalExecution } from '@verity/status-model';
import type { Request, Response } from 'express';
import { DataSource } from 'typeorm';
import { ApiKeyService } from '../auth/api-key.service';
import type { Principal } from '../auth/principal';
import { Problem } from '../problem/problem';
import { ExecutionsService } from '../executions/executions.service';
import { presentEvent } from '../executions/presenter';
import { EventNotifier } from './event-notifier.service';
import { StreamCap } from './stream-cap';

const POLL_FALLBACK_MS = 2_000;

/**
 * SSE over the append-only log (I11). The cursor is the per-execution `seq`, whose order is commit order, so
 * resuming after an event id can neither skip nor repeat. Every wake-up (announcement, poll, heartbeat) re-reads the
 * table.
 */
@Injectable()
export class StreamService {
  private readonly active = new Set<Response>();
  private readonly cap: StreamCap;

  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly executions: ExecutionsService,
    private readonly notifier: EventNotifier,
    private readonly keys: ApiKeyService,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
    @Inject(PRODUCER_REDIS) redis: Redis,
  ) {
    // A lease outlives three missed heartbeats, so only a dead process' streams expire.
    this.cap = new StreamCap(redis, config.QUEUE_PREFIX, config.MAX_STREAMS_PER_KEY, config.SSE_HEARTBEAT_MS * 3);
  }

  async open(principal: Principal, executionId: string, lastEventId: string | undefined, req: Request, res: Response) {
    // Listened to from the first line: a client that leaves during the setup below (before or while the lease is
    // taken) closes before any later listener could hear it, and its lease would be renewed until the execution ends.
    const client = watchDeparture(req, res);
    try {
      await this.serve(principal, executionId, lastEventId, res, client);
    } finally {
      client.dispose();
    }
  }

  private async serve(
    principal: Principal,
    executionId: string,
    lastEventId: string | undefined,
    res: Response,
    client: Departure,
  ) {
    const execution = await findExecution(this.db.manager, executionId, principal.tenantId);
    if (!execution) throw Problem.notFound('Execution', executionId);
    let cursor = await this.executions.resolveCursor(executionId, lastEventId);
    // Gone already: nothing to take, nobody to answer.
    if (client.gone) return;
    const lease = await this.cap.acquire(principal.keyId);
    if (lease && client.gone) {
      // Left while the lease was being taken.
      lease.release();
      return;
    }
    if (!lease) {
      throw new Problem(
        429,
        'too-many-streams',
        'Too many open streams',
        `at most ${this.config.MAX_STREAMS_PER_KEY} per key, across all API processes`,
        {},
        { 'retry-after': '5' },
      );
    }
    this.active.add(res);

    res.status(200);
    res.setHeader('content-type', 'text/event-stream; charset=utf-8');
    res.setHeader('cache-control', 'no-cache, no-transform');
    res.setHeader('connection', 'keep-alive');
    res.setHeader('x-accel-buffering', 'no');
    res.flushHeaders();
    res.write('retry: 1000\n\n');

    let closed = false;
    let wake: (() => void) | null = null;
    const poke = () => wake?.();
    const unsubscribe = this.notifier.subscribe(executionId, poke);
    const unwatchKeys = this.keys.onRevocation(poke);
    const heartbeat = setInterval(() => {
      // Renewed only for a client still there: a lease is never kept alive for a connection that is gone.
      if (client.gone) return close();
      if (!closed) res.write(': heartbeat\n\n');
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

    try {
      while (!closed) {
        let pending = false;
        wake = () => {
          pending = true;
        };
        const events = await listEvents(this.db.manager, executionId, cursor, 500);
        for (const event of events) {
          const view = presentEvent(event);
          res.write(`id: ${view.id}\nevent: ${view.type}\ndata: ${JSON.stringify(view)}\n\n`);
          cursor = view.seq;
        }
        if (events.length === 500) continue;
        if (await this.settled(executionId)) {
          // Events written in the same commit as the settling change were read above or will be on this pass.
          const tail = await listEvents(this.db.manager, executionId, cursor, 500);
          if (tail.length > 0) continue;
          res.write(`event: end\ndata: {"reason":"settled"}\n\n`);
          break;
        }
        if (!(await this.keys.isStillValid(principal))) {
          res.write(`event: end\ndata: {"reason":"key_revoked"}\n\n`);
          break;
        }
        if (pending) continue;
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, this.notifier.listening ? POLL_FALLBACK_MS * 5 : POLL_FALLBACK_MS);
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
    } finally {
      close();
      res.end();
    }
  }

  private async settled(executionId: string): Promise<boolean> {
    const execution = await findExecution(this.db.manager, executionId);
    if (!execution || !isTerminalExecution(execution.status)) return false;
    const operations = await findOperations(this.db.manager, executionId);
    return operations.every((op) => isSettledOperation(op.status, op.verificationMethod));
  }

  /** On shutdown, end every stream so clients reconnect (with Last-Event-ID) to another process. */
  closeAll(): void {
    for (const res of this.active) res.end();
  }
}

interface Departure {
  /** The client closed the connection (or the response is over). */
  readonly gone: boolean;
  /** Called once when the client goes; at once if it is already gone. */
  onDeparture(callback: () => void): void;
  dispose(): void;
}

/** Watches one request's client from the moment the handler starts, so no departure goes unseen. */
function watchDeparture(req: Request, res: Response): Departure {
  let gone = false;
  let callback: (() => void) | null = null;
  const leave = () => {
    if (gone) return;
    gone = true;
    callback?.();
  };
  req.on('close', leave);
  res.on('close', leave);
  // Closed before the handler ran (during authentication): the 'close' events have already been emitted.
  if (req.destroyed || res.destroyed || res.closed || req.socket.destroyed) leave();
  return {
    get gone() {
      return gone || res.destroyed || res.closed || req.socket.destroyed;
    },
    onDeparture(fn) {
      callback = fn;
      if (this.gone) {
        gone = true;
        fn();
      }
    },
    dispose() {
      req.off('close', leave);
      res.off('close', leave);
    },
  };
}
