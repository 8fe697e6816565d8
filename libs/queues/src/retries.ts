import { executionsOfWaitingRetries, type Queryable } from '@verity/persistence';
import type { Logger } from '@verity/platform';
import { JobName } from './names';
import type { JobProducer } from './producer';

/**
 * After a FAILED was contradicted (its provider's 2xx came back late, or a read showed the effect): the executions
 * holding a retry of it (or of one of its retries) not sent yet are advanced, a job each; their lifecycle finds the
 * chain contradicted and cancels the retry (`retry_refuted`). Best effort, as the enqueue is: a failed lookup is logged,
 * never failing the job whose answer is already recorded, and the send guard still refuses such a retry at its send.
 */
export async function advanceRetriesOf(
  db: Queryable,
  producer: JobProducer,
  logger: Logger,
  op: { id: string; tenantId: string },
): Promise<void> {
  const executions = await executionsOfWaitingRetries(db, op.tenantId, op.id).catch((error: unknown) => {
    logger.warn(
      { err: error, operationId: op.id },
      'retries of a contradicted FAILED not looked up; left to the sweep',
    );
    return [];
  });
  for (const executionId of executions) {
    await producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId });
  }
}
