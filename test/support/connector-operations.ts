import type { ConnectorOperation } from '@verity/connectors';

/** A text message as the sandbox.sms connector is given it to send (`id`: the operation's). */
export const smsToSend = (id: string): ConnectorOperation => ({
  id,
  tenantId: 'demo',
  action: 'send',
  params: { to: '+15550100', body: 'hi' },
  expectedState: null,
  providerRef: null,
});
