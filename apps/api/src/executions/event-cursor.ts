import { eventSeqOf, findExecution } from '@verity/persistence';
import { textPrefix } from '@verity/status-model';
import type { EntityManager } from 'typeorm';
import { Problem } from '../problem/problem';

/** Where a cursor came from: the `after` query parameter, or a stream's `Last-Event-ID` header. */
export type EventCursorField = 'after' | 'Last-Event-ID';

/**
 * An event id (or a seq number) → the seq to continue after: where a page of the event log or a stream resumes. An
 * unknown id is a client error, not "from 0", naming the parameter or header the caller sent it in; so is a seq past
 * the execution's last event: none the client can have been given (seqs are committed before they are shown), and a
 * stream would wait, silently, past every event it will ever have. The log and the stream judge a cursor alike here.
 */
export async function resolveEventCursor(
  db: EntityManager,
  tenantId: string,
  executionId: string,
  after: string | undefined,
  field: EventCursorField = 'after',
): Promise<number> {
  if (after === undefined || after === '') return 0;
  if (/^\d{1,15}$/.test(after)) {
    const seq = Number(after);
    if (seq === 0) return 0;
    // Read now, after the request's own read of the execution: an event committed meanwhile is not refused.
    const last = Number((await findExecution(db, executionId, tenantId))?.eventSeq ?? 0);
    if (seq > last) {
      throw Problem.validation([
        { field, rule: 'known_event', message: `seq ${seq} is past the last event of this execution (${last})` },
      ]);
    }
    return seq;
  }
  const seq = /^evt_[0-9a-z]{1,40}$/.test(after) ? await eventSeqOf(db, executionId, tenantId, after) : null;
  if (seq === null) {
    throw Problem.validation([
      { field, rule: 'known_event', message: `no event ${textPrefix(after, 100)} in this execution` },
    ]);
  }
  return seq;
}
