import {
  JobName,
  jobId,
  preconditionReadJobId,
  releaseDispatchJobId,
  reviewerRecheckJobId,
  scheduledRecheckJobId,
  webhookDeliveryJob,
} from './names';

describe('jobId', () => {
  // Ids already in Redis dedupe later enqueues of the same intent: a changed id would let a second job in beside it.
  it.each([
    [JobName.DISPATCH_OPERATION, undefined, 'op_1.dispatch'],
    [JobName.DISPATCH_OPERATION, 'release', 'op_1.dispatch.release'],
    [JobName.VERIFY_OPERATION, 0, 'op_1.verify.0'],
    [JobName.RECONCILE_OPERATION, 3, 'op_1.reconcile.3'],
    [JobName.OBSERVE_OPERATION, 17, 'op_1.observe.17'],
    [JobName.RECHECK_OPERATION, 'rcq_a', 'op_1.recheck-operation.rcq_a'], // a reviewer's, by the request's id
    [JobName.DELIVER_WEBHOOK, 2, 'op_1.deliver-webhook.2'],
  ])('%s with %p is %s', (name, discriminator, expected) => {
    expect(jobId(name, 'op_1', discriminator)).toBe(expected);
  });

  it('gives each execution and due time one precondition read', () => {
    const due = new Date('2026-11-30T12:00:00.000Z');
    expect(preconditionReadJobId('exe_1', due)).toBe(`exe_1.advance-execution.precondition-${due.getTime()}`);
    expect(preconditionReadJobId('exe_1', due)).toBe(preconditionReadJobId('exe_1', new Date(due)));
  });

  it('gives each scheduled re-check of an operation one job per due time, not per count', () => {
    const due = new Date('2026-11-30T12:00:00.000Z');
    expect(scheduledRecheckJobId('op_1', due)).toBe(`op_1.recheck-operation.due${due.getTime()}`);
    expect(scheduledRecheckJobId('op_1', due)).toBe(scheduledRecheckJobId('op_1', new Date(due)));
    expect(scheduledRecheckJobId('op_1', new Date(due.getTime() + 1))).not.toBe(scheduledRecheckJobId('op_1', due));
  });

  it("gives each reviewer's re-check request its own job, whenever it was asked for", () => {
    expect(reviewerRecheckJobId('op_1', 'rcq_a')).toBe('op_1.recheck-operation.rcq_a');
    expect(reviewerRecheckJobId('op_1', 'rcq_b')).not.toBe(reviewerRecheckJobId('op_1', 'rcq_a'));
  });

  it("gives a reviewer's release the id the API has always used, so the sweeper's re-arm finds the same job", () => {
    expect(releaseDispatchJobId('op_1')).toBe('op_1.dispatch.release');
  });

  it('never uses the separator BullMQ reserves', () => {
    for (const name of Object.values(JobName)) expect(jobId(name, 'op_1', 'x')).not.toContain(':');
  });
});

describe('webhookDeliveryJob', () => {
  const retry = { attempts: 8, backoffMs: 5000 };

  it("is scheduled by its place in its tenant's line: every tenant's first before any tenant's second", () => {
    expect(webhookDeliveryJob('msg_1', 0, retry, 1).options.priority).toBe(1);
    expect(webhookDeliveryJob('msg_2', 0, retry, 2000).options.priority).toBe(2000);
    expect(webhookDeliveryJob('msg_1', 3, retry, 1)).toEqual({
      data: { deliveryId: 'msg_1', round: 3 },
      options: {
        jobId: 'msg_1.deliver-webhook.3',
        attempts: 8,
        backoff: { type: 'exponential', delay: 5000 },
        priority: 1,
      },
    });
  });

  it("stays within BullMQ's priorities: never 0 (which would go before every prioritized job), never beyond its limit", () => {
    expect(webhookDeliveryJob('msg_1', 0, retry, 0).options.priority).toBe(1);
    expect(webhookDeliveryJob('msg_1', 0, retry, -5).options.priority).toBe(1);
    expect(webhookDeliveryJob('msg_1', 0, retry, 1.7).options.priority).toBe(1);
    expect(webhookDeliveryJob('msg_1', 0, retry, 10 ** 9).options.priority).toBe(2 ** 21 - 1);
  });
});
