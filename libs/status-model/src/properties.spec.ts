import fc from 'fast-check';
import { IllegalTransitionError, StatusModelErrorCode } from './errors';
import { EXECUTION_STATUSES, ExecutionStatus, canMoveExecution, isTerminalExecution } from './execution';
import {
  Actor,
  OPERATION_STATUSES,
  OPERATION_TRANSITIONS,
  OperationStatus,
  TERMINAL_REASONS,
  TerminalReason,
  VerificationMethod,
  VerificationMethodValue,
  isTerminalOperation,
} from './operation';
import {
  OperationTransitionContext,
  assertExecutionTransition,
  assertOperationTransition,
  isOperationTransitionAllowed,
} from './validate';

const S = OperationStatus;
const RUNS = { numRuns: 500 };
const TABLE = new Set(OPERATION_TRANSITIONS.map((r) => `${r.from}>${r.to}`));

const statusArb = fc.constantFrom(...OPERATION_STATUSES);
const actorArb = fc.constantFrom<Actor | undefined>('system', 'human', undefined);
const reasonArb = fc.option(fc.constantFrom(...TERMINAL_REASONS), {
  nil: null,
  freq: 2,
}) as fc.Arbitrary<TerminalReason | null>;
const methodArb = fc.constantFrom<VerificationMethodValue>(VerificationMethod.READ_AFTER_WRITE, '');

/** One attempted move: a target and the context the caller claims. */
interface Step {
  to: OperationStatus;
  actor: Actor | undefined;
  terminalReason: TerminalReason | null;
  verificationMethod: VerificationMethodValue;
  everSentClaim: boolean;
  noChangeRequired: boolean;
}
const stepArb: fc.Arbitrary<Step> = fc.record({
  to: statusArb,
  actor: actorArb,
  terminalReason: reasonArb,
  verificationMethod: methodArb,
  everSentClaim: fc.boolean(),
  noChangeRequired: fc.boolean(),
});
/** Walks of up to 60 attempted moves (size 'max' so that long walks are common, not just short ones). */
const walkArb = fc.array(stepArb, { maxLength: 60, size: 'max' });
const contextArb: fc.Arbitrary<OperationTransitionContext> = fc.record({
  actor: actorArb,
  terminalReason: reasonArb,
  verificationMethod: methodArb,
  everSent: fc.boolean(),
  noChangeRequired: fc.boolean(),
});

interface Move {
  from: OperationStatus;
  to: OperationStatus;
  context: OperationTransitionContext;
}

/**
 * Apply only the moves the model accepts. everSent is tracked: once SENT has been entered it stays true; before
 * that the caller's random claim is used (the model must hold even against a wrong claim).
 */
function walk(start: OperationStatus, steps: readonly Step[], startEverSent = false): Move[] {
  let status = start;
  let everSent = startEverSent;
  const accepted: Move[] = [];
  for (const step of steps) {
    const context: OperationTransitionContext = {
      actor: step.actor,
      terminalReason: step.terminalReason,
      verificationMethod: step.verificationMethod,
      everSent: everSent || step.everSentClaim,
      noChangeRequired: step.noChangeRequired,
    };
    if (!isOperationTransitionAllowed(status, step.to, context)) continue;
    accepted.push({ from: status, to: step.to, context });
    status = step.to;
    if (status === S.SENT) everSent = true;
  }
  return accepted;
}

describe('operation state machine properties', () => {
  it('the walk generator is not vacuous: walks from PREPARED reach every status and every transition', () => {
    const seen = new Set<string>();
    const moves = new Set<string>();
    for (const steps of fc.sample(walkArb, { numRuns: 3000, seed: 42 })) {
      for (const m of walk(S.PREPARED, steps)) {
        seen.add(m.to);
        moves.add(`${m.from}>${m.to}`);
      }
    }
    expect([...seen].sort()).toEqual(OPERATION_STATUSES.filter((s) => s !== S.PREPARED).sort());
    expect(moves).toEqual(TABLE);
  });

  it('(1) a random walk never leaves a terminal state', () => {
    fc.assert(
      fc.property(statusArb, walkArb, (start, steps) => {
        let terminalReached = isTerminalOperation(start);
        for (const move of walk(start, steps)) {
          expect(terminalReached).toBe(false);
          if (isTerminalOperation(move.to)) terminalReached = true;
        }
      }),
      RUNS,
    );
  });

  it('(1b) a terminal status refuses every target under every context', () => {
    fc.assert(
      fc.property(fc.constantFrom(S.VERIFIED, S.FAILED, S.CANCELLED), statusArb, contextArb, (from, to, context) => {
        expect(isOperationTransitionAllowed(from, to, context)).toBe(false);
      }),
      RUNS,
    );
  });

  it('(2) nothing reaches SENT from SENT, ACKNOWLEDGED, UNKNOWN or RECONCILING under any context (I3, I5)', () => {
    fc.assert(
      fc.property(fc.constantFrom(S.SENT, S.ACKNOWLEDGED, S.UNKNOWN, S.RECONCILING), contextArb, (from, context) => {
        expect(isOperationTransitionAllowed(from, S.SENT, context)).toBe(false);
        expect(() => assertOperationTransition(from, S.SENT, context)).toThrow(
          expect.objectContaining({ code: StatusModelErrorCode.ILLEGAL_TRANSITION }),
        );
      }),
      RUNS,
    );
  });

  it('(2b) in a walk, once an operation has been SENT it is never SENT again', () => {
    fc.assert(
      fc.property(walkArb, (steps) => {
        const enteredSent = walk(S.PREPARED, steps).filter((m) => m.to === S.SENT);
        expect(enteredSent.length).toBeLessThanOrEqual(1);
      }),
      RUNS,
    );
  });

  it("(3) with verificationMethod '' and actor 'system', VERIFIED is never reachable from PREPARED", () => {
    const systemStep = stepArb.map((s) => ({ ...s, actor: 'system' as const, verificationMethod: '' as const }));
    fc.assert(
      fc.property(fc.array(systemStep, { maxLength: 60, size: 'max' }), (steps) => {
        const moves = walk(S.PREPARED, steps);
        expect(moves.filter((m) => m.to === S.VERIFIED)).toEqual([]);
      }),
      RUNS,
    );
  });

  it('(5) every move the model accepts is in OPERATION_TRANSITIONS', () => {
    fc.assert(
      fc.property(statusArb, statusArb, contextArb, (from, to, context) => {
        if (isOperationTransitionAllowed(from, to, context)) expect(TABLE.has(`${from}>${to}`)).toBe(true);
      }),
      { numRuns: 2000 },
    );
    fc.assert(
      fc.property(statusArb, walkArb, (start, steps) => {
        for (const m of walk(start, steps)) expect(TABLE.has(`${m.from}>${m.to}`)).toBe(true);
      }),
      RUNS,
    );
  });

  it('(6) VERIFIED is entered only with read_after_write or by a human resolution from MANUAL_REVIEW (I6)', () => {
    fc.assert(
      fc.property(statusArb, walkArb, (start, steps) => {
        for (const m of walk(start, steps).filter((move) => move.to === S.VERIFIED)) {
          const human = m.from === S.MANUAL_REVIEW && m.context.actor === 'human';
          expect(human || m.context.verificationMethod === VerificationMethod.READ_AFTER_WRITE).toBe(true);
          if (m.from === S.PREPARED) expect(m.context.noChangeRequired).toBe(true);
        }
      }),
      RUNS,
    );
  });

  it('(7) an accepted move carries a reason the rule lists, and one whenever the rule requires it', () => {
    fc.assert(
      fc.property(statusArb, walkArb, (start, steps) => {
        for (const m of walk(start, steps)) {
          const rule = OPERATION_TRANSITIONS.find((r) => r.from === m.from && r.to === m.to)!;
          const reason = m.context.terminalReason ?? null;
          if (rule.reasonRequired) expect(reason).not.toBeNull();
          if (reason !== null) expect(rule.reasons).toContain(reason);
          if (rule.humanOnly) expect(m.context.actor).toBe('human');
          if (rule.neverSentOnly) expect(m.context.everSent).toBe(false);
        }
      }),
      RUNS,
    );
  });

  it('(8) an uncertain send is never recorded as FAILED with CONNECTOR_ERROR (I4)', () => {
    fc.assert(
      fc.property(statusArb, contextArb, (from, context) => {
        const withError = { ...context, terminalReason: TerminalReason.CONNECTOR_ERROR };
        expect(isOperationTransitionAllowed(from, S.FAILED, withError)).toBe(false);
      }),
      RUNS,
    );
  });
});

describe('execution state machine properties', () => {
  const executionArb = fc.constantFrom(...EXECUTION_STATUSES);

  it('(4) a random execution walk never leaves a terminal status', () => {
    fc.assert(
      fc.property(executionArb, fc.array(executionArb, { maxLength: 80, size: 'max' }), (start, targets) => {
        let status: ExecutionStatus = start;
        let terminalReached = isTerminalExecution(start);
        for (const to of targets) {
          let accepted = true;
          try {
            assertExecutionTransition(status, to);
          } catch (error) {
            if (!(error instanceof IllegalTransitionError)) throw error;
            accepted = false;
          }
          if (accepted !== canMoveExecution(status, to))
            throw new Error(`gate and table disagree on ${status} -> ${to}`);
          if (!accepted) continue;
          if (terminalReached) throw new Error(`left a terminal status: ${status} -> ${to}`);
          status = to;
          if (isTerminalExecution(status)) terminalReached = true;
        }
      }),
      RUNS,
    );
  });

  it('(4b) a terminal execution refuses every target with ILLEGAL_TRANSITION', () => {
    fc.assert(
      fc.property(fc.constantFrom(...EXECUTION_STATUSES.filter(isTerminalExecution)), executionArb, (from, to) => {
        let code: StatusModelErrorCode | undefined;
        try {
          assertExecutionTransition(from, to);
        } catch (error) {
          code = (error as IllegalTransitionError).code;
        }
        expect(code).toBe(StatusModelErrorCode.ILLEGAL_TRANSITION);
      }),
      RUNS,
    );
  });
});
