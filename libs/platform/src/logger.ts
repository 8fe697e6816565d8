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
  const destination = pino.destination({ dest: 1, sync: false });
  const logger = pino(
    {
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
    },
    destination,
  );
  unwrittenLogs.set(logger, watchWrites(destination));
  return logger;
}

type Destination = ReturnType<typeof pino.destination>;

/** For each logger made here: whether its destination has written every line handed to it, or has given up. */
const unwrittenLogs = new WeakMap<Logger, () => boolean>();

/**
 * Counts the bytes handed to the destination and the bytes it reports written ('write'), through its public `write`
 * and events. pino's destination writes in the background and, on `process.exit`, flushes what it still holds with a
 * loop that retries a failed write every 100 ms for ever unless the error is EAGAIN: with the reader of stdout gone
 * (the supervisor that piped it died) and a write still in flight, an orderly stop's exit hung there, its event loop
 * blocked, so its forced exit never fired either. Once that write has failed, pino turns the destination off (its
 * broken-pipe filter replaces `write`), and the exit has nothing to flush.
 */
function watchWrites(destination: Destination): () => boolean {
  let handed = 0;
  let written = 0;
  const hand = destination.write.bind(destination);
  const counted = (data: string): boolean => {
    handed += Buffer.byteLength(data);
    return hand(data);
  };
  destination.write = counted;
  destination.on('write', (bytes: number) => (written += bytes));
  return () => written >= handed || destination.write !== counted;
}

/**
 * Resolves once the logger's destination has written every line handed to it, or given up on a broken pipe, or after
 * `boundMs`: what a process waits for before `process.exit` (see watchWrites). At once for a logger not made here.
 */
export async function logsWritten(logger: Logger, boundMs: number): Promise<void> {
  const settled = unwrittenLogs.get(logger);
  if (!settled) return;
  const until = Date.now() + boundMs;
  // The destination reports a write's end by an event on the loop; a few milliseconds at most on a pipe that is read.
  while (!settled() && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 5));
}

export type { Logger };
