import { JobName, jobId, preconditionReadJobId, releaseDispatchJobId } from './names';

describe('jobId', () => {
  // Ids already in Redis dedupe later enqueues of the same intent: a changed id would let a second job in beside it.
  it.each([
    [JobName.DISPATCH_OPERATION, undefined, 'op_1.dispatch'],
    [JobName.DISPATCH_OPERATION, 'release', 'op_1.dispatch.release'],
    [JobName.VERIFY_OPERATION, 0, 'op_1.verify.0'],
    [JobName.RECONCILE_OPERATION, 3, 'op_1.reconcile.3'],
    [JobName.OBSERVE_OPERATION, 17, 'op_1.observe.17'],
    [JobName.RECHECK_OPERATION, 'reviewer5', 'op_1.recheck-operation.reviewer5'],
    [JobName.DELIVER_WEBHOOK, 2, 'op_1.deliver-webhook.2'],
  ])('%s with %p is %s', (name, discriminator, expected) => {
    expect(jobId(name, 'op_1', discriminator)).toBe(expected);
  });

  it('gives each execution and due time one precondition read', () => {
    const due = new Date('2026-11-30T12:00:00.000Z');
    expect(preconditionReadJobId('exe_1', due)).toBe(`exe_1.advance-execution.precondition-${due.getTime()}`);
    expect(preconditionReadJobId('exe_1', due)).toBe(preconditionReadJobId('exe_1', new Date(due)));
  });

  it("gives a reviewer's release the id the API has always used, so the sweeper's re-arm finds the same job", () => {
    expect(releaseDispatchJobId('op_1')).toBe('op_1.dispatch.release');
  });

  it('never uses the separator BullMQ reserves', () => {
    for (const name of Object.values(JobName)) expect(jobId(name, 'op_1', 'x')).not.toContain(':');
  });
});
