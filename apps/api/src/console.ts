import type { INestApplication } from '@nestjs/common';
import type { NextFunction, Request, Response } from 'express';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PAGE_SECURITY_HEADERS } from './http/security-headers';
import { CONSOLE_CSP, CONSOLE_CSS, CONSOLE_FAVICON, CONSOLE_HTML } from './console/page';

export const CONSOLE_ROUTE = '/console';
const CLIENT_DIR = join(__dirname, 'console', 'client');
const CLIENT_ROUTE = /^\/(?:|(?:operations|executions)\/[A-Za-z0-9_-]{1,100}\/?)$/;

const SECURITY_HEADERS: Record<string, string> = {
  ...PAGE_SECURITY_HEADERS,
  'content-security-policy': CONSOLE_CSP,
};

let bundle: string | null = null;

/**
 * One script for the browser from the CommonJS files `tsc` already emitted for console/client/ (the project's own
 * build, no bundler dependency): each file becomes a module factory, and `require` resolves only siblings in that
 * directory, so browser code cannot silently pull in server code.
 */
export function consoleBundle(dir = CLIENT_DIR): string {
  const files = existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.js')) : [];
  if (!files.includes('main.js')) throw new Error(`the console client is not built in ${dir}; run npm run build`);
  const factories = files.map((file) => {
    const source = readFileSync(join(dir, file), 'utf8').replace(/^\/\/# sourceMappingURL=.*$/gm, '');
    return `${JSON.stringify(file.slice(0, -3))}: function (module, exports, require) {\n${source}\n}`;
  });
  return `(() => {
'use strict';
const factories = {
${factories.join(',\n')}
};
const cache = {};
function load(name) {
  if (cache[name]) return cache[name].exports;
  const module = { exports: {} };
  cache[name] = module;
  factories[name](module, module.exports, requireSibling);
  return module.exports;
}
function requireSibling(spec) {
  const match = /^\\.\\/([A-Za-z0-9_-]+)$/.exec(spec);
  if (!match || !Object.prototype.hasOwnProperty.call(factories, match[1])) {
    throw new Error('console bundle: ' + spec + ' is not part of the client');
  }
  return load(match[1]);
}
load('main');
})();
`;
}

function send(res: Response, status: number, type: string, body: string, cache = 'no-cache'): void {
  res.status(status);
  for (const [name, value] of Object.entries(SECURITY_HEADERS)) res.setHeader(name, value);
  res.setHeader('content-type', type);
  res.setHeader('cache-control', cache);
  res.send(body);
}

/**
 * The review console: a static shell, one stylesheet and one script under /console. The pages are public;
 * every data call the script makes carries the reviewer's key as a Bearer header and goes through the API's guard.
 */
export function mountConsole(app: INestApplication): void {
  app.use(CONSOLE_ROUTE, (req: Request, res: Response, next: NextFunction) => {
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      next();
      return;
    }
    switch (req.path) {
      case '/app.js':
        try {
          bundle ??= consoleBundle();
          send(res, 200, 'text/javascript; charset=utf-8', bundle);
        } catch (error) {
          send(res, 503, 'text/plain; charset=utf-8', (error as Error).message);
        }
        return;
      case '/app.css':
        send(res, 200, 'text/css; charset=utf-8', CONSOLE_CSS);
        return;
      case '/favicon.svg':
        send(res, 200, 'image/svg+xml', CONSOLE_FAVICON, 'max-age=86400');
        return;
      default:
        send(res, CLIENT_ROUTE.test(req.path) ? 200 : 404, 'text/html; charset=utf-8', CONSOLE_HTML, 'no-store');
    }
  });
}
