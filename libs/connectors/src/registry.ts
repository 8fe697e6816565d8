import { timingCalls } from './call-metrics';
import { actionCapabilities, type Connector } from './connector';
import { HttpConnector } from './http.connector';
import { redactingSecrets } from './secret-redaction';
import { SandboxPaymentsConnector } from './sandbox-payments.connector';
import { SandboxSmsConnector } from './sandbox-sms.connector';
import { z } from 'zod';

/** Adding a connector: one file implementing `Connector`, plus one line here (see docs/connectors.md). */
export function builtInConnectors(): Connector[] {
  return [new SandboxPaymentsConnector(), new SandboxSmsConnector(), new HttpConnector()];
}

export class ConnectorRegistry {
  private readonly byName: Map<string, Connector>;

  constructor(connectors: Connector[] = builtInConnectors()) {
    // Every caller (dispatcher, lifecycle, reconciler) reaches a connector through here, so every result it returns
    // has the tenant's secret values replaced before anything can store, show or log it, and every call is timed
    // (verity_connector_call_duration_seconds).
    this.byName = new Map(connectors.map((c) => [c.name, timingCalls(redactingSecrets(c))]));
  }

  /** A Map, not an object: `__proto__` or `toString` name no connector. */
  get(name: string): Connector | undefined {
    return this.byName.get(name);
  }

  require(name: string): Connector {
    const connector = this.byName.get(name);
    if (!connector) throw new Error(`unknown connector ${name}`);
    return connector;
  }

  list(): Connector[] {
    return [...this.byName.values()];
  }

  /** The connectors that declare where their operations carry an amount (a tenant's approval threshold applies). */
  approvalAmountDeclarations(): { connector: string; amountField: string }[] {
    return this.list().flatMap((c) =>
      c.approvalAmountField ? [{ connector: c.name, amountField: c.approvalAmountField }] : [],
    );
  }

  /**
   * The limitations table (GET /v1/connectors), generated from the declarations: per connector, and per action
   * (an action may differ from its connector, and a capability that holds only for some operations says when).
   */
  describe() {
    return this.list().map((c) => ({
      name: c.name,
      description: c.description,
      read_back: c.capabilities.read_back,
      context_read: c.capabilities.context_read,
      provider_idempotency: c.capabilities.provider_idempotency,
      reversible: c.capabilities.reversible,
      can_reach_verified: c.capabilities.read_back,
      actions: Object.entries(c.actions).map(([name, spec]) => {
        const capabilities = actionCapabilities(c, name);
        return {
          name,
          description: spec.description,
          read_back: capabilities.read_back,
          context_read: capabilities.context_read,
          provider_idempotency: capabilities.provider_idempotency,
          reversible: capabilities.reversible,
          can_reach_verified: capabilities.read_back,
          conditions: { ...spec.conditions },
          params_schema: z.toJSONSchema(spec.params, { io: 'input', unrepresentable: 'any' }),
        };
      }),
    }));
  }
}
