import { isOutcomeCurrent, latestByKey } from '@verity/status-model';
import { canExecutionStillChange, isExecutionSettled } from './settled';
import { executionStatusLine } from './mcp/words';
import type { Execution } from './types';

/** A cancelled execution whose charge, UNKNOWN at the cancel, the reconciler has just found VERIFIED. */
function cancelledThenVerified(verdict: 'pending' | 'pass' | 'fail', rationale: string): Execution {
  return {
    id: 'exe_1',
    status: 'cancelled',
    criteria: [{ key: 'charged', operation: 'charge', expect_status: 'VERIFIED' }],
    criteria_results: [
      { key: 'charged', operation: 'charge', expect_status: 'VERIFIED', verdict, rationale, evidence_event_ids: [] },
    ],
    outcome: {
      result: { pass: 'satisfied', fail: 'unmet', pending: 'pending' }[verdict],
      evaluated_at: '2026-12-03T00:00:00.000Z',
    },
    operations: [
      {
        id: 'op_1',
        key: 'charge',
        status: 'VERIFIED',
        verification_method: 'read_after_write',
        evidence: { record: { amount: 1250 } },
        failure: null,
      },
    ],
  } as unknown as Execution;
}

describe('settled, the outcome included', () => {
  it('is not settled while an evaluation of the criteria is still owed after the last change', () => {
    // The reconciler wrote VERIFIED; the dispatcher's next step writes the outcome.evaluated it owes.
    const owed = cancelledThenVerified('pending', '"charge" is RECONCILING and can still move (expected VERIFIED)');
    expect(isExecutionSettled(owed)).toBe(false);
    expect(canExecutionStillChange(owed)).toBe(true);
    expect(executionStatusLine(owed)).toContain('Not settled yet');
  });

  it('is settled once the outcome is what the criteria give now', () => {
    const current = cancelledThenVerified('pass', '"charge" is VERIFIED');
    expect(isExecutionSettled(current)).toBe(true);
    expect(canExecutionStillChange(current)).toBe(false);
  });

  it('reads a VERIFIED whose commit is unknown as contradicted: its passing verdict is owed a fail, and then settled', () => {
    const contradicted = (verdict: 'pass' | 'fail') => {
      const execution = cancelledThenVerified(verdict, 'x');
      execution.operations[0].commit = 'unknown';
      return execution;
    };
    // The late rejection was recorded; the dispatcher's next step writes the fail it owes.
    expect(isExecutionSettled(contradicted('pass'))).toBe(false);
    expect(isExecutionSettled(contradicted('fail'))).toBe(true);
  });

  it('agrees with the API’s own test (isOutcomeCurrent) on both', () => {
    for (const [execution, current] of [
      [cancelledThenVerified('pending', 'x'), false],
      [cancelledThenVerified('pass', '"charge" is VERIFIED'), true],
    ] as const) {
      const latest = latestByKey(execution.operations);
      const server = isOutcomeCurrent(execution.criteria, execution.criteria_results, (key) => {
        const op = latest.get(key);
        return (
          op && { status: op.status, verificationMethod: op.verification_method, evidence: null, lastChange: null }
        );
      });
      expect(server).toBe(current);
      expect(isExecutionSettled(execution)).toBe(current);
    }
  });
});
