import type { z } from 'zod';
import type { SendOutcome } from './classify';

export interface ConnectorCapabilities {
  /** Can read the effect back from the source: VERIFIED is reachable. */
  read_back: boolean;
  /** Can report the target's current state before sending (knowledge conflicts, no change required). */
  context_read: boolean;
  /** Passes an Idempotency-Key the provider honours. */
  provider_idempotency: boolean;
  reversible: boolean;
}

export interface ActionSpec {
  description: string;
  params: z.ZodType<Record<string, unknown>>;
}

/** What a connector sees of an operation: its identity and request, never the whole row. */
export interface ConnectorOperation {
  id: string;
  tenantId: string;
  action: string;
  params: Record<string, unknown>;
  expectedState: Record<string, unknown> | null;
  providerRef: Record<string, unknown> | null;
}

export interface TenantConnectorSettings {
  allowHosts?: string[];
  secrets?: Record<string, string>;
}

export interface ConnectorEnvironment {
  sandboxUrl: string;
  timeoutMs: number;
  tenant?: TenantConnectorSettings;
  signal?: AbortSignal;
}

export interface ReadEvidence {
  source: string;
  read_at: string;
  as_of_version?: number | null;
  record?: Record<string, unknown> | null;
  [key: string]: unknown;
}

export type ReadBackResult =
  | { kind: 'found'; evidence: ReadEvidence }
  | { kind: 'mismatch'; evidence: ReadEvidence; fields: string[] }
  | { kind: 'absent'; evidence: ReadEvidence }
  | { kind: 'stale'; evidence: ReadEvidence }
  | { kind: 'field_missing'; evidence: ReadEvidence; field: string }
  | { kind: 'unreachable'; evidence: ReadEvidence };

export type ContextResult =
  | {
      kind: 'state';
      state: Record<string, unknown>;
      /** The source already holds what the operation asks for: no change required. */
      requestedStatePresent: boolean;
      /** The source holds something that contradicts the request (beyond the agent's expected_state). */
      conflicts: string[];
      evidence: ReadEvidence;
    }
  | { kind: 'unreachable'; evidence: ReadEvidence };

export interface Connector {
  readonly name: string;
  readonly description: string;
  readonly capabilities: ConnectorCapabilities;
  readonly actions: Readonly<Record<string, ActionSpec>>;
  send(operation: ConnectorOperation, env: ConnectorEnvironment): Promise<SendOutcome>;
  readBack?(operation: ConnectorOperation, env: ConnectorEnvironment): Promise<ReadBackResult>;
  readContext?(operation: ConnectorOperation, env: ConnectorEnvironment): Promise<ContextResult>;
}
