import type { NextFunction, Request, Response } from 'express';
import { Problem, sendProblem } from '../problem/problem';

/** Where the OpenAPI page is served (SwaggerModule.setup in main.ts). */
export const DOCS_ROUTE = '/docs';

/**
 * What is served under /docs: @nestjs/swagger's own answers (the page, at `/` and `/index.html`; `swagger-ui-init.js`,
 * the document for the page; `LICENSE`, which it answers 404 itself) and the files of swagger-ui-dist the page loads
 * (its `<link>` and `<script>` elements). @nestjs/swagger serves the whole package directory: its package.json (the
 * exact version), README, source maps, the OAuth2 redirect page and bundles the page never loads were all readable.
 */
const DOCS_PATHS: ReadonlySet<string> = new Set([
  '/',
  '/index.html',
  '/LICENSE',
  '/swagger-ui-init.js',
  '/swagger-ui.css',
  '/swagger-ui-bundle.js',
  '/swagger-ui-standalone-preset.js',
  '/favicon-32x32.png',
  '/favicon-16x16.png',
]);

/** Whether `path` (below /docs, as `/swagger-ui.css`) is one of those, spelled exactly so. */
export function docsServes(path: string): boolean {
  return DOCS_PATHS.has(path);
}

/**
 * Mounted on /docs before @nestjs/swagger: a GET or HEAD of any other path there is a 404 problem+json, as an unknown
 * path anywhere is, before the package's static files are looked in. The path is compared as sent (not decoded, no
 * slash folded), so `/docs/%70ackage.json` or `/docs//package.json` are no way round it. Other methods go on to the
 * routes (a 405 where a GET is served, else 404).
 */
export function serveOnlyDocsPage(req: Request, res: Response, next: NextFunction): void {
  if ((req.method !== 'GET' && req.method !== 'HEAD') || docsServes(req.path)) {
    next();
    return;
  }
  sendProblem(
    req,
    res,
    new Problem(404, 'not-found', 'Not found', 'the OpenAPI page (/docs) has no file at this path'),
  );
}
