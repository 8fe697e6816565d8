import { ExecutionStatus, isTerminalExecution } from './execution';
import { OperationStatus, VerificationMethodValue, isSettledOperation } from './operation';

/**
 * What a webhook endpoint can subscribe to. Each is derived from rows of the append-only events table (the one place
 * every change is recorded), except `webhook.disabled`, which concerns an endpoint and not an execution.
 */
export const WEBHOOK_EVENT_TYPES = [
  'operation.settled',
  'operation.needs_review',
  'obligation.escalated',
  'execution.finished',
  'outcome.evaluated',
  'webhook.disabled',
] as const;
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number];

/**
 * Where one delivery of an announcement stands: owed (`pending`), taken by the endpoint (`delivered`), given up after
 * its attempts (`failed`), or not sent because the endpoint went away or stopped subscribing (`skipped`).
 */
export const WEBHOOK_DELIVERY_STATUSES = ['pending', 'delivered', 'failed', 'skipped'] as const;
export type WebhookDeliveryStatus = (typeof WEBHOOK_DELIVERY_STATUSES)[number];

/** The part of an event row that decides whether it is announced, and as what. */
export interface RecordedEvent {
  type: string;
  toStatus: string | null;
  /** The operation's verification method (for operation events): ACKNOWLEDGED is final only without read-back. */
  verificationMethod?: VerificationMethodValue | null;
  /**
   * For an `operation.rechecked` event: the status a person had written while the re-check read (its `after`). Set
   * only when the read showed the effect after a reviewer resolved the operation (see webhookEventFor). For an
   * `operation.acknowledged_late` event: FAILED when the provider's 2xx came back after the operation ended FAILED.
   * For an `operation.rejected_late` event: VERIFIED when the provider's rejection came back after it ended VERIFIED.
   */
  after?: string | null;
}

/**
 * The webhook an event is announced as, or null. An operation is settled when no automatic step will move it again
 * (VERIFIED, FAILED, CANCELLED, or ACKNOWLEDGED with no way to read it back); MANUAL_REVIEW is announced as needing a
 * person instead, and a later resolution arrives as a settlement. A re-check that found the effect of an operation a
 * reviewer had just resolved FAILED needs a person too: the record says "did not happen" of an effect the source
 * shows, and FAILED is final, so only a person can act on it (announced as needing review, with the event's data).
 * So does a provider's 2xx that came back after the operation ended FAILED (`operation.acknowledged_late`, `after`),
 * and its mirror, a rejection of the send that came back after the operation ended VERIFIED (`operation.rejected_late`,
 * `after: "VERIFIED"`): a receiver told "settled, VERIFIED" must also be told that the provider's own answer now
 * contradicts it (the operation's commit is `unknown`), and only a person can act on a final status.
 */
export function webhookEventFor(event: RecordedEvent): WebhookEventType | null {
  switch (event.type) {
    case 'operation.status_changed': {
      const to = event.toStatus as OperationStatus;
      if (to === OperationStatus.MANUAL_REVIEW) return 'operation.needs_review';
      return isSettledOperation(to, event.verificationMethod ?? '') ? 'operation.settled' : null;
    }
    case 'execution.status_changed':
      return isTerminalExecution(event.toStatus as ExecutionStatus) ? 'execution.finished' : null;
    case 'operation.rechecked':
    case 'operation.acknowledged_late':
      return event.after === OperationStatus.FAILED ? 'operation.needs_review' : null;
    case 'operation.rejected_late':
      return event.after === OperationStatus.VERIFIED ? 'operation.needs_review' : null;
    case 'obligation.escalated':
    case 'outcome.evaluated':
      return event.type;
    default:
      return null;
  }
}

/**
 * Whether an event is owed to an endpoint: it subscribes to the event's type, and the event happened while the
 * endpoint was enabled — whenever the outbox pass gets to it. An endpoint disabled since (after `eventAt`) still owes
 * it: the delivery is recorded, skipped (`webhookSkippedByDisable`), so it is on the endpoint's log and can be
 * redelivered once the endpoint is enabled again. Judged at the pass by whether it is disabled now, an event of the last scan interval
 * before a disable (or of any transaction that held the outbox back) was dropped for that endpoint without a trace.
 * Likewise an event the pass reaches late is not owed to an endpoint created after it, nor to one enabled again after
 * it happened while the endpoint was disabled (enabling sends only events from then on).
 */
export function webhookOwedTo(
  endpoint: {
    events: readonly string[];
    /** When it was created: an event before that was never its to receive. */
    createdAt: Date;
    disabledAt: Date | null;
    /** The last time it was disabled and then enabled again (both null until an admin enabled it). */
    lastDisabledAt: Date | null;
    reenabledAt: Date | null;
  },
  type: WebhookEventType,
  eventAt: Date,
): boolean {
  if (!endpoint.events.includes(type)) return false;
  const at = eventAt.getTime();
  if (at < endpoint.createdAt.getTime()) return false;
  if (endpoint.disabledAt !== null && at >= endpoint.disabledAt.getTime()) return false;
  // While it was disabled before its last enable: enabling sends only events from then on.
  const { lastDisabledAt, reenabledAt } = endpoint;
  return !(lastDisabledAt && reenabledAt && at >= lastDisabledAt.getTime() && at < reenabledAt.getTime());
}

/**
 * Whether a delivery owed (`webhookOwedTo`) is written already skipped: the endpoint was disabled after the event
 * happened (it still is, or was until its last enable). A disable skips the endpoint's pending deliveries in its own
 * transaction, so an enable never sends what was owed before it; a delivery the outbox pass writes only later (a slow
 * pass, a transaction that held the event back) is skipped the same way, not sent by an enable that came first. It is
 * on the endpoint's log, and can be redelivered.
 */
export function webhookSkippedByDisable(
  endpoint: { disabledAt: Date | null; lastDisabledAt: Date | null },
  eventAt: Date,
): boolean {
  if (endpoint.disabledAt !== null) return true;
  return endpoint.lastDisabledAt !== null && eventAt.getTime() < endpoint.lastDisabledAt.getTime();
}

/**
 * Whether a delivery's attempt is skipped, not sent, at its turn: its endpoint is disabled, or it is the first round
 * (no redelivery asked for) of a delivery owed before the endpoint's last disable (`webhookSkippedByDisable`). A
 * disable skips what is pending in its own transaction, but not a delivery it cannot see or take: one the outbox pass
 * was writing at that moment (it read the endpoint enabled), or one another worker held while recording its attempt.
 * Sent at its turn after an enable, it was the enable sending an event from before the disable. A redelivery (a later
 * round) was asked for since, and is sent.
 */
export function webhookAttemptSkippedByDisable(
  endpoint: { disabledAt: Date | null; lastDisabledAt: Date | null },
  eventAt: Date,
  round: number,
): boolean {
  if (endpoint.disabledAt !== null) return true;
  return round === 0 && webhookSkippedByDisable(endpoint, eventAt);
}
