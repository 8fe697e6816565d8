import { type Server, createServer } from 'node:net';
import { Stack } from '../support/stack';

/**
 * The port a test stack hands its API was free when chosen, but the API binds it only once its modules are loaded —
 * seconds later on a busy machine — and another process may take it meanwhile: a test file run beside this one (a
 * jest process of its own draws from the same slice of ports), any outgoing connection. A stack whose API then
 * exited with EADDRINUSE failed every test of its file. Here the API's port is taken the moment it is handed out.
 */
const mockTaken: { calls: number; port?: number; server?: Server } = { calls: 0 };
jest.mock('../../scripts/local-services', () => {
  const actual = jest.requireActual<typeof import('../../scripts/local-services')>('../../scripts/local-services');
  return {
    ...actual,
    freePort: async () => {
      const port = await actual.freePort();
      mockTaken.calls += 1;
      // With no workers, the stack asks for two ports: its sandbox provider's, then its API's.
      if (mockTaken.calls === 2) {
        const server = createServer();
        await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
        Object.assign(mockTaken, { port, server });
      }
      return port;
    },
  };
});

describe('a test stack whose API port is taken before the API listens', () => {
  let stack: Stack | undefined;
  afterAll(async () => {
    await stack?.stop();
    await new Promise((resolve) => (mockTaken.server ? mockTaken.server.close(resolve) : resolve(undefined)));
  });

  it('starts its API on another port', async () => {
    stack = await Stack.start({ label: 'porttaken', dispatchers: 0, reconcilers: 0 });
    expect(mockTaken.port).toBeDefined();
    expect(stack.apiUrl).not.toBe(`http://127.0.0.1:${mockTaken.port}`);
    expect((await fetch(`${stack.apiUrl}/health/live`)).ok).toBe(true);
    // The API that could not listen is not one of the stack's apps.
    expect(stack.apps.filter((app) => app.name === 'api').map((app) => app.index)).toEqual([0]);
  }, 120_000);
});
