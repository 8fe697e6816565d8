/**
 * Entry point of the sandbox provider process. The only place that reads the environment, so the server itself
 * can be started in-process by tests with explicit options.
 */
import {
  DEFAULT_MAX_EFFECTS,
  DEFAULT_MAX_WIRE_REQUESTS,
  DEFAULT_SANDBOX_HOST,
  DEFAULT_SANDBOX_PORT,
  startSandboxProvider,
} from './sandbox-provider';

function logLine(level: 'info' | 'error', msg: string, fields: Record<string, unknown> = {}): void {
  const stream = level === 'error' ? process.stderr : process.stdout;
  stream.write(`${JSON.stringify({ level, msg, ...fields })}\n`);
}

function parsePort(raw: string | undefined): number {
  if (raw === undefined || raw === '') return DEFAULT_SANDBOX_PORT;
  const port = Number(raw);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`SANDBOX_PORT is not a port: ${raw}`);
  return port;
}

function parseBound(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const bound = Number(raw);
  if (!Number.isSafeInteger(bound) || bound < 0) throw new Error(`${name} is not a non-negative integer: ${raw}`);
  return bound;
}

async function main(): Promise<void> {
  const provider = await startSandboxProvider({
    port: parsePort(process.env.SANDBOX_PORT),
    host: process.env.SANDBOX_HOST || DEFAULT_SANDBOX_HOST,
    log: process.env.SANDBOX_LOG === '1',
    maxEffects: parseBound('SANDBOX_MAX_EFFECTS', DEFAULT_MAX_EFFECTS),
    maxWireRequests: parseBound('SANDBOX_MAX_REQUESTS', DEFAULT_MAX_WIRE_REQUESTS),
  });
  logLine('info', 'sandbox provider listening', { url: provider.url });

  let stopping = false;
  const stop = (signal: NodeJS.Signals): void => {
    // A second signal while closing must not start a second close or exit early with a half-closed server.
    if (stopping) return;
    stopping = true;
    provider.close().then(
      () => process.exit(0),
      (error: unknown) => {
        logLine('error', 'sandbox provider close failed', { signal, error: String(error) });
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((error: unknown) => {
  logLine('error', 'sandbox provider failed to start', {
    error: error instanceof Error ? error.message : String(error),
  });
  process.exit(1);
});
