/**
 * What the lifecycle and the sender decide from a read of the source before a send: the preparation phases an
 * execution still has to pass, what a context read means for one PREPARED operation, and whether an approval still
 * holds at dispatch. Pure: the workers make the reads and the writes, these functions say which.
 */
import { ExecutionStatus } from './execution';
import { sameJson, withKeptMemberNames } from './json-path';
import { VerificationMethod, VerificationMethodValue } from './operation';

/**
 * I15: an irreversible operation whose agent stated what the source must hold (expected_state) is never sent without
 * that state having been read. (No built-in connector declares a context read that is required by itself.)
 */
export function mustReadPrecondition(op: {
  irreversible: boolean;
  expectedState: Record<string, unknown> | null;
}): boolean {
  return op.irreversible && op.expectedState !== null && Object.keys(op.expectedState).length > 0;
}

/** The execution statuses before `running`, in the order an execution passes them (docs/contract.md §3). */
export const PREPARING_EXECUTION_STATUSES: readonly ExecutionStatus[] = [
  ExecutionStatus.CREATED,
  ExecutionStatus.VALIDATING,
  ExecutionStatus.RESOLVING_CONTEXT,
  ExecutionStatus.PLANNING,
];

export interface PreparePhases {
  /** The request is checked again (connector, action, params): rows can be written by older versions or by hand. */
  validate: boolean;
  /** The connectors' context reads are made and applied (while resolving_context). */
  readContexts: boolean;
  /** The moves still to make, in order, to reach `running`. */
  moves: ExecutionStatus[];
}

/**
 * What preparing an execution found at `from` still involves. A job that lost its race half-way, or a crash, leaves
 * an execution anywhere in the chain: each phase is done once, from wherever it stands.
 */
export function preparePhases(from: ExecutionStatus): PreparePhases {
  const index = PREPARING_EXECUTION_STATUSES.indexOf(from);
  if (index < 0) throw new Error(`not a preparing execution status: ${from}`);
  return {
    validate: index <= PREPARING_EXECUTION_STATUSES.indexOf(ExecutionStatus.VALIDATING),
    readContexts: index <= PREPARING_EXECUTION_STATUSES.indexOf(ExecutionStatus.RESOLVING_CONTEXT),
    moves: [...PREPARING_EXECUTION_STATUSES.slice(index + 1), ExecutionStatus.RUNNING],
  };
}

/** A connector's context read, as far as the decision needs it. */
export type ContextRead =
  | { kind: 'unreachable' }
  | { kind: 'state'; state: Record<string, unknown>; requestedStatePresent: boolean; conflicts: string[] };

export type ContextVerdict =
  /** Unreadable, and the precondition must be read (I15): not sent blind; read again later or held. */
  | { kind: 'read-again' }
  /** Unreadable, but nothing requires the read: it proceeds, the gap recorded. */
  | { kind: 'proceed-unread' }
  /** The requested state is already there and can be read back: VERIFIED, no change required (not caused by us). */
  /**
   * `expectationsMissed`: where the agent's expected_state differed from the source that already holds the requested
   * state (it expected the effect not made yet): recorded as a knowledge conflict, not held — there is nothing to send,
   * and a hold could only end in a cancel while the state it asked for is there.
   */
  | { kind: 'no-change-required'; expectationsMissed: string[] }
  /** The source contradicts the request or the agent's expected_state: recorded; `hold` → MANUAL_REVIEW. */
  | { kind: 'conflict'; conflicts: string[]; hold: boolean }
  /** The source agrees: it may proceed. */
  | { kind: 'agrees' };

/**
 * What one context read means for one PREPARED operation. A KNOWLEDGE_CONFLICT holds an irreversible operation for a
 * human; a reversible one proceeds with the conflict recorded.
 */
export function judgeContext(
  op: {
    irreversible: boolean;
    expectedState: Record<string, unknown> | null;
    verificationMethod: VerificationMethodValue;
  },
  read: ContextRead,
): ContextVerdict {
  if (read.kind === 'unreachable')
    return mustReadPrecondition(op) ? { kind: 'read-again' } : { kind: 'proceed-unread' };
  // Own members of the source's state only: `__proto__` or `constructor` name what every object inherits, not state.
  const sourceHas = (key: string) => (Object.hasOwn(read.state, key) ? read.state[key] : undefined);
  const expectedMismatches = Object.entries(op.expectedState ?? {})
    // The source's state is kept with a target's marker-named members escaped (keptMemberName): so is the expectation.
    // As JSON values: an expected_state comes back from jsonb with its objects' members reordered (shortest name
    // first), and the source's read keeps its own order.
    .filter(([key, expected]) => !sameJson(sourceHas(key), withKeptMemberNames(expected)))
    .map(
      ([key, expected]) => `${key}: expected ${JSON.stringify(expected)}, source has ${JSON.stringify(sourceHas(key))}`,
    );
  if (read.requestedStatePresent && op.verificationMethod === VerificationMethod.READ_AFTER_WRITE) {
    return { kind: 'no-change-required', expectationsMissed: expectedMismatches };
  }
  const conflicts = [...read.conflicts, ...expectedMismatches];
  if (conflicts.length === 0) return { kind: 'agrees' };
  return { kind: 'conflict', conflicts, hold: op.irreversible };
}

/** One operation of an execution being prepared, as far as `preparesWithoutWrites` needs it. */
export interface PreparingOperation {
  prepared: boolean;
  irreversible: boolean;
  expectedState: Record<string, unknown> | null;
  verificationMethod: VerificationMethodValue;
  /** Approval required (by the agent or the tenant's policy): planning will request it. */
  approvalRequired: boolean;
  /** Any approval recorded on the row (an early decision): the context read becomes its baseline. */
  approvalRecorded: boolean;
  /** Its context read, when its connector has one and this preparation reads contexts. */
  context?: ContextRead;
}

/**
 * Whether preparing writes nothing but the execution's own moves: every PREPARED operation's context read (if any)
 * agrees, and no approval is to be requested or has a baseline to record. Then the moves need no transaction and no
 * lock on the operations: one compare-and-set statement on the execution's status decides, and anything that moved
 * meanwhile makes it lose. Any other preparation writes to operations, under their lock, in one transaction.
 */
export function preparesWithoutWrites(operations: PreparingOperation[]): boolean {
  return operations.every(
    (op) =>
      !op.prepared ||
      (!op.approvalRequired &&
        !op.approvalRecorded &&
        (op.context === undefined || judgeContext(op, op.context).kind === 'agrees')),
  );
}

export type Staleness = 'approval.stale_authority' | 'approval.stale_baseline';

/** Why a grant no longer carries authority: it expired, or the key that gave it was revoked since. */
export type StaleAuthorityCause = 'expired' | 'key_revoked';

export type GrantAtDispatch =
  /** The approval is not (or no longer) granted: nothing is sent. */
  | { kind: 'not-granted' }
  /** The grant expired, or its deciding key was revoked: stale authority, back for approval. */
  | { kind: 'stale'; staleness: 'approval.stale_authority'; cause: StaleAuthorityCause }
  /** The grant names the source as the reviewer saw it: it must be read again before the send. */
  | { kind: 'read-baseline' }
  /** It holds. */
  | { kind: 'valid' };

/**
 * Approval is re-validated at dispatch: an expired grant is stale authority, and so is one whose deciding key has been
 * revoked since (`deciderStands` false: a key revoked for cause withdraws the approvals it gave that are not used yet);
 * a grant given on a baseline is checked against the source again (when the connector can read it), and a changed
 * source is a stale baseline.
 */
export function grantAtDispatch(
  approval: { state: string; expires_at?: string; baseline?: unknown } | null | undefined,
  now: Date,
  connectorReadsContext: boolean,
  deciderStands = true,
): GrantAtDispatch {
  if (approval?.state !== 'granted') return { kind: 'not-granted' };
  if (!deciderStands) return { kind: 'stale', staleness: 'approval.stale_authority', cause: 'key_revoked' };
  if (approval.expires_at && new Date(approval.expires_at).getTime() <= now.getTime()) {
    return { kind: 'stale', staleness: 'approval.stale_authority', cause: 'expired' };
  }
  if (connectorReadsContext && approval.baseline !== undefined) return { kind: 'read-baseline' };
  return { kind: 'valid' };
}

/**
 * The source read again at dispatch: a state other than the one the reviewer granted on makes the grant stale. Compared
 * as JSON values (sameJson): the baseline comes back from jsonb with its members reordered, the fresh read in the
 * connector's order; compared as text, every grant on a state of two members or more was withdrawn as stale.
 */
export function baselineStaleness(atGrant: unknown, now: Record<string, unknown>): 'approval.stale_baseline' | null {
  return sameJson(now, atGrant) ? null : 'approval.stale_baseline';
}
