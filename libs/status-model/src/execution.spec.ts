import { IllegalTransitionError, StatusModelErrorCode } from './errors';
import {
  EXECUTION_STATUSES,
  EXECUTION_TRANSITIONS,
  ExecutionStatus,
  TERMINAL_EXECUTION_STATUSES,
  canMoveExecution,
  isTerminalExecution,
} from './execution';
import { assertExecutionTransition } from './validate';
import { moveKey as key, movesOutside, refusalOf } from '../../../test/support/transitions';

const E = ExecutionStatus;

/** The contract's §3 forward path, written out by hand. */
const PATH: ReadonlyArray<[ExecutionStatus, ExecutionStatus]> = [
  [E.CREATED, E.VALIDATING],
  [E.VALIDATING, E.RESOLVING_CONTEXT],
  [E.RESOLVING_CONTEXT, E.PLANNING],
  [E.PLANNING, E.RUNNING],
  [E.RUNNING, E.WAITING_FOR_TOOL],
  [E.RUNNING, E.WAITING_FOR_APPROVAL],
  [E.RUNNING, E.VALIDATING_OUTPUT],
  [E.WAITING_FOR_TOOL, E.RUNNING],
  [E.WAITING_FOR_TOOL, E.WAITING_FOR_APPROVAL],
  [E.WAITING_FOR_TOOL, E.VALIDATING_OUTPUT],
  [E.WAITING_FOR_APPROVAL, E.RUNNING],
  [E.WAITING_FOR_APPROVAL, E.WAITING_FOR_TOOL],
  [E.WAITING_FOR_APPROVAL, E.VALIDATING_OUTPUT],
  [E.VALIDATING_OUTPUT, E.COMPLETED],
];
const TERMINAL = [E.COMPLETED, E.FAILED, E.CANCELLED, E.EXPIRED];
const NON_TERMINAL = EXECUTION_STATUSES.filter((s) => !TERMINAL.includes(s));
const ESCAPES = [E.FAILED, E.CANCELLED, E.EXPIRED];
const EXPECTED_KEYS = new Set([
  ...PATH.map(([from, to]) => key(from, to)),
  ...NON_TERMINAL.flatMap((from) => ESCAPES.map((to) => key(from, to))),
]);

const refusal = (from: ExecutionStatus, to: ExecutionStatus) => refusalOf(() => assertExecutionTransition(from, to));

describe('execution statuses (docs/contract.md §3)', () => {
  it('has the twelve statuses of the design', () => {
    expect(EXECUTION_STATUSES).toEqual([
      'created',
      'validating',
      'resolving_context',
      'planning',
      'running',
      'waiting_for_tool',
      'waiting_for_approval',
      'validating_output',
      'completed',
      'failed',
      'cancelled',
      'expired',
    ]);
  });

  it('is terminal exactly in completed, failed, cancelled and expired', () => {
    expect(TERMINAL_EXECUTION_STATUSES).toEqual(TERMINAL);
    expect(EXECUTION_STATUSES.filter(isTerminalExecution)).toEqual(TERMINAL);
  });

  it('has a transition list for every status', () => {
    expect(Object.keys(EXECUTION_TRANSITIONS).sort()).toEqual([...EXECUTION_STATUSES].sort());
  });

  it('holds exactly the forward path plus failed/cancelled/expired from every non-terminal status', () => {
    const actual = EXECUTION_STATUSES.flatMap((from) => EXECUTION_TRANSITIONS[from].map((to) => key(from, to)));
    expect(new Set(actual)).toEqual(EXPECTED_KEYS);
    expect(actual).toHaveLength(EXPECTED_KEYS.size);
  });
});

describe('execution transitions', () => {
  it.each(PATH)('allows %s -> %s along the path', (from, to) => {
    expect(canMoveExecution(from, to)).toBe(true);
    expect(() => assertExecutionTransition(from, to)).not.toThrow();
  });

  it('walks the whole happy path from created to completed', () => {
    const walk = [
      E.CREATED,
      E.VALIDATING,
      E.RESOLVING_CONTEXT,
      E.PLANNING,
      E.RUNNING,
      E.WAITING_FOR_TOOL,
      E.RUNNING,
      E.WAITING_FOR_APPROVAL,
      E.RUNNING,
      E.VALIDATING_OUTPUT,
      E.COMPLETED,
    ];
    for (let i = 1; i < walk.length; i += 1)
      expect(() => assertExecutionTransition(walk[i - 1], walk[i])).not.toThrow();
  });

  describe.each(NON_TERMINAL)('non-terminal %s', (from) => {
    it.each(ESCAPES)('may go to %s', (to) => {
      expect(canMoveExecution(from, to)).toBe(true);
      expect(() => assertExecutionTransition(from, to)).not.toThrow();
    });

    it('is not terminal', () => {
      expect(isTerminalExecution(from)).toBe(false);
    });
  });

  describe.each(TERMINAL)('terminal %s', (from) => {
    it('has no exits', () => {
      expect(EXECUTION_TRANSITIONS[from]).toEqual([]);
    });

    it.each(EXECUTION_STATUSES)('refuses -> %s', (to) => {
      expect(canMoveExecution(from, to)).toBe(false);
      expect(refusal(from, to).code).toBe(StatusModelErrorCode.ILLEGAL_TRANSITION);
    });
  });

  it.each([
    [E.CREATED, E.RUNNING],
    [E.CREATED, E.COMPLETED],
    [E.CREATED, E.PLANNING],
    [E.VALIDATING, E.RUNNING],
    [E.PLANNING, E.VALIDATING],
    [E.PLANNING, E.COMPLETED],
    [E.RUNNING, E.COMPLETED],
    [E.RUNNING, E.PLANNING],
    [E.RUNNING, E.CREATED],
    [E.WAITING_FOR_TOOL, E.COMPLETED],
    [E.WAITING_FOR_APPROVAL, E.COMPLETED],
    [E.VALIDATING_OUTPUT, E.RUNNING],
    [E.VALIDATING_OUTPUT, E.WAITING_FOR_TOOL],
    [E.COMPLETED, E.RUNNING],
    [E.COMPLETED, E.FAILED],
    [E.FAILED, E.RUNNING],
    [E.CANCELLED, E.CREATED],
    [E.EXPIRED, E.COMPLETED],
    [E.RUNNING, E.RUNNING],
  ])('refuses %s -> %s with ILLEGAL_TRANSITION', (from, to) => {
    expect(canMoveExecution(from, to)).toBe(false);
    const error = refusal(from, to);
    expect(error).toBeInstanceOf(IllegalTransitionError);
    expect(error.code).toBe(StatusModelErrorCode.ILLEGAL_TRANSITION);
    expect(error.kind).toBe('execution');
    expect(error.from).toBe(from);
    expect(error.to).toBe(to);
    expect(error.message).toBe(`execution ${from} -> ${to} refused: not in the transition table`);
  });

  it('refuses every pair outside the table', () => {
    const outside = movesOutside(EXECUTION_STATUSES, EXPECTED_KEYS);
    for (const [from, to] of outside) {
      expect(canMoveExecution(from, to)).toBe(false);
      expect(refusal(from, to).code).toBe(StatusModelErrorCode.ILLEGAL_TRANSITION);
    }
    expect(outside).toHaveLength(EXECUTION_STATUSES.length ** 2 - EXPECTED_KEYS.size);
  });
});
