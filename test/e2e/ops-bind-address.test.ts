import { reach } from '../support/http';
import { Stack, freePort } from '../support/stack';

/**
 * A worker's ops port (/metrics, /health) listens where HOST says, as the API does: 127.0.0.1 unless HOST is set.
 * Another address of the machine reaches nothing; HOST=0.0.0.0 opens it (docker-compose, inside its network).
 */
describe('a worker’s ops port: the address it listens on', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'opsbind', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  it.each([
    ['dispatcher', 'DISPATCHER_METRICS_PORT'],
    ['reconciler', 'RECONCILER_METRICS_PORT'],
  ] as const)('the %s’s is 127.0.0.1 unless HOST is set; HOST=0.0.0.0 opens it', async (name, variable) => {
    // 127.0.0.2 is this machine too (all of 127.0.0.0/8 is loopback), but not the address 127.0.0.1.
    const unset = await freePort();
    const saved = process.env.HOST;
    delete process.env.HOST;
    try {
      await stack.startApp(name, { [variable]: String(unset) });
    } finally {
      if (saved !== undefined) process.env.HOST = saved;
    }
    expect(await reach('127.0.0.1', unset)).toBe('connected');
    expect(await reach('127.0.0.2', unset)).toBe('ECONNREFUSED');

    const set = await freePort();
    await stack.startApp(name, { [variable]: String(set), HOST: '0.0.0.0' });
    expect(await reach('127.0.0.2', set)).toBe('connected');
  });
});
