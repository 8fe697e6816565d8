/**
 * Entry point of the sandbox provider process. The only place that reads the environment, so the server itself
 * can be started in-process by tests with explicit options.
 */
import { readVariables, wholeNumberVariable } from '@verity/platform/config';
import {
  DEFAULT_MAX_EFFECTS,
  DEFAULT_MAX_WIRE_REQUESTS,
  DEFAULT_SANDBOX_HOST,
  DEFAULT_SANDBOX_PORT,
  startSandboxProvider,
} from './sandbox-provider';

/** The most effects or requests the provider may be told to keep (each is kept in memory). */
const MAX_KEPT = 10_000_000;

function logLine(level: 'info' | 'error', msg: string, fields: Record<string, unknown> = {}): void {
  const stream = level === 'error' ? process.stderr : process.stdout;
  stream.write(`${JSON.stringify({ level, msg, ...fields })}\n`);
}

/**
 * The provider's own variables, read by the platform config's rule for a whole number (plain decimal digits in a
 * range; unset or empty is the default): `0x10`, `1e3`, ` 5` or `-1` stop start with one line naming the variable,
 * as any Verity process's do. Number() took the first three as 16, 1000 and 5.
 */
const SETTINGS = {
  SANDBOX_PORT: wholeNumberVariable({ min: 0, max: 65535, default: DEFAULT_SANDBOX_PORT }),
  SANDBOX_MAX_EFFECTS: wholeNumberVariable({ min: 0, max: MAX_KEPT, default: DEFAULT_MAX_EFFECTS }),
  SANDBOX_MAX_REQUESTS: wholeNumberVariable({ min: 0, max: MAX_KEPT, default: DEFAULT_MAX_WIRE_REQUESTS }),
};

async function main(): Promise<void> {
  const settings = readVariables(SETTINGS);
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
