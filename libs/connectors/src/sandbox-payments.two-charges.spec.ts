import { startSandboxProvider, type SandboxProvider } from '../../../apps/sandbox-provider/src/sandbox-provider';
import { SANDBOX_ACCOUNT_HEADER, SandboxPaymentsConnector } from './sandbox-payments.connector';

/**
 * Two charges of one reference in one account, at the real sandbox provider: the operation's own (made under its
 * Idempotency-Key) and another writer's (another key: a payment page, a script, a second integration). With no id
 * acknowledged (the answer to the send was lost) nothing tells which is the operation's, and two charges of one order
 * are what a person must look at. The connector took the first charge the provider listed: the verdict followed the
 * provider's list order — VERIFIED with the operation's charge listed first (the other charge never seen), a mismatch on
 * the other's amount with it listed first.
 */
describe('sandbox.payments reads of a reference charged twice in the account (the real sandbox provider)', () => {
  let sandbox: SandboxProvider;
  beforeAll(async () => {
    sandbox = await startSandboxProvider({ port: 0 });
  });
  afterAll(async () => sandbox?.close());
  beforeEach(async () => {
    await fetch(`${sandbox.url}/__reset`, { method: 'POST' });
  });

  const connector = new SandboxPaymentsConnector();
  const env = () => ({ sandboxUrl: sandbox.url, timeoutMs: 2000 });
  /** The operation as reconciliation reads it once its send's answer was lost: no provider reference. */
  const unanswered = (reference: string) => ({
    id: 'op_1',
    tenantId: 'demo',
    action: 'charge',
    params: { amount: 100, currency: 'EUR', reference },
    expectedState: null,
    providerRef: null,
  });

  async function chargeAt(reference: string, amount: number, key: string): Promise<string> {
    const res = await fetch(`${sandbox.url}/v1/charges`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key, [SANDBOX_ACCOUNT_HEADER]: 'demo' },
      body: JSON.stringify({ amount, currency: 'EUR', reference }),
    });
    expect(res.status).toBe(201);
    return ((await res.json()) as { id: string }).id;
  }

  /** The operation's charge (its own key) and another writer's of `otherAmount`, in the order given. */
  async function chargedTwice(reference: string, otherAmount: number, operationsFirst: boolean) {
    const own = () => chargeAt(reference, 100, `verity-demo-${reference}`);
    const other = () => chargeAt(reference, otherAmount, `elsewhere-${reference}`);
    return operationsFirst ? [await own(), await other()] : [await other(), await own()];
  }

  it.each([
    ['listed first, the other charge of another amount', 5000, true],
    ['listed last, the other charge of another amount', 5000, false],
    ['listed first, the other charge of the same amount', 100, true],
    ['listed last, the other charge of the same amount', 100, false],
  ])(
    'the read-back with no id is a mismatch on the charges, the operation’s charge %s (never VERIFIED by list order)',
    async (_, otherAmount, operationsFirst) => {
      const reference = `twice-${otherAmount}-${operationsFirst}`;
      const ids = await chargedTwice(reference, otherAmount, operationsFirst);
      const read = await connector.readBack(unanswered(reference), env());
      expect(read).toMatchObject({ kind: 'mismatch', fields: ['charges'] });
      // Both charges are named, for the person who decides: none is the record read as the operation's.
      expect(read.evidence.record).toBeNull();
      expect((read.evidence.charges as { id: string }[]).map((c) => c.id)).toEqual(ids);
    },
  );

  it.each([
    ['first', true],
    ['last', false],
  ])(
    'the context read is a conflict, the charge as asked listed %s (never "requested state present" by list order)',
    async (_, operationsFirst) => {
      const reference = `context-twice-${operationsFirst}`;
      await chargedTwice(reference, 5000, operationsFirst);
      const read = await connector.readContext(unanswered(reference), env());
      expect(read).toMatchObject({
        kind: 'state',
        requestedStatePresent: false,
        conflicts: ['2 charges with this reference: which one is this order’s is not for a read to pick'],
        state: { charged: true, charges: 2 },
      });
    },
  );

  it('still verifies by the acknowledged id, the other charge listed first', async () => {
    const [, own] = await chargedTwice('by-id', 5000, false);
    const read = await connector.readBack({ ...unanswered('by-id'), providerRef: { id: own, version: 2 } }, env());
    expect(read).toMatchObject({ kind: 'found', evidence: { record: { id: own, amount: 100 } } });
  });

  it("still verifies the reference's one charge with no id, and reads its context as the state asked for", async () => {
    await chargeAt('once', 100, 'verity-demo-once');
    expect(await connector.readBack(unanswered('once'), env())).toMatchObject({ kind: 'found' });
    expect(await connector.readContext(unanswered('once'), env())).toMatchObject({
      requestedStatePresent: true,
      conflicts: [],
    });
  });
});
