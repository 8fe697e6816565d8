export * from './types';
export * from './errors';
export { Transport, backoff } from './http';
export type { FetchLike, HttpResult, RequestSpec, RetryPolicy, TransportOptions } from './http';
export * from './settled';
export * from './stream';
export * from './client';
export * from './review';
export {
  ExecutionStatus,
  OperationStatus,
  RetryRule,
  TerminalReason,
  UNCERTAIN_EFFECT_STATUSES,
  VerificationMethod,
  isSettledOperation,
  isTerminalExecution,
} from '@verity/status-model';
