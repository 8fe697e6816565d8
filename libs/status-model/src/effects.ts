import { OperationStatus, VerificationMethodValue, isSettledOperation } from './operation';

export type EffectsSummary = 'all_verified' | 'partial' | 'none' | 'unverified' | 'unknown';

export interface Effects {
  counts: Record<OperationStatus, number>;
  summary: EffectsSummary;
}

export interface OperationForEffects {
  status: OperationStatus;
  verificationMethod: VerificationMethodValue;
}

const UNCERTAIN: readonly OperationStatus[] = [
  OperationStatus.SENT,
  OperationStatus.UNKNOWN,
  OperationStatus.RECONCILING,
  OperationStatus.MANUAL_REVIEW,
];
const NO_EFFECT: readonly OperationStatus[] = [
  OperationStatus.FAILED,
  OperationStatus.CANCELLED,
  OperationStatus.PREPARED,
];

/**
 * The effects summary of DESIGN §3, separate from the execution status:
 * unknown — some effect may or may not exist; all_verified — every operation VERIFIED;
 * none — no effect exists; partial — some verified, some never happened; unverified — effects acknowledged
 * but not (all) read back.
 */
export function summarizeEffects(operations: readonly OperationForEffects[]): Effects {
  const counts = Object.fromEntries(Object.values(OperationStatus).map((s) => [s, 0])) as Record<
    OperationStatus,
    number
  >;
  for (const op of operations) counts[op.status] += 1;
  const total = operations.length;
  let summary: EffectsSummary;
  if (UNCERTAIN.some((s) => counts[s] > 0) || operations.some((op) => !isSettledOrQuiet(op))) {
    summary = 'unknown';
  } else if (total > 0 && counts.VERIFIED === total) {
    summary = 'all_verified';
  } else if (counts.VERIFIED === 0 && counts.ACKNOWLEDGED === 0) {
    summary = 'none';
  } else if (NO_EFFECT.some((s) => counts[s] > 0)) {
    summary = 'partial';
  } else {
    summary = 'unverified';
  }
  return { counts, summary };
}

function isSettledOrQuiet(op: OperationForEffects): boolean {
  // PREPARED has no effect yet; an ACKNOWLEDGED awaiting read-back is still an effect we cannot vouch for.
  return op.status === OperationStatus.PREPARED || isSettledOperation(op.status, op.verificationMethod);
}
