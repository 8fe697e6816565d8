import { createApiKey, revokeApiKey } from '@verity/persistence/api-keys';
import {
  ExecutionEvent,
  OperationStatus,
  SubmissionRequest,
  Verity,
  VerityAuthError,
  VerityError,
  VerityNotFoundError,
  isExecutionSettled,
} from '@verity/sdk';
import { DEMO, Stack } from '../support/stack';
import { charge, submission, unique } from '../support/http';

/** One charge (to approve first when `requiresApproval`), as the SDK submits it. */
function chargeOf(reference: string, requiresApproval = false): SubmissionRequest {
  return submission([charge(reference, requiresApproval ? { requires_approval: true } : {})]) as SubmissionRequest;
}

/** What a caller can tell of an error: its class and its problem, but not `instance` (the path it was asked at). */
function asSeen(error: unknown) {
  if (!(error instanceof VerityError)) return error;
  const { status, type, code, title, detail } = error;
  return { name: error.name, status, type, code, title, detail };
}

/**
 * The SDK's waits open the stream with no read first: the stream's opening answers the API's refusals, and an
 * execution already settled is told by its log. Against the running API: the answer is the one GET gives, the error the
 * one a GET throws.
 */
describe('the SDK waits, opening the stream first, against the running API', () => {
  let stack: Stack;
  let dx: Verity;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'sdkwaitfirst' });
    dx = new Verity({ baseUrl: stack.apiUrl, apiKey: DEMO.agent });
  }, 120_000);
  afterAll(async () => stack?.stop());

  it('resolves on an execution already settled with exactly what GET answers, its whole log handed to onEvent once', async () => {
    const created = await dx.executions.create(chargeOf(unique('settled-first')));
    await dx.waitForSettled(created.id, { timeoutMs: 30_000 });

    const seen: ExecutionEvent[] = [];
    const again = await dx.waitForSettled(created.id, { timeoutMs: 30_000, onEvent: (e) => seen.push(e) });
    expect(isExecutionSettled(again)).toBe(true);
    expect(again.operations[0].status).toBe(OperationStatus.VERIFIED);
    expect(again).toEqual(await dx.get(created.id));
    const log = await dx.executions.events(created.id, { limit: 1000 });
    expect(seen.map((e) => e.id)).toEqual(log.data.map((e) => e.id));

    const passing = await dx.waitFor(created.id, (e) => e.operations.length === 1, { timeoutMs: 30_000 });
    expect(passing).toEqual(again);
  });

  it('throws for an id of no execution, or of another tenant’s, the error a GET throws', async () => {
    const theirs = await new Verity({ baseUrl: stack.apiUrl, apiKey: DEMO.otherAgent }).executions.create(
      chargeOf(unique('theirs')),
    );
    for (const id of ['exe_00000000000000000000000000', theirs.id]) {
      const fromGet = await dx.get(id).catch((e: unknown) => e);
      expect(fromGet).toBeInstanceOf(VerityNotFoundError);
      const fromWait = await dx.waitForSettled(id, { timeoutMs: 30_000 }).catch((e: unknown) => e);
      expect(asSeen(fromWait)).toEqual(asSeen(fromGet));
      const fromWaitFor = await dx.waitFor(id, () => true, { timeoutMs: 30_000 }).catch((e: unknown) => e);
      expect(asSeen(fromWaitFor)).toEqual(asSeen(fromGet));
    }
  });

  it('throws the 401 a GET then throws when its key is revoked while it waits (the stream ends key_revoked)', async () => {
    const manager = stack.db.dataSource.manager;
    const key = await createApiKey(manager, { tenantId: 'demo', role: 'agent', label: 'revoked while waiting' });
    const mine = new Verity({ baseUrl: stack.apiUrl, apiKey: key.key });
    const created = await mine.executions.create(chargeOf(unique('revoked-wait'), true));
    const seen: ExecutionEvent[] = [];
    let toldFirst!: () => void;
    const first = new Promise<void>((resolve) => (toldFirst = resolve));
    const waiting = mine
      .waitForSettled(created.id, {
        timeoutMs: 60_000,
        onEvent: (e) => {
          seen.push(e);
          toldFirst();
        },
      })
      .catch((e: unknown) => e);
    await first;
    expect(await revokeApiKey(manager, key.id)).toBe(true);
    const error = await waiting;
    expect(error).toBeInstanceOf(VerityAuthError);
    expect(asSeen(error)).toEqual(asSeen(await mine.get(created.id).catch((e: unknown) => e)));
  });

  it('rejects with the caller’s reason when the caller aborts the wait', async () => {
    const created = await dx.executions.create(chargeOf(unique('aborted-wait'), true));
    const controller = new AbortController();
    let toldFirst!: () => void;
    const first = new Promise<void>((resolve) => (toldFirst = resolve));
    const waiting = dx
      .waitForSettled(created.id, { timeoutMs: 60_000, signal: controller.signal, onEvent: () => toldFirst() })
      .catch((e: unknown) => e);
    await first;
    const reason = new Error('the caller had enough');
    controller.abort(reason);
    expect(await waiting).toBe(reason);
  });
});
