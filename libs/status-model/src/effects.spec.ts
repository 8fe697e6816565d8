import { OperationForEffects, summarizeEffects } from './effects';
import {
  OPERATION_STATUSES,
  OperationStatus,
  TerminalReason,
  VerificationMethod,
  VerificationMethodValue,
} from './operation';

const S = OperationStatus;
const RAW = VerificationMethod.READ_AFTER_WRITE;

const NEVER_SENT: readonly OperationStatus[] = [S.PREPARED, S.CANCELLED];

const op = (
  status: OperationStatus,
  verificationMethod: VerificationMethodValue = RAW,
  extra: Partial<OperationForEffects> = {},
): OperationForEffects => ({
  status,
  verificationMethod,
  attempt: NEVER_SENT.includes(status) ? 0 : 1,
  ...extra,
});
const heldBeforeSend = () =>
  op(S.MANUAL_REVIEW, RAW, { attempt: 0, terminalReason: TerminalReason.KNOWLEDGE_CONFLICT });
const noChange = () => op(S.VERIFIED, RAW, { attempt: 0, noChangeRequired: true });

describe('summarizeEffects (docs/contract.md §3 effects summary)', () => {
  describe('all_verified', () => {
    it.each([[[op(S.VERIFIED)]], [[op(S.VERIFIED), op(S.VERIFIED, ''), op(S.VERIFIED)]]])(
      'when every operation is VERIFIED (%#)',
      (ops) => {
        expect(summarizeEffects(ops).summary).toBe('all_verified');
      },
    );
  });

  describe('none', () => {
    it.each([
      ['no operations at all', []],
      ['everything failed', [op(S.FAILED), op(S.FAILED)]],
      ['everything cancelled', [op(S.CANCELLED)]],
      ['failed and cancelled', [op(S.FAILED), op(S.CANCELLED)]],
      ['only prepared operations', [op(S.PREPARED), op(S.PREPARED, '')]],
      ['prepared and failed', [op(S.PREPARED), op(S.FAILED)]],
    ])('when %s', (_label, ops) => {
      expect(summarizeEffects(ops).summary).toBe('none');
    });
  });

  describe('partial', () => {
    it.each([
      ['verified and failed', [op(S.VERIFIED), op(S.FAILED)]],
      ['verified and cancelled', [op(S.VERIFIED), op(S.CANCELLED)]],
      ['verified and still prepared', [op(S.VERIFIED), op(S.PREPARED)]],
      ['acknowledged without read-back and failed', [op(S.ACKNOWLEDGED, ''), op(S.FAILED)]],
      [
        'verified, acknowledged without read-back and cancelled',
        [op(S.VERIFIED), op(S.ACKNOWLEDGED, ''), op(S.CANCELLED)],
      ],
    ])('when %s', (_label, ops) => {
      expect(summarizeEffects(ops).summary).toBe('partial');
    });
  });

  describe('unverified', () => {
    it.each([
      ['only acknowledged without read-back', [op(S.ACKNOWLEDGED, '')]],
      ['verified and acknowledged without read-back', [op(S.VERIFIED), op(S.ACKNOWLEDGED, '')]],
      ['several acknowledged without read-back', [op(S.ACKNOWLEDGED, ''), op(S.ACKNOWLEDGED, '')]],
    ])('when %s', (_label, ops) => {
      expect(summarizeEffects(ops).summary).toBe('unverified');
    });
  });

  describe('unknown', () => {
    it.each([
      ['an operation is SENT', [op(S.SENT)]],
      ['an operation is UNKNOWN', [op(S.UNKNOWN)]],
      ['an operation is RECONCILING', [op(S.RECONCILING)]],
      ['an operation is held in MANUAL_REVIEW', [op(S.MANUAL_REVIEW)]],
      ['an ACKNOWLEDGED operation still awaits read-back', [op(S.ACKNOWLEDGED, RAW)]],
      ['everything else is verified but one is UNKNOWN', [op(S.VERIFIED), op(S.VERIFIED), op(S.UNKNOWN)]],
      ['failures and one awaiting read-back', [op(S.FAILED), op(S.ACKNOWLEDGED, RAW)]],
      ['an uncertain one among prepared ones', [op(S.PREPARED), op(S.SENT, '')]],
      ['a FAILED is contradicted since (a late 2xx, a later read)', [op(S.FAILED, RAW, { failureRefuted: true })]],
      [
        'a VERIFIED is contradicted since (a late rejection)',
        [op(S.VERIFIED, RAW, { verificationContradicted: true })],
      ],
    ])('when %s', (_label, ops) => {
      expect(summarizeEffects(ops).summary).toBe('unknown');
    });

    it('a FAILED contradicted since counts as commit unknown, not rejected, and not as an effect that never happened', () => {
      const effects = summarizeEffects([op(S.FAILED, RAW, { failureRefuted: true }), op(S.VERIFIED)]);
      expect(effects.commit).toMatchObject({ rejected: 0, unknown: 1, committed: 1 });
      expect(effects.summary).toBe('unknown');
      expect(summarizeEffects([op(S.FAILED), op(S.VERIFIED)]).summary).toBe('partial');
    });
  });

  it('a VERIFIED contradicted since counts as commit unknown, not committed', () => {
    const effects = summarizeEffects([op(S.VERIFIED, RAW, { verificationContradicted: true }), op(S.VERIFIED)]);
    expect(effects.commit).toMatchObject({ committed: 1, unknown: 1 });
    expect(effects.summary).toBe('unknown');
  });

  describe('counts', () => {
    it('has a zero count for every status when there are no operations', () => {
      const { counts } = summarizeEffects([]);
      expect(Object.keys(counts).sort()).toEqual([...OPERATION_STATUSES].sort());
      for (const status of OPERATION_STATUSES) expect(counts[status]).toBe(0);
    });

    it('counts operations per status', () => {
      const ops = [
        op(S.VERIFIED),
        op(S.VERIFIED, ''),
        op(S.FAILED),
        op(S.ACKNOWLEDGED, ''),
        op(S.ACKNOWLEDGED, RAW),
        op(S.ACKNOWLEDGED, ''),
        op(S.UNKNOWN),
        op(S.CANCELLED),
      ];
      expect(summarizeEffects(ops).counts).toEqual({
        PREPARED: 0,
        SENT: 0,
        ACKNOWLEDGED: 3,
        VERIFIED: 2,
        UNKNOWN: 1,
        RECONCILING: 0,
        FAILED: 1,
        MANUAL_REVIEW: 0,
        CANCELLED: 1,
      });
    });

    it('counts add up to the number of operations, one per status each', () => {
      const ops = OPERATION_STATUSES.map((s) => op(s));
      const { counts } = summarizeEffects(ops);
      expect(Object.values(counts).reduce((a, b) => a + b, 0)).toBe(ops.length);
      for (const status of OPERATION_STATUSES) expect(counts[status]).toBe(1);
    });

    it('does not modify its input and returns a fresh counts object each time', () => {
      const ops = Object.freeze([op(S.VERIFIED), op(S.FAILED)]);
      const first = summarizeEffects(ops);
      const second = summarizeEffects(ops);
      expect(first).toEqual(second);
      expect(first.counts).not.toBe(second.counts);
      expect(ops).toEqual([op(S.VERIFIED), op(S.FAILED)]);
    });
  });

  describe('holds and changes Verity did not cause (docs/semantics.md)', () => {
    it('a MANUAL_REVIEW held before sending is not an uncertain effect: none on its own, partial beside a verified one', () => {
      expect(summarizeEffects([heldBeforeSend()]).summary).toBe('none');
      expect(summarizeEffects([op(S.VERIFIED), heldBeforeSend()]).summary).toBe('partial');
      expect(summarizeEffects([heldBeforeSend()])).toMatchObject({ not_sent: 1, held_not_sent: 1 });
    });

    it('a MANUAL_REVIEW after a send stays unknown and is not counted as not sent', () => {
      const effects = summarizeEffects([op(S.MANUAL_REVIEW)]);
      expect(effects).toMatchObject({ summary: 'unknown', not_sent: 0, held_not_sent: 0 });
    });

    it('separates no change required from verified effects Verity caused', () => {
      const effects = summarizeEffects([noChange(), op(S.VERIFIED)]);
      expect(effects).toMatchObject({ summary: 'all_verified', no_change_required: 1, not_sent: 0 });
      expect(effects.commit).toEqual({ not_dispatched: 1, committed: 1, rejected: 0, unknown: 0 });
    });

    it('counts a deny (CANCELLED, DENIED) as not sent, never as a rejection or proof', () => {
      const denied = op(S.CANCELLED, RAW, { terminalReason: TerminalReason.DENIED });
      const effects = summarizeEffects([denied]);
      expect(effects).toMatchObject({ summary: 'none', not_sent: 1, held_not_sent: 0 });
      expect(effects.commit).toEqual({ not_dispatched: 1, committed: 0, rejected: 0, unknown: 0 });
    });

    it('counts every operation under exactly one commit value', () => {
      const ops = [...OPERATION_STATUSES.map((s) => op(s)), heldBeforeSend(), noChange()];
      const { commit } = summarizeEffects(ops);
      expect(Object.values(commit).reduce((a, b) => a + b, 0)).toBe(ops.length);
    });
  });
});
