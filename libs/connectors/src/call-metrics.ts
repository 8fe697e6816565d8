import { connectorCalls } from '@verity/platform';
import { OperationStatus, TerminalReason } from '@verity/status-model';
import type { SendOutcome } from './classify';
import { type Connector, type ConnectorOperation, connectorDeclarations } from './connector';

/** A send's outcome as a metric label: what the provider's answer was taken to mean. */
export function sendOutcomeLabel(outcome: SendOutcome): string {
  if (outcome.status === OperationStatus.ACKNOWLEDGED) return 'acknowledged';
  if (outcome.status === OperationStatus.UNKNOWN) return 'unknown';
  return outcome.reason === TerminalReason.CONNECTOR_REJECTED ? 'rejected' : 'unreachable';
}

/**
 * The connector, with every call timed into verity_connector_call_duration_seconds{connector, action, call, outcome}
 * (outcome `error` when the call threw). Labels are the connector's and action's declared names, never ids.
 */
export function timingCalls(connector: Connector): Connector {
  /** `method`, bound to the connector, timed: the call's label, and what its result says (its `outcome`). */
  const timed =
    <A extends [ConnectorOperation, ...unknown[]], T>(
      call: string,
      method: (...args: A) => Promise<T>,
      outcome: (result: T) => string,
    ) =>
    async (...args: A): Promise<T> => {
      const [op] = args;
      const action = Object.hasOwn(connector.actions, op.action) ? op.action : 'undeclared';
      const end = connectorCalls.startTimer({ connector: connector.name, action, call });
      try {
        const result = await method.apply(connector, args);
        end({ outcome: outcome(result) });
        return result;
      } catch (error) {
        end({ outcome: 'error' });
        throw error;
      }
    };
  const wrapped: Connector = {
    ...connectorDeclarations(connector),
    send: timed('send', (op, env) => connector.send(op, env), sendOutcomeLabel),
  };
  const { readBack, readContext, observe } = connector;
  if (readBack) wrapped.readBack = timed('read_back', readBack, (r) => r.kind);
  if (readContext) wrapped.readContext = timed('read_context', readContext, (r) => r.kind);
  if (observe) wrapped.observe = timed('observe', observe, (r) => r.observation);
  return wrapped;
}
