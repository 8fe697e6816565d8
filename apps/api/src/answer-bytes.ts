import { Inject, Injectable } from '@nestjs/common';
import { VERITY_CONFIG, VerityConfig } from '@verity/platform';
import type { Request, Response } from 'express';
import { answerBytesInFlight, answersWaitingForBytes } from './metrics/metrics';
import { Problem } from './problem/problem';

/**
 * An answer at most this large (the stored text it holds) may be served ahead of a larger one waiting, when it fits in
 * what is left: a burst of reads of one tenant's largest executions does not hold back every other tenant's ordinary
 * reads. The size a page of a list is cut at (1 MiB).
 */
export const SMALL_ANSWER_BYTES = 1024 * 1024;

interface Waiter {
  bytes: number;
  grant: () => void;
}

/**
 * The stored text (bytes) of the rows the answers under way in this process hold, process-wide: what each answer of an
 * execution, a page of executions or a page of the review queue will read, present and write out, known from the
 * statement that reads the execution rows (before their operations are read). An answer takes its bytes before it reads
 * the rows and gives them back when it has been written out or its client has left. One answer larger than the whole
 * budget is served only when no other holds any of it. Past the budget an answer waits its turn (first come, first
 * served, a small one fitting what is left may go first), at most `waitMs`.
 *
 * Why bytes and not a count: one execution's answer can be ~20 MB of JSON, and the heap the API runs with (128 MB)
 * holds a handful of them being built at once; the count of requests in flight (64 per key) bounds nothing of that.
 */
export class AnswerBudget {
  private used = 0;
  private readonly queue: Waiter[] = [];

  constructor(
    readonly limit: number,
    readonly waitMs: number,
  ) {}

  /** Bytes held by the answers under way. */
  get inFlight(): number {
    return this.used;
  }

  /** Answers waiting for their bytes. */
  get waiting(): number {
    return this.queue.length;
  }

  /** Whether `bytes` more may be held now: within the budget, or the only answer holding any when larger than it. */
  private fits(bytes: number): boolean {
    return this.used === 0 || this.used + bytes <= this.limit;
  }

  /** Takes `bytes` now, or not at all: none waiting ahead (a small answer that fits may pass them) and room left. */
  tryTake(bytes: number): boolean {
    const head = this.queue[0];
    const mayPass =
      head === undefined ||
      (bytes <= SMALL_ANSWER_BYTES && head.bytes <= this.limit && this.used + bytes <= this.limit);
    if (!mayPass || !this.fits(bytes)) return false;
    this.add(bytes);
    return true;
  }

  /**
   * Waits its turn for `bytes`, at most `waitMs` (or until `gone` is called: the client left). Resolves true once they
   * are held, false when the wait ended without them.
   */
  take(bytes: number, waitMs: number): { taken: Promise<boolean>; cancel: () => void } {
    if (this.tryTake(bytes)) return { taken: Promise.resolve(true), cancel: () => undefined };
    let settle: (taken: boolean) => void = () => undefined;
    const taken = new Promise<boolean>((resolve) => (settle = resolve));
    const waiter: Waiter = {
      bytes,
      grant: () => {
        clearTimeout(timer);
        settle(true);
      },
    };
    const leave = () => {
      clearTimeout(timer);
      const at = this.queue.indexOf(waiter);
      if (at < 0) return;
      this.queue.splice(at, 1);
      this.report();
      settle(false);
      // The one behind may fit now.
      this.grantWaiting();
    };
    const timer = setTimeout(leave, waitMs);
    this.queue.push(waiter);
    this.report();
    return { taken, cancel: leave };
  }

  /** Gives back `bytes` held and lets those waiting in, in turn. */
  give(bytes: number): void {
    this.used -= bytes;
    this.grantWaiting();
    this.report();
  }

  private add(bytes: number): void {
    this.used += bytes;
    this.report();
  }

  private grantWaiting(): void {
    while (this.queue.length > 0 && this.fits(this.queue[0].bytes)) {
      const next = this.queue.shift()!;
      this.add(next.bytes);
      next.grant();
    }
    this.report();
  }

  private report(): void {
    answerBytesInFlight.set(this.used);
    answersWaitingForBytes.set(this.queue.length);
  }
}

/**
 * One answer's hold on the budget: `reserve` takes (or grows to) the bytes the answer will hold; everything held is
 * given back once the answer has been written out or its client has left ('close'), as the count of requests in flight
 * is (V1InFlight).
 */
export class AnswerHold {
  private held = 0;
  private closed = false;
  private cancelWait: (() => void) | undefined;
  private readonly deadline: number;

  constructor(
    private readonly budget: AnswerBudget,
    req: Request,
    res: Response,
  ) {
    this.deadline = Date.now() + budget.waitMs;
    res.once('close', () => this.close());
    if (res.closed || res.destroyed || req.socket.destroyed) this.close();
  }

  /** Holds `bytes` now if it may (true), keeping what it holds if that is as much already. */
  tryHold(bytes: number): boolean {
    // The client left: nothing more is read or built for it (the answer is never written).
    if (this.closed) throw this.refusal(bytes);
    if (bytes <= this.held) return true;
    if (!this.budget.tryTake(bytes - this.held)) return false;
    this.held = bytes;
    return true;
  }

  /**
   * Waits its turn for `bytes` (giving back what it holds first), within what is left of the answer's wait; past it
   * 503 answers-busy with Retry-After.
   */
  async wait(bytes: number): Promise<void> {
    if (this.closed) throw this.refusal(bytes);
    this.giveBack();
    const { taken, cancel } = this.budget.take(bytes, Math.max(0, this.deadline - Date.now()));
    this.cancelWait = cancel;
    const got = await taken;
    this.cancelWait = undefined;
    if (got) {
      if (this.closed) this.budget.give(bytes);
      else this.held = bytes;
      return;
    }
    throw this.refusal(bytes);
  }

  private refusal(bytes: number): Problem {
    return new Problem(
      503,
      'answers-busy',
      'Too many large answers in flight',
      `this API process is writing out as many answers as it holds memory for (ANSWER_BYTES_IN_FLIGHT, ` +
        `${this.budget.limit} bytes of stored text; this answer holds ${bytes}); nothing was carried out: ` +
        'send it again in a moment',
      {},
      { 'retry-after': '1' },
    );
  }

  private giveBack(): void {
    if (this.held > 0) this.budget.give(this.held);
    this.held = 0;
  }

  private close(): void {
    if (this.closed) return;
    this.closed = true;
    this.cancelWait?.();
    this.giveBack();
  }
}

/** The process's answer budget (AnswerBudget), and each answer's hold on it. */
@Injectable()
export class AnswerBytes {
  readonly budget: AnswerBudget;

  constructor(@Inject(VERITY_CONFIG) config: VerityConfig) {
    this.budget = new AnswerBudget(config.ANSWER_BYTES_IN_FLIGHT, config.ANSWER_BYTES_IN_FLIGHT_WAIT_MS);
  }

  forAnswer(req: Request, res: Response): AnswerHold {
    return new AnswerHold(this.budget, req, res);
  }
}

/**
 * `read` on a fresh snapshot until it has its bytes: `read` returns `{ bytes }` when the answer's bytes could not be
 * held at once (hold.tryHold refused them) — its snapshot is ended, so no Postgres session is held while it waits — and
 * is run again once they are held (the rows may have changed meanwhile: it checks again).
 */
export async function withAnswerBytes<T>(
  hold: AnswerHold,
  read: () => Promise<{ answer: T } | { bytes: number }>,
): Promise<T> {
  for (;;) {
    const outcome = await read();
    if ('answer' in outcome) return outcome.answer;
    await hold.wait(outcome.bytes);
  }
}
