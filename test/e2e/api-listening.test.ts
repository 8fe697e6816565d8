import { Stack, freePort } from '../support/stack';

/**
 * The API listens through Nest (app.listen), so Nest knows it listens: HttpAdapterHost.listening is set and
 * app.getUrl() answers, and its "api listening" line carries that URL. Until 2026-12-06 it listened with the server's
 * own listen after app.init(), which left both unset (app.getUrl() rejected: "app.listen() needs to be called before
 * calling app.getUrl()"). A port that cannot be had is still one line naming PORT and HOST (startup-checks.test.ts).
 */
describe('the API listening', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'apilisten', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  it.each([
    ['127.0.0.1', '127.0.0.1'],
    ['0.0.0.0', '127.0.0.1'],
  ])('HOST %s: the listening line names the URL Nest gives for it', async (host, reached) => {
    const port = await freePort();
    const app = await stack.startApp('api', { PORT: String(port), HOST: host });
    const line = app.output
      .join('')
      .split('\n')
      .filter((text) => text.startsWith('{'))
      .map((text) => JSON.parse(text) as Record<string, unknown>)
      .find((entry) => entry.msg === 'api listening');
    expect(line).toMatchObject({ port, host, url: `http://${reached}:${port}` });
    const live = await fetch(`${String(line!.url)}/health/live`);
    expect(live.status).toBe(200);
  });
});
