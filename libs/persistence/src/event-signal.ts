import type { DataSource, EntityManager, QueryRunner } from 'typeorm';
import type { Queryable } from './sql';

/** Told the ids of executions that have new committed events (the API's streams wake up and read the table). */
export type EventSignal = (executionId: string) => void;

/**
 * The signal belongs to the data source the events are written through, not to the process: whoever owns a data
 * source says how its commits are announced, and a data source nobody registered for announces nothing.
 */
const signals = new WeakMap<DataSource, EventSignal>();

/**
 * Each app registers how it announces new events written through its data source (a Redis PUBLISH, libs/queues).
 * The announcement only says "look": streams read the events table, and poll it anyway, so a lost announcement
 * delays an event, never loses it. `null` stops the announcements (at shutdown).
 */
export function announceEventsWith(dataSource: DataSource, signal: EventSignal | null): void {
  if (signal) signals.set(dataSource, signal);
  else signals.delete(dataSource);
}

/** The signal of a data source; what `db` writes through is its `connection` (a transaction's manager has it too). */
function signalOf(dataSource: DataSource | undefined): EventSignal | undefined {
  return dataSource ? signals.get(dataSource) : undefined;
}

const PENDING = 'verityEventsCommitted';
const AFTER_COMMIT = 'verityAfterCommit';

/**
 * Runs `effect` once what `db` wrote is committed: now outside a transaction, at the commit inside one (see
 * `transaction` in sql.ts), never after a rollback. For what counts committed work (metrics), not for the work itself.
 */
export function afterCommit(db: Queryable, effect: () => void): void {
  const runner = (db as Partial<EntityManager>).queryRunner;
  if (runner?.isTransactionActive) {
    const data = runner.data as { [AFTER_COMMIT]?: (() => void)[] };
    (data[AFTER_COMMIT] ??= []).push(effect);
    return;
  }
  effect();
}

/**
 * Called by every event writer. Outside a transaction the event is already committed: announce it now. Inside one,
 * announce it when the transaction commits (see `transaction` in sql.ts) — never before, or a stream could look too
 * early and then wait for the next poll.
 */
export function eventsWritten(db: Queryable, executionId: string): void {
  const runner = (db as Partial<EntityManager>).queryRunner;
  if (runner?.isTransactionActive) {
    const data = runner.data as { [PENDING]?: Set<string> };
    (data[PENDING] ??= new Set()).add(executionId);
    return;
  }
  signalOf((db as Partial<EntityManager>).connection)?.(executionId);
}

/** After a commit: announce what the transaction wrote. */
export function announceCommitted(runner: QueryRunner | undefined): void {
  const data = runner?.data as { [PENDING]?: Set<string>; [AFTER_COMMIT]?: (() => void)[] } | undefined;
  const effects = data?.[AFTER_COMMIT];
  if (data && effects) {
    delete data[AFTER_COMMIT];
    for (const effect of effects) effect();
  }
  const pending = data?.[PENDING];
  if (!pending) return;
  delete data[PENDING];
  const signal = signalOf(runner?.connection);
  for (const executionId of pending) signal?.(executionId);
}

/** After a rollback: what the transaction wrote is gone, and so is the announcement. */
export function forgetUncommitted(runner: QueryRunner | undefined): void {
  const data = runner?.data as { [PENDING]?: Set<string>; [AFTER_COMMIT]?: unknown } | undefined;
  if (data) {
    delete data[PENDING];
    delete data[AFTER_COMMIT];
  }
}
