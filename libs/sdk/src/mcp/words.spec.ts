import { OPERATION_STATUSES, OperationStatus, RetryRule, VerificationMethod } from '@verity/status-model';
import { RULES, connectorLimitations, earlierAttemptsLine, operationEffect, operationHistories } from './words';
import type { ConnectorInfo } from '../types';
import type { ExecutionEvent } from '../types';

const op = (status: OperationStatus, extra: Partial<Parameters<typeof operationEffect>[0]> = {}) =>
  operationEffect({
    status,
    verification_method: VerificationMethod.READ_AFTER_WRITE,
    no_change_required: false,
    commit: 'unknown',
    ...extra,
  });

describe('what the MCP tools say about an operation', () => {
  it('names the status first for every operation status', () => {
    for (const status of OPERATION_STATUSES) expect(op(status)).toMatch(new RegExp(`^${status}[ :(]`));
  });

  it('says an UNKNOWN, SENT or RECONCILING operation may have happened and must not be retried', () => {
    expect(op(OperationStatus.UNKNOWN)).toContain('UNKNOWN: it may have happened; do not retry it');
    for (const status of [OperationStatus.SENT, OperationStatus.RECONCILING]) {
      expect(op(status)).toContain('It may have happened; do not retry it');
    }
  });

  // The reconciler never reads the source of an operation without read-back (verification_method ""): an UNKNOWN one
  // is held for a reviewer (status model decideReconcileStart). The words promised a read of the source all the same.
  it('says an UNKNOWN operation without read-back goes to a human, not to a read of the source', () => {
    const held = op(OperationStatus.UNKNOWN, { verification_method: '' });
    expect(held).toContain('UNKNOWN: it may have happened; do not retry it');
    expect(held).not.toContain('from the source');
    expect(held).toContain('a human reviewer decides (MANUAL_REVIEW)');
    expect(op(OperationStatus.UNKNOWN)).toContain('Verity is determining the outcome from the source');
  });

  it('never lets ACKNOWLEDGED read as proof, and says when it is final', () => {
    expect(op(OperationStatus.ACKNOWLEDGED)).toContain('ACKNOWLEDGED is not proof');
    const final = op(OperationStatus.ACKNOWLEDGED, { verification_method: '' });
    expect(final).toContain('nothing confirms the effect, and nothing ever will');
  });

  it('says VERIFIED is a read-back, a human resolution, or no change at all', () => {
    expect(op(OperationStatus.VERIFIED)).toContain('confirmed by reading it back from the source');
    expect(op(OperationStatus.VERIFIED, { evidence: { resolution: {} } })).toContain('human reviewer');
    expect(op(OperationStatus.VERIFIED, { no_change_required: true })).toContain('Verity did not cause it');
  });

  it('allows a retry, as a new operation, only for FAILED and CANCELLED', () => {
    for (const status of OPERATION_STATUSES) {
      const allowed = op(status).includes('A retry is allowed and would be a new operation');
      expect([status, allowed]).toEqual([
        status,
        status === OperationStatus.FAILED || status === OperationStatus.CANCELLED,
      ]);
    }
    expect(RULES).toContain('Only FAILED and CANCELLED operations may be retried, and a retry is a new operation');
  });

  it('says a FAILED contradicted since (retry forbidden) may have happened, and allows no retry', () => {
    const refuted = op(OperationStatus.FAILED, { commit: 'unknown', retry: RetryRule.FORBIDDEN });
    expect(refuted).toMatch(/^FAILED: /);
    expect(refuted).toContain('It may have happened; do not retry it');
    expect(refuted).not.toContain('A retry is allowed');
    expect(refuted).not.toContain('no effect exists');
  });

  // A retry made on the word of a FAILED that was contradicted since (the one it retries, or one up its chain) shows retry
  // `forbidden` though its own commit is what its status says (operationRetryRule's retryRefuted): a CANCELLED one
  // (cancelled `retry_refuted` before it was sent) was told "A retry is allowed", which POST .../retry refuses (409), and
  // a FAILED one "contradicted since … It may have happened", though its own commit is `rejected`.
  it('says a retry whose chain holds a FAILED contradicted since allows no retry, without calling its own outcome contradicted', () => {
    const cancelled = op(OperationStatus.CANCELLED, { commit: 'not_dispatched', retry: RetryRule.FORBIDDEN });
    expect(cancelled).toMatch(/^CANCELLED: /);
    expect(cancelled).not.toContain('A retry is allowed');
    expect(cancelled).toContain('do not retry it (a retry is refused)');
    expect(cancelled).toContain('may exist');
    const failed = op(OperationStatus.FAILED, { commit: 'rejected', retry: RetryRule.FORBIDDEN });
    expect(failed).toMatch(/^FAILED: /);
    expect(failed).not.toContain('A retry is allowed');
    expect(failed).not.toContain('It may have happened');
    expect(failed).toContain('do not retry it (a retry is refused)');
    expect(failed).toContain('may exist');
    // Without the refutation, as before.
    expect(op(OperationStatus.CANCELLED, { commit: 'not_dispatched', retry: RetryRule.SAFE })).toContain(
      'A retry is allowed',
    );
  });

  // GET /v1/executions/{id} shows such a VERIFIED with commit `unknown` and retry `forbidden`, and counts it among the
  // uncertain effects (effects.summary `unknown`): the tool's words said "The effect happened" all the same.
  it('says a VERIFIED contradicted since (a late rejection: retry forbidden) does not settle that this request made the effect', () => {
    for (const evidence of [undefined, { resolution: {} }]) {
      const contradicted = op(OperationStatus.VERIFIED, { commit: 'unknown', retry: RetryRule.FORBIDDEN, evidence });
      expect(contradicted).toMatch(/^VERIFIED\b/);
      expect(contradicted).toContain('contradicted since');
      expect(contradicted).toContain('rejected this request');
      expect(contradicted).toContain('do not retry it (a retry is refused)');
      expect(contradicted).not.toContain('The effect happened');
    }
    // Not contradicted: as before.
    expect(op(OperationStatus.VERIFIED, { commit: 'committed', retry: RetryRule.NOT_NEEDED })).toContain(
      'The effect happened; do not repeat it',
    );
  });

  it('distinguishes a MANUAL_REVIEW held before sending from one that may have happened', () => {
    expect(op(OperationStatus.MANUAL_REVIEW, { commit: 'not_dispatched' })).toContain('before it was ever sent');
    expect(op(OperationStatus.MANUAL_REVIEW)).toContain('it may have happened. Do not retry it');
  });

  it('reads each operation’s path from the event log', () => {
    const event = (operation_id: string | null, from: string | null, to: string, type = 'operation.status_changed') =>
      ({ operation_id, from_status: from, to_status: to, type }) as ExecutionEvent;
    const paths = operationHistories([
      event(null, null, 'created', 'execution.created'),
      event('op_1', 'PREPARED', 'SENT'),
      event('op_1', 'SENT', 'UNKNOWN'),
      event('op_2', 'PREPARED', 'CANCELLED'),
      event('op_1', 'UNKNOWN', 'RECONCILING'),
      event('op_1', 'RECONCILING', 'VERIFIED'),
    ]);
    expect(paths.get('op_1')).toEqual(['PREPARED', 'SENT', 'UNKNOWN', 'RECONCILING', 'VERIFIED']);
    expect(paths.get('op_2')).toEqual(['PREPARED', 'CANCELLED']);
  });
});

describe('what list_connectors says about a connector', () => {
  it("quotes an action's condition as the connector words it, with no word added", () => {
    const action = {
      name: 'request',
      description: 'an HTTP request',
      read_back: true,
      context_read: true,
      provider_idempotency: false,
      reversible: false,
      can_reach_verified: true,
      conditions: { context_read: 'only when the operation gives params.context' },
      params_schema: {},
    };
    const connector = {
      ...action,
      name: 'http',
      description: 'generic HTTP',
      actions: [action],
    } as unknown as ConnectorInfo;
    expect(connectorLimitations(connector)).toContain(
      'action request: context_read only when the operation gives params.context',
    );
  });
});

describe('what the MCP tools say about the earlier attempts of a retry', () => {
  const attempt = {
    operation_id: 'op_2',
    execution_id: 'exe_2',
    status: 'CANCELLED',
    terminal_reason: 'DENIED',
    denied_by: 'key_r',
    denied_at: '2026-12-07T10:00:00.000Z',
    reason: 'wrong amount',
  } as const;

  it('names each earlier attempt nearest first, and who denied one, when and why', () => {
    expect(
      earlierAttemptsLine([
        attempt,
        { ...attempt, reason: null, operation_id: 'op_1' },
        {
          ...attempt,
          operation_id: 'op_0',
          status: 'FAILED',
          terminal_reason: 'CONNECTOR_REJECTED',
          denied_by: null,
          denied_at: null,
        },
      ]),
    ).toBe(
      'Earlier attempts of this request (nearest first): op_2 CANCELLED (DENIED): denied by key_r at ' +
        '2026-12-07T10:00:00.000Z: "wrong amount"; op_1 CANCELLED (DENIED): denied by key_r at 2026-12-07T10:00:00.000Z, ' +
        'no reason given; op_0 FAILED (CONNECTOR_REJECTED).',
    );
  });

  it('says nothing for an operation that is no retry', () => {
    expect(earlierAttemptsLine([])).toBeNull();
  });
});
