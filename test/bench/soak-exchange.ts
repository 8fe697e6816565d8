/**
 * Client-side soak: N provider calls through httpExchange (the dispatcher's and reconciler's only HTTP path) over its
 * pooled keep-alive sockets, against a local node:http server, sampling the live heap after a full collection.
 *
 *   npm run build && node --expose-gc dist/test/bench/soak-exchange.js [--calls 200000] [--concurrency 8] [--samples 10]
 *
 * Flat means the live heap moved by less than 4 MB between the first sample after warm-up and the last.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { httpExchange } from '../../libs/connectors/src/http-exchange';

async function main(): Promise<void> {
  const options = { calls: 200_000, concurrency: 8, samples: 10 };
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '') as keyof typeof options;
    const value = Number(argv[i + 1]);
    if (!(key in options) || !Number.isInteger(value) || value <= 0) throw new Error(`bad option ${argv[i]}`);
    options[key] = value;
  }
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run with node --expose-gc');
  let warnings = 0;
  process.on('warning', (warning) => {
    if (warning.name === 'MaxListenersExceededWarning') warnings += 1;
  });
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.end('{"ok":true}'));
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/charges`;
  const heapMb = () => {
    gc();
    gc();
    return process.memoryUsage().heapUsed / 1024 / 1024;
  };

  const every = Math.ceil(options.calls / options.samples);
  const samples: { calls: number; heap: number }[] = [{ calls: 0, heap: heapMb() }];
  let next = 0;
  for (let done = 0; done < options.calls; done = Math.min(done + every, options.calls)) {
    const target = Math.min(done + every, options.calls);
    const until = async () => {
      while (next < target) {
        const i = next;
        next += 1;
        const result = await httpExchange({ method: 'POST', url, body: { i }, timeoutMs: 10_000 });
        if (result.kind !== 'response') throw new Error(`call ${i}: ${JSON.stringify(result)}`);
      }
    };
    await Promise.all(Array.from({ length: options.concurrency }, until));
    samples.push({ calls: target, heap: heapMb() });
    process.stdout.write(`${String(target).padStart(8)} calls  live heap ${samples.at(-1)!.heap.toFixed(1)} MB\n`);
  }
  server.closeAllConnections();
  server.close();
  const growth = samples.at(-1)!.heap - samples[1].heap;
  process.stdout.write(
    `live heap ${samples[1].heap.toFixed(1)} MB after ${samples[1].calls} calls → ${samples.at(-1)!.heap.toFixed(1)} MB` +
      ` after ${options.calls}; MaxListenersExceededWarning: ${warnings}\n`,
  );
  const flat = Math.abs(growth) < 4 && warnings === 0;
  process.stdout.write(flat ? 'FLAT\n' : 'NOT FLAT\n');
  if (!flat) process.exitCode = 1;
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
