/** The execution state machine of docs/contract.md §3: where the agent's own work stands. */

export enum ExecutionStatus {
  CREATED = 'created',
  VALIDATING = 'validating',
  RESOLVING_CONTEXT = 'resolving_context',
  PLANNING = 'planning',
  RUNNING = 'running',
  WAITING_FOR_TOOL = 'waiting_for_tool',
  WAITING_FOR_APPROVAL = 'waiting_for_approval',
  VALIDATING_OUTPUT = 'validating_output',
  COMPLETED = 'completed',
  FAILED = 'failed',
  CANCELLED = 'cancelled',
  EXPIRED = 'expired',
}

export const EXECUTION_STATUSES: readonly ExecutionStatus[] = Object.values(ExecutionStatus);

const E = ExecutionStatus;

export const TERMINAL_EXECUTION_STATUSES: readonly ExecutionStatus[] = [E.COMPLETED, E.FAILED, E.CANCELLED, E.EXPIRED];

/** The forward path; cancelled, expired and failed are reachable from every non-terminal status (added below). */
const EXECUTION_PATH: Readonly<Partial<Record<ExecutionStatus, readonly ExecutionStatus[]>>> = {
  created: [E.VALIDATING],
  validating: [E.RESOLVING_CONTEXT],
  resolving_context: [E.PLANNING],
  planning: [E.RUNNING],
  running: [E.WAITING_FOR_TOOL, E.WAITING_FOR_APPROVAL, E.VALIDATING_OUTPUT],
  waiting_for_tool: [E.RUNNING, E.WAITING_FOR_APPROVAL, E.VALIDATING_OUTPUT],
  waiting_for_approval: [E.RUNNING, E.WAITING_FOR_TOOL, E.VALIDATING_OUTPUT],
  validating_output: [E.COMPLETED],
};

export const EXECUTION_TRANSITIONS: Readonly<Record<ExecutionStatus, readonly ExecutionStatus[]>> = Object.fromEntries(
  EXECUTION_STATUSES.map((status): [ExecutionStatus, readonly ExecutionStatus[]] => {
    if (isTerminalExecution(status)) return [status, []];
    return [status, [...(EXECUTION_PATH[status] ?? []), E.FAILED, E.CANCELLED, E.EXPIRED]];
  }),
) as Record<ExecutionStatus, readonly ExecutionStatus[]>;

export function isTerminalExecution(status: ExecutionStatus): boolean {
  return TERMINAL_EXECUTION_STATUSES.includes(status);
}

export function canMoveExecution(from: ExecutionStatus, to: ExecutionStatus): boolean {
  return EXECUTION_TRANSITIONS[from].includes(to);
}
