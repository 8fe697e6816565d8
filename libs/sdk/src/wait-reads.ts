import { OPERATION_STATUSES, isSettledOperation, isTerminalExecution } from '@verity/status-model';
import type { ExecutionStatus, OperationStatus } from '@verity/status-model';
import { isExecutionStatusEvent } from './types';
import type { ExecutionEvent } from './types';

/**
 * For `waitForSettled`: whether an event of a stream followed from its start could be the last change before
 * `isExecutionSettled` holds, so that the execution is worth reading (GET) after it. One per wait: it keeps the
 * execution status the stream last told.
 *
 * Settled needs a terminal execution (from which the status model moves it nowhere), every operation settled and no
 * evaluation of the criteria owed. The server writes each of those changes with its event, in the execution's order
 * (`seq`): an execution's move (`execution.*`), an operation's (`to_status`), the criteria's verdicts
 * (`outcome.evaluated`). So the change that makes it settled is an execution event to a terminal status, or, once the
 * stream has told one, an operation event to a status that can be settled or an `outcome.evaluated`. Nothing else can
 * be it: before the terminal event the execution is not terminal; after an operation's move to an unsettled status that
 * operation is unsettled until a later event. The read after such an event may show more than the stream has told (it
 * is ahead): it is judged all the same. Until the stream has told an execution status (it starts with
 * `execution.created`), every status event counts; so does a status this SDK does not know.
 */
export function settlingEvents(): (event: ExecutionEvent) => boolean {
  let executionStatus: string | undefined;
  return (event) => {
    if (isExecutionStatusEvent(event) && event.to_status !== null) {
      executionStatus = event.to_status;
      return isTerminalExecution(event.to_status as ExecutionStatus);
    }
    if (executionStatus !== undefined && !isTerminalExecution(executionStatus as ExecutionStatus)) return false;
    if (event.type === 'outcome.evaluated') return true;
    if (event.to_status === null) return false;
    const status = event.to_status as OperationStatus;
    // ACKNOWLEDGED is settled without read-back; the event does not say which method the operation has.
    return !OPERATION_STATUSES.includes(status) || isSettledOperation(status, '');
  };
}
