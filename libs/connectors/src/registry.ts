import type { Connector } from './connector';
import { SandboxPaymentsConnector } from './sandbox-payments.connector';
import { SandboxSmsConnector } from './sandbox-sms.connector';
import { z } from 'zod';

/** Adding a connector: one file implementing `Connector`, plus one line here. */
export function builtInConnectors(): Connector[] {
  return [new SandboxPaymentsConnector(), new SandboxSmsConnector()];
}

export class ConnectorRegistry {
  private readonly byName: Map<string, Connector>;

  constructor(connectors: Connector[] = builtInConnectors()) {
    this.byName = new Map(connectors.map((c) => [c.name, c]));
  }

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

  /** The limitations table (GET /v1/connectors), generated from the declarations. */
  describe() {
    return this.list().map((c) => ({
      name: c.name,
      description: c.description,
      read_back: c.capabilities.read_back,
      context_read: c.capabilities.context_read,
      provider_idempotency: c.capabilities.provider_idempotency,
      reversible: c.capabilities.reversible,
      can_reach_verified: c.capabilities.read_back,
      actions: Object.entries(c.actions).map(([name, spec]) => ({
        name,
        description: spec.description,
        params_schema: z.toJSONSchema(spec.params),
      })),
    }));
  }
}
