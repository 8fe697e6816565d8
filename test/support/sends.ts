import type { OperationPatch, OperationSnapshot, SendGuard, TransitionService } from '@verity/persistence';
import { OperationStatus, VerificationMethod } from '@verity/status-model';
import type { EntityManager } from 'typeorm';

/** A PREPARED operation never sent, as a worker knows it before a move (the row a move is compared and set against). */
export function preparedSnapshot(id: string): OperationSnapshot {
  return { id, status: OperationStatus.PREPARED, attempt: 0, verificationMethod: VerificationMethod.READ_AFTER_WRITE };
}

/**
 * The SENT of a never-sent PREPARED operation (`preparedSnapshot`) as the dispatcher commits it, in `tx`: its attempt
 * bumped, under `sendGuard`, with `patch` (a send stamps `sent_at: 'now'`).
 */
export function sentFromPrepared(
  transitions: TransitionService,
  tx: EntityManager,
  id: string,
  sendGuard: SendGuard,
  patch?: OperationPatch,
) {
  return transitions.operation(tx, {
    operation: preparedSnapshot(id),
    to: OperationStatus.SENT,
    bumpAttempt: true,
    ...(patch ? { patch } : {}),
    sendGuard,
  });
}
