import { EVERY_ANSWER_HEADERS } from '@verity/platform';
import type { NextFunction, Request, Response } from 'express';

/**
 * The API's first express layer: what every answer says (EVERY_ANSWER_HEADERS: nosniff), set before any route, guard,
 * parser or page writes one — JSON, problem+json, the event stream, /metrics, the pages. The answers Node's HTTP parser
 * refuses, written outside express, carry the same headers (answerClientErrors).
 */
export function answerHeaders(_req: Request, res: Response, next: NextFunction): void {
  for (const [name, value] of Object.entries(EVERY_ANSWER_HEADERS)) res.setHeader(name, value);
  next();
}

/**
 * What every page the API serves to a browser sends besides what every answer does (answerHeaders: no content
 * sniffing): no framing (clickjacking), no referrer, isolated from other origins. The console adds its own strict
 * content policy; Swagger UI brings its own scripts, so it gets only `frame-ancestors`, and Bull Board gets its own
 * (BULL_BOARD_CSP).
 */
export const PAGE_SECURITY_HEADERS: Readonly<Record<string, string>> = {
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
  'permissions-policy': 'camera=(), microphone=(), geolocation=(), payment=()',
};

/**
 * Bull Board's content policy: its page loads only its own files (scripts, stylesheets, images, the translations it
 * fetches) and asks only its own API, so an operator's browser contacts no other origin while it shows every tenant's
 * jobs. Inline styles are allowed (its page and its components set `style`); inline and evaluated scripts are not.
 */
export const BULL_BOARD_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "manifest-src 'self'",
  "base-uri 'self'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

/** Express layer for pages served by third-party routers (Swagger UI). */
export function pageSecurityHeaders(_req: Request, res: Response, next: NextFunction): void {
  pageHeaders(res, "frame-ancestors 'none'");
  next();
}

/** Express layer for Bull Board: the page headers, with the board's own content policy (BULL_BOARD_CSP). */
export function boardSecurityHeaders(_req: Request, res: Response, next: NextFunction): void {
  pageHeaders(res, BULL_BOARD_CSP);
  next();
}

function pageHeaders(res: Response, csp: string): void {
  for (const [name, value] of Object.entries(PAGE_SECURITY_HEADERS)) res.setHeader(name, value);
  res.setHeader('content-security-policy', csp);
  // Those routers are express apps of their own, which would announce "X-Powered-By: Express" again.
  const setHeader = res.setHeader.bind(res);
  res.setHeader = ((name: string, value: number | string | readonly string[]) =>
    name.toLowerCase() === 'x-powered-by' ? res : setHeader(name, value)) as Response['setHeader'];
}
