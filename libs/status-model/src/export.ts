import { COMMIT_MEANING, COMMIT_RULES, COMMIT_VALUES } from './commit';
import { EXECUTION_STATUSES, EXECUTION_TRANSITIONS, TERMINAL_EXECUTION_STATUSES } from './execution';
import {
  OPERATION_STATUSES,
  OPERATION_STATUS_INFO,
  OPERATION_TRANSITIONS,
  RetryRule,
  TERMINAL_REASONS,
  VerificationMethod,
} from './operation';
import { FAILURE_CATEGORIES, FAILURE_CODES } from './failure';
import { CRITERION_VERDICTS, OUTCOME_RESULTS } from './outcome';

/** The whole model as plain JSON, served at GET /v1/status-model. Generated, never hand-written. */
export function statusModelDocument() {
  return {
    operation: {
      statuses: OPERATION_STATUSES.map((status) => ({ status, ...OPERATION_STATUS_INFO[status] })),
      transitions: OPERATION_TRANSITIONS.map((r) => ({
        from: r.from,
        to: r.to,
        reasons: r.reasons,
        reason_required: r.reasonRequired,
        human_only: r.humanOnly,
        never_sent_only: r.neverSentOnly,
        sent_only: r.sentOnly,
        refused_when_held_for: r.refusedWhenHeldFor,
        refused_when_acknowledged: r.refusedWhenAcknowledged,
        refused_when_effect_shown: r.refusedWhenEffectShown,
        refused_when_rejected: r.refusedWhenRejected,
        system_when_held_for: r.systemWhenHeldFor,
        system_when_execution_ended: r.systemWhenExecutionEnded,
        extension: r.extension,
        why: r.why,
      })),
      terminal_reasons: TERMINAL_REASONS,
      retry_rules: Object.values(RetryRule),
      verification_methods: [VerificationMethod.READ_AFTER_WRITE, ''],
      verification_rule:
        'VERIFIED requires verification_method read_after_write (evidence stored) or a human resolution from MANUAL_REVIEW',
      commit: {
        values: COMMIT_VALUES.map((value) => ({ value, meaning: COMMIT_MEANING[value] })),
        rules: COMMIT_RULES,
      },
    },
    failure: {
      categories: FAILURE_CATEGORIES,
      codes: Object.entries(FAILURE_CODES).map(([code, info]) => ({ code, ...info })),
    },
    outcome: { results: OUTCOME_RESULTS, verdicts: CRITERION_VERDICTS },
    execution: {
      statuses: EXECUTION_STATUSES,
      terminal: TERMINAL_EXECUTION_STATUSES,
      transitions: EXECUTION_STATUSES.map((from) => ({ from, to: EXECUTION_TRANSITIONS[from] })),
    },
  };
}
