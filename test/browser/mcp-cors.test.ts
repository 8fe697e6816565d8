import { existsSync } from 'node:fs';
import { createServer, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Browser } from 'playwright-core';
import { sms, submission, unique } from '../support/http';
import { CHROMIUM, launchChromium } from './chromium';
import { DEMO, Stack } from '../support/stack';

jest.setTimeout(120_000);

const chromiumMissing = !existsSync(CHROMIUM);
if (chromiumMissing) {
  it('calls /mcp from a page in headless Chromium', () => {
    throw new Error(`${CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium; .ci/run does it)`);
  });
}

/** A blank page served from its own origin (another port of 127.0.0.1 than the API's: cross-origin to a browser). */
async function pageServer(): Promise<{ server: Server; origin: string }> {
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end('<!doctype html><title>agent page</title>');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

/**
 * MCP_ALLOWED_ORIGINS names the pages that may call /mcp. A page of such an origin is cross-origin to the API, so the
 * browser asks first (a CORS preflight: the request carries Authorization and a JSON body) and lets the page read the
 * answer only if the API says it may. Driven in real headless Chromium: what the browser does, not what headers say.
 */
(chromiumMissing ? describe.skip : describe)('/mcp from a browser page of another origin (headless Chromium)', () => {
  let stack: Stack;
  let browser: Browser;
  let allowed: { server: Server; origin: string };
  let other: { server: Server; origin: string };

  beforeAll(async () => {
    allowed = await pageServer();
    other = await pageServer();
    stack = await Stack.start({
      label: 'mcp-cors',
      dispatchers: 0,
      reconcilers: 0,
      env: { MCP_ALLOWED_ORIGINS: `https://agent.example.com, ${allowed.origin}` },
    });
    browser = await launchChromium();
  }, 90_000);

  afterAll(async () => {
    await browser?.close();
    await stack?.stop();
    allowed?.server.close();
    other?.server.close();
  });

  async function executionCount(): Promise<number> {
    const [row] = (await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM executions`)) as { n: number }[];
    return row.n;
  }

  /** From a page of `origin`, POSTs one JSON-RPC message to /mcp as an MCP client in a browser would. */
  async function callFromPage(origin: string, message: unknown, key: string) {
    const page = await browser.newPage();
    try {
      await page.goto(origin);
      return await page.evaluate(
        async ({ url, body, key }) => {
          try {
            const res = await fetch(url, {
              method: 'POST',
              headers: {
                authorization: `Bearer ${key}`,
                'content-type': 'application/json',
                accept: 'application/json, text/event-stream',
                'mcp-protocol-version': '2025-06-18',
              },
              body: JSON.stringify(body),
            });
            return { status: res.status, text: await res.text(), requestId: res.headers.get('x-request-id') };
          } catch (error) {
            return { failed: String(error) };
          }
        },
        { url: `${stack.apiUrl}/mcp`, body: message, key },
      );
    } finally {
      await page.close();
    }
  }

  const submit = () => ({
    jsonrpc: '2.0',
    id: 1,
    method: 'tools/call',
    params: { name: 'submit_execution', arguments: submission([sms(unique('cors'))]) },
  });

  it('lets a page of an allowed origin call a tool and read its answer', async () => {
    const before = await executionCount();
    const answer = await callFromPage(allowed.origin, submit(), DEMO.agent);
    expect(answer).toMatchObject({ status: 200, requestId: expect.any(String) });
    expect('text' in answer && answer.text).toContain('exe_');
    expect(await executionCount()).toBe(before + 1);
  });

  it('lets it read a refusal too (a wrong key), so the page can say why', async () => {
    const answer = await callFromPage(allowed.origin, submit(), 'vk_not_a_key');
    expect(answer).toMatchObject({ status: 401 });
  });

  it('keeps a page of any other origin from calling it: nothing is carried out', async () => {
    const before = await executionCount();
    const answer = await callFromPage(other.origin, submit(), DEMO.agent);
    expect(answer).toEqual({ failed: expect.stringContaining('Failed to fetch') });
    expect(await executionCount()).toBe(before);
  });

  it('answers the preflight of an allowed origin 204, and refuses another origin’s with 403', async () => {
    const preflight = (origin: string) =>
      fetch(`${stack.apiUrl}/mcp`, {
        method: 'OPTIONS',
        headers: {
          origin,
          'access-control-request-method': 'POST',
          'access-control-request-headers': 'authorization, content-type, mcp-protocol-version',
        },
      });
    const ok = await preflight(allowed.origin);
    expect(ok.status).toBe(204);
    expect(ok.headers.get('access-control-allow-origin')).toBe(allowed.origin);
    expect(ok.headers.get('access-control-allow-methods')).toBe('POST');
    expect(ok.headers.get('vary')).toMatch(/origin/i);
    const refused = await preflight(other.origin);
    expect(refused.status).toBe(403);
    expect(refused.headers.get('access-control-allow-origin')).toBeNull();
    // A client that is no browser sends no Origin, and gets the same 204, with no CORS grant.
    const bare = await fetch(`${stack.apiUrl}/mcp`, { method: 'OPTIONS' });
    expect(bare.status).toBe(204);
    expect(bare.headers.get('allow')).toBe('POST, OPTIONS');
    expect(bare.headers.get('access-control-allow-origin')).toBeNull();
  });
});
