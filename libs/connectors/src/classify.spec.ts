import { createServer } from 'node:http';
import { OperationStatus, TerminalReason } from '@verity/status-model';
import { listenLocally, serveDuringDescribe } from '../../../test/support/local-server';
import type { ConnectorEnvironment, ConnectorOperation } from './connector';
import { SandboxPaymentsConnector } from './sandbox-payments.connector';
import { SandboxSmsConnector } from './sandbox-sms.connector';
import { DEFAULT_REJECTION_STATUSES, classifySend } from './classify';

/**
 * The outcome classification of one send, row by row, as the built-in connectors apply it to what a real provider
 * (a loopback server) answers: 2xx → ACKNOWLEDGED; an explicit, documented rejection (400/402/409/422 with an error
 * body) → FAILED / CONNECTOR_REJECTED; never delivered (connection refused) → FAILED / SOURCE_UNREACHABLE; a timeout,
 * a reset, a 5xx, a 408 or a 429 after the request was written → UNKNOWN / CONNECTOR_ERROR — with an error body too:
 * "try again later" is no proof that nothing happened. A rejection status with no error body (a proxy's bare 4xx)
 * proves nothing either.
 */
describe('the outcome classification of one send (sandbox.payments and sandbox.sms)', () => {
  /** The answer is chosen by the reference (payments) or client_ref (sms): `<status>`, `<status>-bare`, `reset`, `hang`. */
  const provider = serveDuringDescribe(() =>
    createServer((req, res) => {
      let raw = '';
      req.on('data', (chunk: Buffer) => (raw += chunk.toString()));
      req.on('end', () => {
        const body = JSON.parse(raw) as { reference?: string; client_ref?: string };
        const answer = body.reference ?? body.client_ref ?? '';
        if (answer === 'hang') return; // never answers: the client's timeout
        if (answer === 'reset') {
          req.socket.destroy(); // the request arrived (it may have been carried out), the answer never comes
          return;
        }
        const [code, bare] = answer.split('-');
        const status = Number(code);
        if (bare === 'bare') {
          res.writeHead(status).end();
          return;
        }
        const json =
          status < 300
            ? { id: `id-${answer}`, reference: body.reference, status: 'succeeded', version: 1 }
            : { error: { code: `code_${status}`, message: 'provider says so' } };
        res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(json));
      });
    }),
  );

  const payments = new SandboxPaymentsConnector();
  const sms = new SandboxSmsConnector();
  // Only the answer that never comes waits for the timeout; every other answer gets a bound a loaded machine cannot
  // reach, so a slow first request does not turn a 2xx into the timeout's UNKNOWN.
  const env = (sandboxUrl = provider.url, timeoutMs = 10_000): ConnectorEnvironment => ({ sandboxUrl, timeoutMs });
  const envFor = (answer: string) => env(provider.url, answer === 'hang' ? 300 : undefined);
  const op = (params: Record<string, unknown>): ConnectorOperation => ({
    id: 'op_classify',
    tenantId: 'demo',
    action: 'charge',
    params,
    expectedState: null,
    providerRef: null,
  });
  const charge = (reference: string) =>
    payments.send(op({ amount: 100, currency: 'EUR', reference }), envFor(reference));
  const text = (clientRef: string) =>
    sms.send({ ...op({ to: '+15550100', body: 'hi', client_ref: clientRef }), action: 'send' }, envFor(clientRef));

  const acknowledged = { status: OperationStatus.ACKNOWLEDGED };
  const rejected = { status: OperationStatus.FAILED, reason: TerminalReason.CONNECTOR_REJECTED };
  const unknown = { status: OperationStatus.UNKNOWN, reason: TerminalReason.CONNECTOR_ERROR };

  it.each([
    ['200', acknowledged],
    ['201', acknowledged],
    ['202', acknowledged],
    ['400', rejected],
    ['402', rejected],
    ['409', rejected],
    ['422', rejected],
    ['400-bare', unknown],
    ['422-bare', unknown],
    ['408', unknown],
    ['429', unknown],
    ['500', unknown],
    ['502', unknown],
    ['503', unknown],
    ['reset', unknown],
    ['hang', unknown],
  ])('%s → %o, for a charge and for a message', async (answer, expected) => {
    expect(await charge(answer)).toMatchObject(expected);
    expect(await text(answer)).toMatchObject(expected);
  });

  it('an explicit rejection passes on the provider’s error code, never its body', async () => {
    expect(await charge('402')).toMatchObject({ providerError: { code: 'code_402' } });
  });

  it('connection refused (the request was never delivered) → FAILED / SOURCE_UNREACHABLE', async () => {
    const closed = await listenLocally(createServer());
    await closed.close();
    const failed = { status: OperationStatus.FAILED, reason: TerminalReason.SOURCE_UNREACHABLE };
    expect(await payments.send(op({ amount: 100, currency: 'EUR', reference: 'r' }), env(closed.url))).toMatchObject(
      failed,
    );
    expect(await sms.send({ ...op({ to: '+15550100', body: 'hi' }), action: 'send' }, env(closed.url))).toMatchObject(
      failed,
    );
  });
});

describe('the provider error code a rejection passes on', () => {
  const rejection = (code: string) =>
    classifySend(
      { kind: 'response', status: 422, headers: {}, body: { error: { code } }, truncated: false },
      { rejectionStatuses: DEFAULT_REJECTION_STATUSES },
    );

  it('is cut to 100 characters before a character it would halve: the half could not be stored as JSON', () => {
    const code = `${'x'.repeat(99)}😀tail`;
    const outcome = rejection(code) as { providerError: { code: string } };
    expect(outcome.providerError.code).toBe('x'.repeat(99));
    expect(JSON.stringify(outcome.providerError)).not.toMatch(/\\ud83d/);
    expect((rejection('x'.repeat(120)) as { providerError: { code: string } }).providerError.code).toHaveLength(100);
  });
});

describe('a declared rejection answered with a body past the size limit (not read)', () => {
  const cut = { kind: 'response', status: 422, headers: {}, body: undefined, truncated: true } as const;

  it('is FAILED by its status alone when the rule needs no error body', () => {
    expect(classifySend(cut, { rejectionStatuses: [422], requireErrorBody: false })).toEqual({
      status: OperationStatus.FAILED,
      reason: TerminalReason.CONNECTOR_REJECTED,
      detail: 'provider rejected the request (422)',
      providerError: undefined,
    });
  });

  it('is UNKNOWN when the rule needs the error body it did not read, and for an undeclared status', () => {
    expect(classifySend(cut, { rejectionStatuses: [422] })).toMatchObject({ status: OperationStatus.UNKNOWN });
    expect(classifySend(cut, { rejectionStatuses: [400], requireErrorBody: false })).toMatchObject({
      status: OperationStatus.UNKNOWN,
    });
  });
});
