import type { DefaultJobOptions, JobsOptions, QueueOptions, Telemetry } from 'bullmq';
import type { RedisClient } from '@verity/platform';

/**
 * Queue and job names. WARNING: these strings are stored in Redis with every job; renaming one strands the jobs
 * already queued under the old name. Add a new name and drain the old one instead.
 */
export enum QueueName {
  EXECUTIONS = 'executions',
  DISPATCH = 'dispatch',
  VERIFY = 'verify',
  RECONCILE = 'reconcile',
  SWEEP = 'sweep',
  /** Signed webhook deliveries (reconciler). */
  WEBHOOKS = 'webhooks',
}

export enum JobName {
  ADVANCE_EXECUTION = 'advance-execution',
  DISPATCH_OPERATION = 'dispatch-operation',
  VERIFY_OPERATION = 'verify-operation',
  RECONCILE_OPERATION = 'reconcile-operation',
  SWEEP = 'sweep',
  /** Read a VERIFIED effect again (observation); runs on the verify queue. */
  OBSERVE_OPERATION = 'observe-operation',
  /** Read the source of a MANUAL_REVIEW operation again (never a send); runs on the reconcile queue. */
  RECHECK_OPERATION = 'recheck-operation',
  /** POST one webhook delivery to its endpoint; runs on the webhooks queue. */
  DELIVER_WEBHOOK = 'deliver-webhook',
}

/**
 * Jobs carry ids, never state: a worker reads the row, checks the transition, acts. An operation's job also carries its
 * execution's id, which picks the queue shard (shards.ts): every job of an execution lands on one shard. (Jobs queued
 * before it was added lack it; workers read only `operationId`.)
 */
export interface JobPayloads {
  [JobName.ADVANCE_EXECUTION]: { executionId: string };
  [JobName.DISPATCH_OPERATION]: OperationJob;
  [JobName.VERIFY_OPERATION]: OperationJob;
  [JobName.RECONCILE_OPERATION]: OperationJob;
  [JobName.SWEEP]: Record<string, never>;
  [JobName.OBSERVE_OPERATION]: OperationJob;
  /**
   * `requestId`: the reviewer's request as the API recorded it (libs/persistence `recordRecheckRequest`), used once;
   * absent for a scheduled re-check. The job names no person: who asked is read from the request when it is claimed.
   * `dueAt`: a scheduled re-check's due time (the operation's `next_check_at` it was scheduled for, ISO): it reads and
   * writes only while the operation still names that time, so a hold has one chain of automatic re-checks however
   * many reads re-dated it. The sweeper re-arms a lost one with the due time it was armed for, under the same id
   * (scheduledRecheckJobId). Absent for a reviewer's (and in a job enqueued by an older version: it runs unguarded).
   */
  [JobName.RECHECK_OPERATION]: OperationJob & { requestId?: string; dueAt?: string };
  /** `round`: 0 for the first delivery, n for the n-th manual redelivery; a job of an older round is skipped. */
  [JobName.DELIVER_WEBHOOK]: { deliveryId: string; round: number };
}

export interface OperationJob {
  operationId: string;
  /** The operation's execution: the shard's routing key. */
  executionId: string;
}

/**
 * The Redis pub/sub channel on which writers announce executions with new committed events (the API listens). A
 * message is one or more execution ids joined by commas.
 */
export function eventsChannel(prefix: string): string {
  return `${prefix}:events`;
}

/**
 * The Redis pub/sub channel on which API processes pass on an MCP client's `notifications/cancelled`: stateless
 * Streamable HTTP lets the cancellation land on another process than the request it names. A message is the key id
 * and the JSON of the request id, joined by a line break.
 */
export function mcpCancelChannel(prefix: string): string {
  return `${prefix}:mcp-cancel`;
}

export type JobOf<N extends JobName> = { name: N; data: JobPayloads[N] };

export const QUEUE_OF_JOB: Readonly<Record<JobName, QueueName>> = {
  [JobName.ADVANCE_EXECUTION]: QueueName.EXECUTIONS,
  [JobName.DISPATCH_OPERATION]: QueueName.DISPATCH,
  [JobName.VERIFY_OPERATION]: QueueName.VERIFY,
  [JobName.RECONCILE_OPERATION]: QueueName.RECONCILE,
  [JobName.SWEEP]: QueueName.SWEEP,
  [JobName.OBSERVE_OPERATION]: QueueName.VERIFY,
  [JobName.RECHECK_OPERATION]: QueueName.RECONCILE,
  [JobName.DELIVER_WEBHOOK]: QueueName.WEBHOOKS,
};

const KEEP = { removeOnComplete: { age: 3600, count: 10_000 }, removeOnFail: { age: 24 * 3600, count: 10_000 } };

/** A queue whose jobs BullMQ runs again when they throw: five attempts, `delay` ms apart at first, then doubling. */
function retried(delay: number): DefaultJobOptions {
  return {
    attempts: 5,
    backoff: { type: 'exponential', delay },
    removeOnComplete: true,
    removeOnFail: KEEP.removeOnFail,
  };
}

/** Per-queue defaults shared by producers and workers. */
export const JOB_DEFAULTS: Readonly<Record<QueueName, DefaultJobOptions>> = {
  [QueueName.EXECUTIONS]: retried(200),
  // A send is never re-run by BullMQ: attempts 1, and the worker's maxStalledCount 0. The sweeper turns an orphaned
  // SENT operation into UNKNOWN. Completed jobs are kept an hour so the jobId keeps deduplicating late enqueues.
  [QueueName.DISPATCH]: { attempts: 1, ...KEEP },
  [QueueName.VERIFY]: retried(500),
  [QueueName.RECONCILE]: retried(500),
  [QueueName.SWEEP]: { attempts: 1, removeOnComplete: true, removeOnFail: { count: 100 } },
  // Attempts and backoff are configured (WEBHOOK_MAX_ATTEMPTS, WEBHOOK_BACKOFF_MS): see webhookDeliveryJob.
  [QueueName.WEBHOOKS]: { attempts: 1, removeOnComplete: true, removeOnFail: KEEP.removeOnFail },
};

export function queueOptions(
  queue: QueueName,
  connection: RedisClient,
  prefix: string,
  telemetry?: Telemetry,
): QueueOptions {
  return { connection, prefix, defaultJobOptions: JOB_DEFAULTS[queue], ...(telemetry ? { telemetry } : {}) };
}

/**
 * The tag each job kind's ids carry. Ids already in Redis use these strings (`<op>.dispatch`, `<op>.verify.0`, …):
 * changing a tag lets a job enqueued before the change and one enqueued after it exist side by side.
 */
const JOB_ID_TAG: Record<JobName, string> = {
  [JobName.ADVANCE_EXECUTION]: 'advance-execution',
  [JobName.DISPATCH_OPERATION]: 'dispatch',
  [JobName.VERIFY_OPERATION]: 'verify',
  [JobName.RECONCILE_OPERATION]: 'reconcile',
  [JobName.SWEEP]: 'sweep',
  [JobName.OBSERVE_OPERATION]: 'observe',
  [JobName.RECHECK_OPERATION]: 'recheck-operation',
  [JobName.DELIVER_WEBHOOK]: 'deliver-webhook',
};

/**
 * Every custom job id is made here. Deterministic ids (`${id}.${tag}[.${discriminator}]`) make a second enqueue of
 * the same intent harmless while the first job exists; the discriminator names the intent (a check number, a sweep,
 * a reviewer's request). (BullMQ reserves ':' in custom ids.)
 */
export function jobId(name: JobName, id: string, discriminator?: string | number): string {
  const tag = JOB_ID_TAG[name];
  return discriminator === undefined ? `${id}.${tag}` : `${id}.${tag}.${discriminator}`;
}

/**
 * The delayed advance that reads an operation's precondition again (I15): one per execution and due time, so the
 * advances that find the same read owed schedule it once.
 */
export function preconditionReadJobId(executionId: string, dueAt: Date): string {
  return jobId(JobName.ADVANCE_EXECUTION, executionId, `precondition-${dueAt.getTime()}`);
}

/**
 * The scheduled re-check of a held operation due at `dueAt` (its `next_check_at`): one job per due time. Numbered by the
 * re-check count, two writers that read the same count made one id for two due times, and the job kept was not
 * necessarily the one the row names (then it skipped, and nothing read the hold until the sweeper found it overdue).
 * The sweeper re-arms an overdue one under this id too: beside the chain's own job, only late, it makes none.
 */
export function scheduledRecheckJobId(operationId: string, dueAt: Date): string {
  return jobId(JobName.RECHECK_OPERATION, operationId, `due${dueAt.getTime()}`);
}

/**
 * The re-check job of one reviewer's recorded request (`recheck_requests`): one job per request, so every request the
 * API recorded (and answered 202) is read. An id made from the time (the second) let a second reviewer's request of
 * the same second be recorded while its job was deduplicated away, never read.
 */
export function reviewerRecheckJobId(operationId: string, requestId: string): string {
  return jobId(JobName.RECHECK_OPERATION, operationId, requestId);
}

/**
 * The dispatch job that carries out a reviewer's release of a held, never-sent operation (resolve SENT). The API
 * enqueues it and the sweeper re-arms it under the same id, so the two never make two jobs of one release.
 */
export function releaseDispatchJobId(operationId: string): string {
  return jobId(JobName.DISPATCH_OPERATION, operationId, 'release');
}

/**
 * One delivery round of one webhook message: retried by BullMQ with exponential backoff. The id names the round, so
 * a manual redelivery is a new job while an enqueue repeated by the outbox's recovery pass is harmless.
 */
export function webhookDeliveryJob(
  deliveryId: string,
  round: number,
  retry: { attempts: number; backoffMs: number },
  /**
   * Its place among its tenant's waiting deliveries (1: the first): the job's priority. Deliveries are unordered, and
   * every tenant's first waiting delivery goes before any tenant's second, so a tenant with a long line (a slow
   * receiver, a burst) does not hold up the others' deliveries (BullMQ: lower number first, FIFO within one).
   */
  backlog: number,
): { data: JobPayloads[JobName.DELIVER_WEBHOOK]; options: JobsOptions } {
  return {
    data: { deliveryId, round },
    options: {
      jobId: jobId(JobName.DELIVER_WEBHOOK, deliveryId, round),
      attempts: retry.attempts,
      backoff: { type: 'exponential', delay: retry.backoffMs },
      priority: Math.min(Math.max(1, Math.floor(backlog)), WEBHOOK_PRIORITY_LIMIT),
    },
  };
}

/** BullMQ's lowest priority (its PRIORITY_LIMIT): a longer line than this shares the last place. */
const WEBHOOK_PRIORITY_LIMIT = 2 ** 21 - 1;
