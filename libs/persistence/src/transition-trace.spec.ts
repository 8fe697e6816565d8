import { trace } from '@opentelemetry/api';
import { NodeSDK } from '@opentelemetry/sdk-node';
import { ExecutionStatus, OperationStatus, TerminalReason } from '@verity/status-model';
import { newId } from '@verity/platform';
import { chargeOperation, insertTestExecution } from '../../../test/support/fixtures';
import { createTestDatabase, TestDatabase } from '../../../test/support/services';
import { preparedSnapshot } from '../../../test/support/sends';
import { createApiKey, ensureTenant } from './api-keys';
import { transaction } from './sql';
import { TransitionService } from './transition.service';

/** What a recording span of the SDK keeps of its events. */
type Recorded = { events: { name: string; attributes?: Record<string, unknown> }[] };

/**
 * A transition is a span event only once it is committed: a rolled-back transaction shows nothing, and one that
 * `transaction()` retries after a serialization failure shows its move once, not once per attempt.
 */
describe('transitions as span events (real Postgres, a recording tracer)', () => {
  let db: TestDatabase;
  const ended: Recorded[] = [];
  type Processors = NonNullable<NonNullable<ConstructorParameters<typeof NodeSDK>[0]>['spanProcessors']>;
  const keep = {
    onStart: () => undefined,
    onEnd: (span: Recorded) => ended.push(span),
    forceFlush: () => Promise.resolve(),
    shutdown: () => Promise.resolve(),
  } as unknown as Processors[number];
  const sdk = new NodeSDK({ spanProcessors: [keep], instrumentations: [], metricReaders: [], logRecordProcessors: [] });
  const transitions = new TransitionService();
  let reviewerKey: string;

  beforeAll(async () => {
    sdk.start();
    db = await createTestDatabase('transitiontrace');
    await ensureTenant(db.dataSource.manager, 'acme');
    reviewerKey = (await createApiKey(db.dataSource.manager, { tenantId: 'acme', role: 'reviewer' })).id;
  });
  afterAll(async () => {
    await db.drop();
    await sdk.shutdown();
  });

  async function runningExecution(operationId?: string): Promise<string> {
    const id = await insertTestExecution(db.dataSource.manager, 'acme', {
      operations: operationId
        ? [
            chargeOperation({
              id: operationId,
              requires_approval: true,
              params: { amount: 100, currency: 'EUR', reference: operationId },
            }),
          ]
        : [],
    });
    await db.dataSource.query(`UPDATE executions SET status = 'running' WHERE id = $1`, [id]);
    return id;
  }

  /** Runs `work` in a span of its own; answers the executions' moves recorded on it. */
  async function inSpan(work: () => Promise<unknown>): Promise<string[]> {
    return trace.getTracer('test').startActiveSpan('work', async (span) => {
      await work().catch(() => undefined);
      span.end();
      return ended
        .splice(0)
        .flatMap((s) => s.events)
        .filter((e) => e.name === 'verity.transition')
        .map((e) => String(e.attributes?.['verity.to']));
    });
  }

  const move = (tx: Parameters<TransitionService['execution']>[0], executionId: string) =>
    transitions.execution(tx, { executionId, from: ExecutionStatus.RUNNING, to: ExecutionStatus.VALIDATING_OUTPUT });

  it('a rolled-back transition is no event', async () => {
    const executionId = await runningExecution();
    const moves = await inSpan(() =>
      transaction(db.dataSource, async (tx) => {
        await move(tx, executionId);
        throw new Error('changed my mind');
      }),
    );
    expect(moves).toEqual([]);
  });

  it('a transaction retried after a serialization failure records its move once', async () => {
    const executionId = await runningExecution();
    let attempts = 0;
    const moves = await inSpan(() =>
      transaction(db.dataSource, async (tx) => {
        attempts += 1;
        await move(tx, executionId);
        if (attempts === 1) throw Object.assign(new Error('could not serialize access'), { code: '40001' });
      }),
    );
    expect(attempts).toBe(2);
    expect(moves).toEqual(['validating_output']);
  });

  it("a person's decision that moves the operation is an event like any other move", async () => {
    const operationId = newId('op');
    await runningExecution(operationId);
    const moves = await inSpan(() =>
      transitions.decide(db.dataSource.manager, {
        operation: preparedSnapshot(operationId),
        tenantId: 'acme',
        byKey: reviewerKey,
        open: 'approval',
        event: { type: 'approval.decided', data: { decision: 'deny' } },
        merge: { approval: { state: 'denied', decided_by: 'key_1' } },
        move: { to: OperationStatus.CANCELLED, reason: TerminalReason.DENIED },
      }),
    );
    expect(moves).toEqual(['CANCELLED']);
  });
});
