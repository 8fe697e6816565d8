import { connect, createServer } from 'node:net';
import { Writable } from 'node:stream';
import { Worker } from 'bullmq';
import pino from 'pino';
import { createRedis } from '@verity/platform';
import { freePort } from '../../../scripts/local-services';
import { TEST_REDIS_URL, testQueuePrefix } from '../../../test/support/services';
import { watchWorker } from './watchdog';

/** Redis coming back on `port`: a relay to the test Redis (so the worker can close, which needs Redis). */
async function redisBackOn(port: number) {
  const target = new URL(TEST_REDIS_URL);
  const server = createServer((client) => {
    const upstream = connect(Number(target.port || 6379), target.hostname);
    client.pipe(upstream).pipe(client);
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
    });
}

describe('watchWorker', () => {
  it('logs a Redis that cannot be reached once, not once per reconnect attempt', async () => {
    const lines: Array<{ msg: string; unlogged?: number }> = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(line));
        done();
      },
    });
    const logger = pino({ level: 'info' }, sink);
    // A real worker and client against a port where no Redis listens yet: each reconnect attempt is an error event.
    const port = await freePort();
    const connection = createRedis(`redis://127.0.0.1:${port}`, 'worker', 'watchdog-spec');
    const worker = new Worker('watchdog-spec', async () => undefined, {
      connection,
      prefix: testQueuePrefix('watchdog'),
      autorun: false,
    });
    let errors = 0;
    worker.on('error', () => (errors += 1));
    const stop = watchWorker(worker, logger, 60_000);
    let closeRelay: (() => Promise<void>) | undefined;
    try {
      void worker.run().catch(() => undefined);
      while (errors < 5) await new Promise((resolve) => setTimeout(resolve, 10));
      expect(lines.filter((l) => l.msg.startsWith('worker error'))).toEqual([
        expect.objectContaining({ msg: expect.stringContaining('Redis unreachable'), unlogged: 0 }),
      ]);
    } finally {
      stop();
      closeRelay = await redisBackOn(port);
      await worker.close();
      connection.disconnect();
      await closeRelay();
    }
  }, 20_000);
});
