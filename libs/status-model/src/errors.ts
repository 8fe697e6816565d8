export enum StatusModelErrorCode {
  ILLEGAL_TRANSITION = 'ILLEGAL_TRANSITION',
  REASON_REQUIRED = 'REASON_REQUIRED',
  REASON_NOT_ALLOWED = 'REASON_NOT_ALLOWED',
  HUMAN_ONLY = 'HUMAN_ONLY',
  ALREADY_SENT = 'ALREADY_SENT',
  NEVER_SENT = 'NEVER_SENT',
  VERIFICATION_UNAVAILABLE = 'VERIFICATION_UNAVAILABLE',
  EFFECT_EXISTS = 'EFFECT_EXISTS',
  /** The provider rejected the send (a late rejection on file): it cannot be marked as having happened. */
  PROVIDER_REJECTED = 'PROVIDER_REJECTED',
}

/** Thrown for every move the status model refuses; the API maps it to 409 problem+json. */
export class IllegalTransitionError extends Error {
  override readonly name = 'IllegalTransitionError';
  constructor(
    readonly code: StatusModelErrorCode,
    readonly kind: 'operation' | 'execution',
    readonly from: string,
    readonly to: string,
    detail: string,
  ) {
    super(`${kind} ${from} -> ${to} refused: ${detail}`);
  }
}
