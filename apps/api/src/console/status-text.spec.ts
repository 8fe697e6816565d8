import { ExecutionStatus, OperationStatus, VerificationMethod } from '@verity/sdk';
// eslint-disable-next-line no-restricted-imports -- a test of the browser code's words; the server still never imports it
import { divergence, effectMeaning, recheckNote } from './client/status-text';

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

describe('console: a re-check recorded after its hold was decided says so beside what it read', () => {
  const rechecked = (data: Record<string, unknown>) => ({ type: 'operation.rechecked', data });

  it('a reviewer’s read written after the hold was decided (decided_meanwhile) is labelled: it changed nothing', () => {
    const note = recheckNote(rechecked({ trigger: 'reviewer', result: 'absent', decided_meanwhile: 'VERIFIED' }));
    expect(note).toBe('read after the hold was decided (VERIFIED): changed nothing');
  });

  it('a reviewer’s job that started after the hold was decided (no read: result null) says nothing was read', () => {
    const note = recheckNote(rechecked({ trigger: 'reviewer', result: null, decided_meanwhile: 'FAILED' }));
    expect(note).toBe('not read: the hold was decided (FAILED) before the re-check ran');
  });

  it('a reviewer’s read written after another had refuted the FAILED (refutation_on_record) is labelled too', () => {
    const note = recheckNote(rechecked({ trigger: 'reviewer', result: 'found', refutation_on_record: true }));
    expect(note).toBe('read after the FAILED’s refutation was on record: changed nothing');
  });

  it('a reviewer’s job that found the hold open but could not read it back (cannot_read_back) says why nothing was read', () => {
    const note = (why: string) =>
      recheckNote(rechecked({ trigger: 'reviewer', result: null, evidence: null, cannot_read_back: why }));
    expect(note('connector_unavailable')).toBe(
      'not read: the reconciler has no connector for it now; the hold stands as it was',
    );
    expect(note('no_read_back')).toBe(
      'not read: its connector no longer reads this operation back; the hold stands as it was',
    );
    // A reason this console does not know of yet is shown as written.
    expect(note('never_sent')).toBe('not read: cannot read it back (never_sent); the hold stands as it was');
  });

  it('any other re-check, or another event, has no such label', () => {
    expect(recheckNote(rechecked({ trigger: 'reviewer', result: 'absent' }))).toBeNull();
    expect(recheckNote(rechecked({ result: 'found', after: 'FAILED' }))).toBeNull();
    expect(recheckNote({ type: 'operation.resolved', data: { decided_meanwhile: 'VERIFIED' } })).toBeNull();
    expect(recheckNote({ type: 'operation.rechecked', data: null })).toBeNull();
  });
});
