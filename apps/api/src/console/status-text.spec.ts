import { ExecutionStatus, OperationStatus, VerificationMethod } from '@verity/sdk';
// eslint-disable-next-line no-restricted-imports -- a test of the browser code's words; the server still never imports it
import { divergence, effectMeaning } from './client/status-text';

describe('console: a FAILED contradicted since is not shown as "no effect exists"', () => {
  const failed = {
    status: OperationStatus.FAILED,
    verification_method: VerificationMethod.READ_AFTER_WRITE,
    attempt: 1,
  };

  it('a FAILED the API shows with commit unknown (a late 2xx, a read after the resolution) may have happened', () => {
    const note = divergence({ status: ExecutionStatus.FAILED }, { ...failed, commit: 'unknown' });
    expect(note?.tone).toBe('warn');
    expect(note?.text).not.toMatch(/no effect exists/);
    expect(note?.text).toMatch(/may have happened/);
    expect(
      effectMeaning({ status: OperationStatus.FAILED, commit: 'unknown' }, 'explicit rejection: no effect'),
    ).toMatch(/contradicted since/);
  });

  it('a FAILED rejected as recorded keeps its meaning', () => {
    expect(divergence({ status: ExecutionStatus.FAILED }, { ...failed, commit: 'rejected' })).toMatchObject({
      tone: 'info',
      text: expect.stringMatching(/no effect exists/),
    });
    expect(effectMeaning({ status: OperationStatus.FAILED, commit: 'rejected' }, 'no effect')).toBe('no effect');
  });
});
