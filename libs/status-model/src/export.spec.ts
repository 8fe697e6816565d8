import * as statusModel from './index';

const {
  EXECUTION_STATUSES,
  EXECUTION_TRANSITIONS,
  OPERATION_STATUSES,
  OPERATION_STATUS_INFO,
  OPERATION_TRANSITIONS,
  RetryRule,
  TERMINAL_EXECUTION_STATUSES,
  TERMINAL_REASONS,
  statusModelDocument,
} = statusModel;

describe('statusModelDocument (GET /v1/status-model)', () => {
  const doc = statusModelDocument();

  it('is JSON-serialisable without loss', () => {
    const json = JSON.stringify(doc);
    expect(typeof json).toBe('string');
    expect(JSON.parse(json)).toEqual(doc);
  });

  it('is the same document on every call', () => {
    expect(JSON.stringify(statusModelDocument())).toBe(JSON.stringify(doc));
  });

  describe('operation', () => {
    it('contains every operation status with its terminal flag, retry rule and meaning', () => {
      expect(doc.operation.statuses.map((s) => s.status)).toEqual(OPERATION_STATUSES);
      for (const entry of doc.operation.statuses) {
        expect(entry).toEqual({ status: entry.status, ...OPERATION_STATUS_INFO[entry.status] });
      }
    });

    it('contains every operation transition (20) with its conditions in snake_case', () => {
      expect(doc.operation.transitions).toHaveLength(20);
      expect(doc.operation.transitions).toHaveLength(OPERATION_TRANSITIONS.length);
      // Every field of the rule, none left out, renamed to snake_case (so a field added to the rules is exported).
      const snakeCase = (key: string) => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
      OPERATION_TRANSITIONS.forEach((r, i) => {
        expect(doc.operation.transitions[i]).toEqual(
          Object.fromEntries(Object.entries(r).map(([key, value]) => [snakeCase(key), value])),
        );
      });
    });

    it('contains every terminal reason', () => {
      expect(doc.operation.terminal_reasons).toEqual(TERMINAL_REASONS);
      expect(doc.operation.terminal_reasons).toHaveLength(9);
      for (const t of doc.operation.transitions) {
        for (const reason of t.reasons) expect(doc.operation.terminal_reasons).toContain(reason);
      }
    });

    it('contains every retry rule and both verification methods', () => {
      expect(doc.operation.retry_rules).toEqual(Object.values(RetryRule));
      expect(doc.operation.verification_methods).toEqual(['read_after_write', '']);
      expect(doc.operation.verification_rule).toMatch(/read_after_write/);
    });
  });

  describe('execution', () => {
    it('contains every execution status and the terminal ones', () => {
      expect(doc.execution.statuses).toEqual(EXECUTION_STATUSES);
      expect(doc.execution.terminal).toEqual(TERMINAL_EXECUTION_STATUSES);
    });

    it('contains every execution transition', () => {
      expect(doc.execution.transitions.map((t) => t.from)).toEqual(EXECUTION_STATUSES);
      for (const t of doc.execution.transitions) expect(t.to).toEqual(EXECUTION_TRANSITIONS[t.from]);
    });
  });
});

describe('package entry point', () => {
  it('re-exports the public API of every module', () => {
    for (const name of [
      'OperationStatus',
      'OPERATION_TRANSITIONS',
      'assertOperationTransition',
      'isOperationTransitionAllowed',
      'permittedResolutions',
      'ExecutionStatus',
      'assertExecutionTransition',
      'canMoveExecution',
      'IllegalTransitionError',
      'StatusModelErrorCode',
      'summarizeEffects',
      'statusModelDocument',
    ]) {
      expect(statusModel).toHaveProperty(name);
    }
  });
});
