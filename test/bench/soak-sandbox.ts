/**
 * Sandbox soak: drives N operations straight at a sandbox provider process (no API, no workers: the provider alone
 * is what has to stay flat) and samples its memory as it goes. One operation is what Verity does to the provider
 * for a payment: a POST /v1/charges with an Idempotency-Key, then a read-back by reference; every tenth also sends
 * an SMS, every fiftieth repeats an earlier key (a replay). At every sample the provider's own consumers read it
 * too: GET /__effects and GET /__requests, the two answers that used to be built whole on the heap.
 *
 *   npm run build && node dist/test/bench/soak-sandbox.js [--operations 500000] [--concurrency 64] [--samples 25]
 *
 * The provider runs with its production node flags (appNodeArgs) and --expose-gc; each sample is taken after a full
 * collection, so it is the live heap, not garbage. The verdict compares the live heap once the provider's store has
 * turned over once (its bound reached, and as many effects forgotten as kept) with the end of the run: flat means
 * it moved by less than 8 MB in between.
 */
import { fork } from 'node:child_process';
import * as path from 'node:path';
import { httpExchange } from '../../libs/connectors/src/http-exchange';
import { appNodeArgs } from '../../libs/platform/src/runtime';
import type { MemorySample } from './soak-sandbox-provider';

interface Options {
  operations: number;
  concurrency: number;
  samples: number;
}

interface Row {
  operations: number;
  seconds: number;
  memory: MemorySample;
  effects: { total: number; dropped: number; bytes: number; ms: number };
  requests: { total: number; dropped: number; bytes: number; ms: number };
}

function parseOptions(argv: string[]): Options {
  const options: Options = { operations: 500_000, concurrency: 64, samples: 25 };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '') as keyof Options;
    const value = Number(argv[i + 1]);
    if (!(key in options) || !Number.isInteger(value) || value <= 0) throw new Error(`bad option ${argv[i]}`);
    options[key] = value;
  }
  return options;
}

const MB = 1024 * 1024;
const mb = (bytes: number) => (bytes / MB).toFixed(1);

async function main(): Promise<void> {
  const options = parseOptions(process.argv.slice(2));
  const child = fork(path.join(__dirname, 'soak-sandbox-provider.js'), [], {
    execArgv: [...appNodeArgs('sandbox-provider'), '--expose-gc'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  let exited: string | null = null;
  child.on('exit', (code, signal) => (exited = signal ? `signal ${signal}` : `exit code ${code}`));
  const url = await new Promise<string>((resolve, reject) => {
    child.once('message', (message: { url?: string }) => (message.url ? resolve(message.url) : reject(message)));
    child.once('exit', () => reject(new Error('the provider exited before listening')));
  });
  const sample = () =>
    new Promise<MemorySample>((resolve, reject) => {
      const onExit = () => reject(new Error(`the provider died (${exited})`));
      const onMessage = (message: { sample?: MemorySample }) => {
        if (!message.sample) return;
        child.off('message', onMessage);
        child.off('exit', onExit);
        resolve(message.sample);
      };
      child.on('message', onMessage);
      child.once('exit', onExit);
      child.send('sample');
    });
  const readBack = async (pathname: string) => {
    const started = performance.now();
    const response = await fetch(`${url}${pathname}`);
    const text = await response.text();
    const ms = performance.now() - started;
    if (!response.ok) throw new Error(`GET ${pathname}: ${response.status}`);
    // A provider from before the bound has no `dropped`: it kept everything.
    const body = JSON.parse(text) as { total: number; dropped?: number };
    return { total: body.total, dropped: body.dropped ?? 0, bytes: Buffer.byteLength(text), ms };
  };

  const started = performance.now();
  const rows: Row[] = [];
  const checkpoint = async (operations: number) => {
    const effects = await readBack('/__effects');
    const requests = await readBack('/__requests');
    const memory = await sample();
    const row = { operations, seconds: (performance.now() - started) / 1000, memory, effects, requests };
    rows.push(row);
    process.stdout.write(
      `${String(operations).padStart(8)} ops  ${row.seconds.toFixed(0).padStart(5)} s  heap ${mb(memory.heapUsed)} MB` +
        `  rss ${mb(memory.rss)} MB  external ${mb(memory.external)} MB  effects kept ${effects.total - effects.dropped}` +
        ` (${mb(effects.bytes)} MB in ${effects.ms.toFixed(0)} ms)  requests kept ${requests.total - requests.dropped}\n`,
    );
  };

  const call = async (method: string, pathname: string, body?: unknown, headers?: Record<string, string>) => {
    const result = await httpExchange({ method, url: `${url}${pathname}`, body, headers, timeoutMs: 30_000 });
    if (result.kind !== 'response' || result.status >= 400) {
      throw new Error(`${method} ${pathname}: ${JSON.stringify(result).slice(0, 200)}`);
    }
  };
  const operation = async (i: number) => {
    const reference = `soak-${i}`;
    await call(
      'POST',
      '/v1/charges',
      { amount: 100 + (i % 900), currency: 'EUR', reference },
      {
        'Idempotency-Key': `key-${i}`,
      },
    );
    await call('GET', `/v1/charges?reference=${reference}`);
    if (i % 10 === 0) await call('POST', '/v1/messages', { to: '+15550100', body: `op ${i}`, client_ref: `sms-${i}` });
    if (i % 50 === 0 && i >= 1000) {
      await call(
        'POST',
        '/v1/charges',
        { amount: 1, currency: 'EUR', reference: `soak-${i - 1000}` },
        {
          'Idempotency-Key': `key-${i - 1000}`,
        },
      );
    }
  };

  await checkpoint(0);
  const every = Math.ceil(options.operations / options.samples);
  let next = 0;
  let done = 0;
  let failure: unknown = null;
  let pendingCheckpoint: Promise<void> = Promise.resolve();
  const worker = async () => {
    while (failure === null && next < options.operations) {
      const i = next;
      next += 1;
      try {
        await operation(i);
      } catch (error) {
        failure ??= error;
        return;
      }
      done += 1;
      if (done % every === 0 || done === options.operations) {
        const at = done;
        pendingCheckpoint = pendingCheckpoint.then(() => checkpoint(at));
        try {
          await pendingCheckpoint;
        } catch (error) {
          failure ??= error;
          return;
        }
      }
    }
  };
  await Promise.all(Array.from({ length: options.concurrency }, worker));
  await pendingCheckpoint.catch((error: unknown) => (failure ??= error));
  child.disconnect();

  const seconds = (performance.now() - started) / 1000;
  process.stdout.write(`\n${done} operations in ${seconds.toFixed(0)} s (${(done / seconds).toFixed(0)}/s)\n`);
  if (failure !== null) {
    process.stdout.write(`FAILED: ${failure instanceof Error ? failure.message : String(failure)}`);
    process.stdout.write(exited ? ` — the provider ended with ${exited}\n` : '\n');
    process.exitCode = 1;
    return;
  }
  // Flat: from the first sample where the store has been replaced once over (as many effects forgotten as kept, so
  // its maps have reached their size) to the last, the live heap moves by less than 8 MB.
  const full = rows.filter(
    (row) => row.effects.dropped > 0 && row.effects.dropped >= row.effects.total - row.effects.dropped,
  );
  const base = full[0] ?? rows[0];
  const last = rows[rows.length - 1];
  const growth = last.memory.heapUsed - base.memory.heapUsed;
  const peak = Math.max(...rows.map((row) => row.memory.rss));
  process.stdout.write(
    `live heap ${mb(base.memory.heapUsed)} MB at ${base.operations} ops (store turned over) → ${mb(last.memory.heapUsed)} MB` +
      ` at ${last.operations} ops: ${growth >= 0 ? '+' : ''}${mb(growth)} MB; peak RSS ${mb(peak)} MB\n`,
  );
  const flat = full.length > 1 && Math.abs(growth) < 8 * MB;
  process.stdout.write(
    flat ? 'FLAT\n' : full.length > 1 ? 'NOT FLAT\n' : 'store never filled: run more operations to judge\n',
  );
  if (!flat) process.exitCode = 1;
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
