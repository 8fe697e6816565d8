import type { ExecutionStatus, TerminalReason } from '@verity/status-model';
import type { Transport } from './http';
import type { EnumInput, IsoDateTime, Operation } from './types';

/** GET /v1/review/summary: how many operations wait for a reviewer. */
export interface ReviewSummary {
  approvals: number;
  manual_reviews: number;
  escalated: number;
  overdue: number;
  as_of: IsoDateTime;
}

/** The execution beside a queued operation: its status is the agent's work, never the operation's effect. */
export interface ReviewExecutionSummary {
  id: string;
  status: ExecutionStatus;
  agent_id: string;
  intent: string;
  created_at: IsoDateTime;
}

/** One entry of a review queue: the operation (params masked) and its execution. */
export interface ReviewQueueItem {
  operation: Operation;
  execution: ReviewExecutionSummary | null;
}

/** One page of a review queue, newest first; `total` counts every match of the filter. */
export interface ReviewQueuePage {
  data: ReviewQueueItem[];
  total: number;
  next_cursor: string | null;
}

/** Query of GET /v1/review/approvals. */
export interface ReviewQueueQuery {
  connector?: string;
  /** An operation or execution id, key, action, intent or agent. */
  q?: string;
  /** `next_cursor` of the previous page. */
  cursor?: string;
  /** 1–200, 50 by default. */
  limit?: number;
}

/** Query of GET /v1/review/manual-reviews. */
export interface ManualReviewQuery extends ReviewQueueQuery {
  reason?: EnumInput<TerminalReason>;
  /** Only obligations escalated (true) or not yet escalated (false). */
  escalated?: boolean;
}

/** The review queues (reviewer role): what waits for a human's approval or a manual-review resolution. */
export class ReviewApi {
  constructor(private readonly transport: Transport) {}

  /** GET /v1/review/summary. */
  summary(options: { signal?: AbortSignal } = {}): Promise<ReviewSummary> {
    return this.get<ReviewSummary>('/v1/review/summary', {}, options.signal);
  }

  /** GET /v1/review/approvals: PREPARED operations whose approval is requested. */
  approvals(query: ReviewQueueQuery = {}, options: { signal?: AbortSignal } = {}): Promise<ReviewQueuePage> {
    return this.get<ReviewQueuePage>('/v1/review/approvals', { ...query }, options.signal);
  }

  /** GET /v1/review/manual-reviews: MANUAL_REVIEW operations with their recovery obligation. */
  manualReviews(query: ManualReviewQuery = {}, options: { signal?: AbortSignal } = {}): Promise<ReviewQueuePage> {
    const { escalated, ...rest } = query;
    return this.get<ReviewQueuePage>(
      '/v1/review/manual-reviews',
      { ...rest, escalated: escalated === undefined ? undefined : String(escalated) },
      options.signal,
    );
  }

  private async get<T>(path: string, query: Record<string, string | number | undefined>, signal?: AbortSignal) {
    const result = await this.transport.request<T>({ method: 'GET', path, query, retry: 'safe', signal });
    return result.data;
  }
}
