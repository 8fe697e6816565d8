import { createServer, type Server } from 'node:net';
import type { Config } from '@jest/types';
import ClosingTestEnvironment from '../support/test-environment';

/**
 * Every test file runs in test/support/test-environment.ts: what the file opened and did not close fails it at its
 * end, named, instead of showing only as jest's end-of-run "A worker process has failed to exit gracefully".
 */
describe('the test environment’s check that a file closed what it opened', () => {
  const environment = () =>
    new ClosingTestEnvironment(
      {
        globalConfig: {} as Config.GlobalConfig,
        projectConfig: { testEnvironmentOptions: {}, globals: {} } as unknown as Config.ProjectConfig,
      },
      { console, docblockPragmas: {}, testPath: __filename },
    );
  const listening = async (): Promise<Server> => {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return server;
  };
  const close = (server: Server) => new Promise((resolve) => server.close(resolve));

  it('fails a file that left a server listening, naming it', async () => {
    const env = environment();
    await env.setup();
    const server = await listening();
    try {
      const { port } = server.address() as { port: number };
      await expect(env.teardown()).rejects.toThrow(
        new RegExp(`left open TCPServerWrap .*Server listening on .*"port":${port}`),
      );
    } finally {
      await close(server);
    }
  });

  it('passes a file whose server is still closing at its end (closed a moment later)', async () => {
    const env = environment();
    await env.setup();
    const server = await listening();
    void close(server);
    await expect(env.teardown()).resolves.toBeUndefined();
  });

  it('does not count what was open before the file began', async () => {
    const server = await listening();
    try {
      const env = environment();
      await env.setup();
      await expect(env.teardown()).resolves.toBeUndefined();
    } finally {
      await close(server);
    }
  });
});
