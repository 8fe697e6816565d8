import pino, { Logger } from 'pino';
import { traceFields } from './tracing';

/**
 * Structured JSON logs. API keys and secrets are redacted wherever they might appear. A connector's answers and errors
 * reach the logs with the tenant's secret values already replaced (libs/connectors `redactingSecrets`); these paths
 * cover what never went through a connector: request bodies and failed queries that carried a secret.
 *
 * With traces on (`traced`), a line written inside a span carries its `trace_id` and `span_id`.
 */
export function createLogger(app: string, level: string, traced = false): Logger {
  return pino({
    level,
    base: { app },
    ...(traced ? { mixin: traceFields } : {}),
    redact: {
      paths: [
        'authorization',
        'headers.authorization',
        'req.headers.authorization',
        '*.apiKey',
        '*.api_key',
        'apiKey',
        'secret',
        '*.secret',
        '*.secrets',
        'body.secrets',
        'req.body.secrets',
        // A failed query carries its parameters (a secret being stored among them): never logged.
        'err.parameters',
        '*.err.parameters',
        'err.driverError.parameters',
      ],
      censor: '[redacted]',
    },
  });
}

export type { Logger };
