import { z } from 'zod';
import { rawJsonIssue } from '@verity/platform';
import { DEFAULT_REJECTION_STATUSES, SendOutcome, classifySend } from './classify';
import type { Connector, ConnectorEnvironment, ConnectorOperation } from './connector';
import { httpExchange } from './http-exchange';
import { SANDBOX_ACCOUNT_HEADER } from './sandbox-payments.connector';

const SendParams = z.strictObject({
  to: z.string().regex(/^\+[1-9][0-9]{6,14}$/, 'an E.164 phone number such as +15550100'),
  body: z.string().min(1).max(1600),
  client_ref: z.string().min(1).max(200).optional(),
});

/**
 * The sandbox provider's SMS: no read endpoint and no idempotency. Its operations end ACKNOWLEDGED at best, and
 * an UNKNOWN one goes to a human: re-sending could deliver a second message, which is why blind retry is forbidden.
 */
export class SandboxSmsConnector implements Connector {
  readonly name = 'sandbox.sms';
  readonly description = 'Text messages through the sandbox provider (POST /v1/messages; no read-back)';
  readonly capabilities = { read_back: false, context_read: false, provider_idempotency: false, reversible: false };
  readonly actions = { send: { description: 'Send one text message', params: SendParams } };
  /** Its rejections are the provider's word (fixed statuses), not the operation's. */
  readonly failedSpendsNothing = true;

  /**
   * The provider takes every POST as a new message: `client_ref` is the caller's only name for one. While a send naming
   * it is unsettled (it may have gone out), another naming it is refused at intake rather than sent a second time.
   */
  resendReference(_action: string, params: Record<string, unknown>): { field: string; value: string } | null {
    const { client_ref: clientRef } = params as { client_ref?: unknown };
    return typeof clientRef === 'string' ? { field: 'client_ref', value: clientRef } : null;
  }

  async send(op: ConnectorOperation, env: ConnectorEnvironment): Promise<SendOutcome> {
    const exchange = await httpExchange({
      method: 'POST',
      url: `${env.sandboxUrl}/v1/messages`,
      // The tenant is the provider's account, as for payments: its /__effects counts a client_ref per account.
      headers: { [SANDBOX_ACCOUNT_HEADER]: op.tenantId },
      body: op.params,
      timeoutMs: env.timeoutMs,
      signal: env.signal,
    });
    // An id from JSON that reads two ways at it (named twice: JSON.parse keeps the last; a number a double rounds) names
    // another message than the one the provider meant: none is kept, and the send is acknowledged all the same.
    const twoWays = exchange.kind === 'response' && exchange.json !== undefined && rawJsonIssue(exchange.json, ['id']);
    return classifySend(exchange, {
      rejectionStatuses: DEFAULT_REJECTION_STATUSES,
      providerRef: (body) => (twoWays ? {} : { id: (body as { id?: string } | undefined)?.id }),
    });
  }
}
