import type { ExecutionStatus } from '@verity/status-model';
import type { operations } from './generated/wire';
import type { Transport } from './http';
import type { Narrow, Operation, WireSchemas } from './types';

/** GET /v1/review/summary: how many operations wait for a reviewer. */
export type ReviewSummary = WireSchemas['ReviewSummary'];

type GeneratedQueueItem = WireSchemas['ReviewQueue']['data'][number];

/** The execution beside a queued operation: its status is the agent's work, never the operation's effect. */
export type ReviewExecutionSummary = Narrow<NonNullable<GeneratedQueueItem['execution']>, { status: ExecutionStatus }>;

/** One entry of a review queue: the operation (params masked) and its execution. */
export type ReviewQueueItem = Narrow<
  GeneratedQueueItem,
  { operation: Operation; execution: ReviewExecutionSummary | null }
>;

/** One page of a review queue, newest first; `total` counts every match of the filter. */
export type ReviewQueuePage = Narrow<WireSchemas['ReviewQueue'], { data: ReviewQueueItem[] }>;

/** Query of GET /v1/review/approvals: `connector`, `q` (an id, key, action, intent or agent), `cursor`, `limit`. */
export type ReviewQueueQuery = NonNullable<operations['listPendingApprovals']['parameters']['query']>;

/** Query of GET /v1/review/manual-reviews: also `reason`, and `escalated` as a boolean. */
export type ManualReviewQuery = Omit<
  NonNullable<operations['listManualReviews']['parameters']['query']>,
  'escalated'
> & { escalated?: boolean };

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
