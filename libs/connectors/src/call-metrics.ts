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
  const timed = async <T>(
    call: string,
    op: ConnectorOperation,
    run: () => Promise<T>,
    outcome: (result: T) => string,
  ): Promise<T> => {
    const action = Object.hasOwn(connector.actions, op.action) ? op.action : 'undeclared';
    const end = connectorCalls.startTimer({ connector: connector.name, action, call });
    try {
      const result = await run();
      end({ outcome: outcome(result) });
      return result;
    } catch (error) {
      end({ outcome: 'error' });
      throw error;
    }
  };
  const wrapped: Connector = {
    ...connectorDeclarations(connector),
    send: (op, env) => timed('send', op, () => connector.send(op, env), sendOutcomeLabel),
  };
  const { readBack, readContext, observe } = connector;
  if (readBack) {
    wrapped.readBack = (op, env) =>
      timed(
        'read_back',
        op,
        () => readBack.call(connector, op, env),
        (r) => r.kind,
      );
  }
  if (readContext) {
    wrapped.readContext = (op, env) =>
      timed(
        'read_context',
        op,
        () => readContext.call(connector, op, env),
        (r) => r.kind,
      );
  }
  if (observe) {
    wrapped.observe = (op, verified, env) =>
      timed(
        'observe',
        op,
        () => observe.call(connector, op, verified, env),
        (r) => r.observation,
      );
  }
  return wrapped;
}
