/**
 * The process under test in the sandbox soak (soak-sandbox.ts forks it): the sandbox provider, started exactly as
 * `npm start` starts it (same heap limit), plus `--expose-gc` so the parent can ask for the live heap after a full
 * collection. SOAK_PROVIDER_MODULE points at another build of the provider, to measure a version before a change.
 */
import * as path from 'node:path';
import type { startSandboxProvider as Start } from '../../apps/sandbox-provider/src/sandbox-provider';

export interface MemorySample {
  heapUsed: number;
  heapTotal: number;
  external: number;
  arrayBuffers: number;
  rss: number;
}

async function main(): Promise<void> {
  const modulePath = process.env.SOAK_PROVIDER_MODULE
    ? path.resolve(process.env.SOAK_PROVIDER_MODULE)
    : '../../apps/sandbox-provider/src/sandbox-provider';
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { startSandboxProvider } = require(modulePath) as { startSandboxProvider: typeof Start };
  const provider = await startSandboxProvider({ port: 0 });
  const gc = (globalThis as { gc?: () => void }).gc;
  process.on('message', (message: unknown) => {
    if (message !== 'sample') return;
    gc?.();
    gc?.();
    const { heapUsed, heapTotal, external, arrayBuffers, rss } = process.memoryUsage();
    const sample: MemorySample = { heapUsed, heapTotal, external, arrayBuffers, rss };
    process.send?.({ sample });
  });
  process.on('disconnect', () => void provider.close().then(() => process.exit(0)));
  process.send?.({ url: provider.url });
}

void main();
