import type { INestApplication } from '@nestjs/common';
import express from 'express';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { mountConsole } from './console';

/** mountConsole only calls `use`, which an Express app has with the same meaning. */
async function serve(assetsDir: string) {
  const app = express();
  const missing = mountConsole(app as unknown as INestApplication, assetsDir);
  const server: Server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/console`;
  return { missing, base, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

describe('the console assets', () => {
  const dir = mkdtempSync(join(tmpdir(), 'verity-console-assets-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('serves the built script and stylesheet, read at boot, under the strict policy', async () => {
    writeFileSync(join(dir, 'console.js'), '(()=>{})();');
    writeFileSync(join(dir, 'console.css'), 'main{margin:0}');
    const served = await serve(dir);
    try {
      expect(served.missing).toBeUndefined();
      const script = await fetch(`${served.base}/app.js`);
      expect(script.status).toBe(200);
      expect(script.headers.get('content-type')).toContain('text/javascript');
      expect(await script.text()).toBe('(()=>{})();');
      const css = await fetch(`${served.base}/app.css`);
      expect(css.headers.get('content-type')).toContain('text/css');
      expect(await css.text()).toBe('main{margin:0}');
      const policy = css.headers.get('content-security-policy') ?? '';
      expect(policy).toContain("style-src 'self'");
      expect(policy).toContain("script-src 'self'");
      expect(policy).not.toContain('unsafe');
    } finally {
      await served.close();
    }
  });

  it('still serves the shell without a build, and says how to build the script and stylesheet', async () => {
    const served = await serve(join(dir, 'nothing-here'));
    try {
      expect(served.missing?.message).toMatch(/review console is not built .*run npm run build/);
      const script = await fetch(`${served.base}/app.js`);
      expect(script.status).toBe(503);
      expect(await script.text()).toMatch(/run npm run build/);
      expect((await fetch(`${served.base}/app.css`)).status).toBe(503);
      expect((await fetch(served.base)).status).toBe(200);
    } finally {
      await served.close();
    }
  });
});
