/**
 * Entry point of the sandbox provider process. The only place that reads the environment (with settings.ts), so the
 * server itself can be started in-process by tests with explicit options.
 */
import { DEFAULT_SANDBOX_HOST, startSandboxProvider } from './sandbox-provider';
import { readSandboxSettings } from './settings';

function logLine(level: 'info' | 'error', msg: string, fields: Record<string, unknown> = {}): void {
  const stream = level === 'error' ? process.stderr : process.stdout;
  stream.write(`${JSON.stringify({ level, msg, ...fields })}\n`);
}

async function main(): Promise<void> {
  const settings = readSandboxSettings();
  const provider = await startSandboxProvider({
    port: settings.SANDBOX_PORT,
    host: process.env.SANDBOX_HOST || DEFAULT_SANDBOX_HOST,
    log: process.env.SANDBOX_LOG === '1',
    maxEffects: settings.SANDBOX_MAX_EFFECTS,
    maxWireRequests: settings.SANDBOX_MAX_REQUESTS,
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
