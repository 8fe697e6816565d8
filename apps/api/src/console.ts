import type { INestApplication } from '@nestjs/common';
import type { NextFunction, Request, Response } from 'express';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PAGE_SECURITY_HEADERS } from './http/security-headers';
import { Problem, sendProblem } from './problem/problem';
import { CONSOLE_CSP, CONSOLE_FAVICON, CONSOLE_HTML } from './console/page';

export const CONSOLE_ROUTE = '/console';
const ASSETS_DIR = join(__dirname, 'console', 'assets');
const CLIENT_ROUTE = /^\/(?:|(?:operations|executions)\/[A-Za-z0-9_-]{1,100}\/?)$/;
/** The files served beside the pages (each answers 200, or 503 without a build). */
const ASSET_PATHS: ReadonlySet<string> = new Set(['/app.js', '/app.css', '/favicon.svg']);

/**
 * Whether a GET of this path under the console (`/` for the console itself, as express gives it) is answered with a
 * page or a file, not the console's 404: such a path takes GET and HEAD, and another method is 405 (RouteMethods).
 */
export function consoleServes(path: string): boolean {
  return ASSET_PATHS.has(path) || CLIENT_ROUTE.test(path);
}

const SECURITY_HEADERS: Record<string, string> = {
  ...PAGE_SECURITY_HEADERS,
  'content-security-policy': CONSOLE_CSP,
};

/** The script and stylesheet esbuild wrote at build time (scripts/build-console.ts), read once when the API boots. */
interface Assets {
  script: string;
  stylesheet: string;
}

function readAssets(dir: string): Assets | Error {
  const script = join(dir, 'console.js');
  const stylesheet = join(dir, 'console.css');
  if (!existsSync(script) || !existsSync(stylesheet)) {
    return new Error(`the review console is not built (no ${script}): run npm run build`);
  }
  return { script: readFileSync(script, 'utf8'), stylesheet: readFileSync(stylesheet, 'utf8') };
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
 * Without a build the API still starts: the script and stylesheet answer 503 saying how to build them, and the error
 * is returned for the boot log.
 */
export function mountConsole(app: INestApplication, assetsDir = ASSETS_DIR): Error | undefined {
  const assets = readAssets(assetsDir);
  const asset = (res: Response, type: string, pick: (built: Assets) => string) => {
    if (assets instanceof Error) send(res, 503, 'text/plain; charset=utf-8', assets.message);
    else send(res, 200, type, pick(assets));
  };
  app.use(CONSOLE_ROUTE, (req: Request, res: Response, next: NextFunction) => {
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      next();
      return;
    }
    switch (req.path) {
      case '/app.js':
        asset(res, 'text/javascript; charset=utf-8', (built) => built.script);
        return;
      case '/app.css':
        asset(res, 'text/css; charset=utf-8', (built) => built.stylesheet);
        return;
      case '/favicon.svg':
        send(res, 200, 'image/svg+xml', CONSOLE_FAVICON, 'max-age=86400');
        return;
      default:
        if (CLIENT_ROUTE.test(req.path)) {
          send(res, 200, 'text/html; charset=utf-8', CONSOLE_HTML, 'no-store');
        } else if (req.accepts(['application/problem+json', 'text/html']) === 'text/html') {
          // A browser that followed a wrong link gets the console's own page (it says what it cannot show).
          send(res, 404, 'text/html; charset=utf-8', CONSOLE_HTML, 'no-store');
        } else {
          // Anything else (a script, curl's */*) gets the API's error form, as every other unknown path does.
          sendProblem(req, res, new Problem(404, 'not-found', 'Not found', 'the console has no page at this path'));
        }
    }
  });
  return assets instanceof Error ? assets : undefined;
}
