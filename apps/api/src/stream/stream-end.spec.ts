import { ExecutionStatus, OperationStatus, VerificationMethod } from '@verity/status-model';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { streamMustRead, streamVerdict } from './stream-end';

const E = ExecutionStatus;
const S = OperationStatus;
const RAW = VerificationMethod.READ_AFTER_WRITE;
const now = new Date('2026-01-01T12:00:00Z');
const past = new Date('2026-01-01T11:00:00Z');
const future = new Date('2026-01-01T13:00:00Z');
const held = { status: S.MANUAL_REVIEW, verificationMethod: RAW } as const;
const verified = { status: S.VERIFIED, verificationMethod: RAW } as const;

describe('streamVerdict', () => {
  it('ends settled once nothing can change, before or after the deadline', () => {
    for (const deadlineAt of [past, future]) {
      expect(
        streamVerdict({ executionStatus: E.COMPLETED, deadlineAt, operations: [verified], outcomeCurrent: true }, now),
      ).toEqual({
        end: 'settled',
      });
    }
  });

  it('stays open while an outcome evaluation is owed after the last change, until the deadline', () => {
    const state = { executionStatus: E.COMPLETED, operations: [verified], outcomeCurrent: false };
    expect(streamVerdict({ ...state, deadlineAt: future }, now)).toEqual({ end: null, wakeAt: future });
    expect(streamVerdict({ ...state, deadlineAt: past }, now)).toEqual({ end: 'deadline' });
  });

  it('stays open for a completed execution with a held operation, and says when its deadline will end it', () => {
    expect(
      streamVerdict(
        { executionStatus: E.COMPLETED, deadlineAt: future, operations: [held], outcomeCurrent: true },
        now,
      ),
    ).toEqual({
      end: null,
      wakeAt: future,
    });
  });

  it('ends deadline for a terminal execution past its deadline with something still able to change', () => {
    expect(
      streamVerdict({ executionStatus: E.COMPLETED, deadlineAt: past, operations: [held], outcomeCurrent: true }, now),
    ).toEqual({
      end: 'deadline',
    });
    const reconciling = { status: S.RECONCILING, verificationMethod: RAW } as const;
    expect(
      streamVerdict(
        { executionStatus: E.EXPIRED, deadlineAt: past, operations: [reconciling], outcomeCurrent: true },
        now,
      ),
    ).toEqual({
      end: 'deadline',
    });
  });

  it('stays open for an execution still running past its deadline: its expiry is still to be delivered', () => {
    expect(
      streamVerdict(
        { executionStatus: E.WAITING_FOR_APPROVAL, deadlineAt: past, operations: [verified], outcomeCurrent: true },
        now,
      ),
    ).toEqual({ end: null, wakeAt: null });
  });

  it('stays open, settled as read, until a read begun before a person’s FAILED can no longer land on it', () => {
    const failed = { status: S.FAILED, verificationMethod: RAW } as const;
    const soon = new Date(now.getTime() + 1_500);
    const state = { executionStatus: E.COMPLETED, deadlineAt: past, operations: [failed], outcomeCurrent: true };
    expect(streamVerdict({ ...state, lateReadUntil: soon }, now)).toEqual({ end: null, wakeAt: soon });
    expect(streamVerdict({ ...state, lateReadUntil: now }, now)).toEqual({ end: 'settled' });
    expect(streamVerdict({ ...state, lateReadUntil: null }, now)).toEqual({ end: 'settled' });
  });
});

describe('streamMustRead', () => {
  const moved = (toStatus: string | null) => ({ type: 'execution.status_changed', toStatus });
  const operation = (toStatus: string) => ({ type: 'operation.status_changed', toStatus });

  it('reads on a stream’s first pass, a reconnection’s included, and after a read that found no execution', () => {
    expect(streamMustRead(undefined, [])).toBe(true);
    expect(streamMustRead(undefined, [operation(S.SENT)])).toBe(true);
    expect(streamMustRead(null, [])).toBe(true);
  });

  it('reads on every pass once the last read found the execution terminal, an empty page (a wake-up) included', () => {
    for (const status of [E.COMPLETED, E.FAILED, E.CANCELLED, E.EXPIRED]) {
      expect(streamMustRead(status, [])).toBe(true);
      expect(streamMustRead(status, [{ type: 'operation.resolved', toStatus: S.FAILED }])).toBe(true);
      expect(streamMustRead(status, [{ type: 'outcome.evaluated', toStatus: null }])).toBe(true);
    }
  });

  it('does not read while the execution is not terminal and the page holds nothing that can make it so', () => {
    expect(streamMustRead(E.RUNNING, [])).toBe(false);
    expect(
      streamMustRead(E.WAITING_FOR_APPROVAL, [
        operation(S.SENT),
        operation(S.VERIFIED),
        { type: 'approval.decided', toStatus: null },
        { type: 'operation.rechecked', toStatus: null },
        { type: 'outcome.evaluated', toStatus: null },
        moved(E.RUNNING),
        moved(E.VALIDATING_OUTPUT),
      ]),
    ).toBe(false);
  });

  it('reads after the execution’s move to a terminal status, even as the only such event of a page', () => {
    for (const status of [E.COMPLETED, E.FAILED, E.CANCELLED, E.EXPIRED]) {
      expect(streamMustRead(E.VALIDATING_OUTPUT, [operation(S.VERIFIED), moved(status)])).toBe(true);
    }
  });

  it('reads when unsure: an unknown event type, an execution move to an unknown status or to none', () => {
    expect(streamMustRead(E.RUNNING, [{ type: 'execution.created', toStatus: E.CREATED }])).toBe(true);
    expect(streamMustRead(E.RUNNING, [{ type: 'something.new', toStatus: null }])).toBe(true);
    expect(streamMustRead(E.RUNNING, [moved('archived')])).toBe(true);
    expect(streamMustRead(E.RUNNING, [moved(null)])).toBe(true);
  });

  // streamMustRead skips the read after a page with no execution.status_changed: it holds only while every statement
  // that moves an execution's status writes that event in it. Read from libs/persistence's statement snapshot.
  it('rests on every statement that sets an execution’s status also writing its execution.status_changed', () => {
    const dir = join(__dirname, '..', '..', '..', '..', 'libs', 'persistence', 'queries');
    const statements = readdirSync(dir)
      .filter((file) => file.endsWith('.sql'))
      .flatMap((file) => readFileSync(join(dir, file), 'utf8').split(/^-- /m));
    const setsStatus = (sql: string) =>
      [...sql.matchAll(/UPDATE\s+executions(?:\s+\w+)?\s+SET\s([\s\S]*?)(?:\bFROM\b|\bWHERE\b|\bRETURNING\b)/gi)].some(
        ([, assignments]) => /(^|[\s,])status\s*=/.test(assignments),
      );
    const moving = statements.filter(setsStatus);
    expect(moving.length).toBeGreaterThan(0);
    const silent = moving.filter((sql) => !sql.includes("'execution.status_changed'"));
    expect(silent.map((sql) => sql.split('\n')[0])).toEqual([]);
  });
});
