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
 * content policy; Swagger UI and Bull Board bring their own scripts, so they get only `frame-ancestors`.
 */
export const PAGE_SECURITY_HEADERS: Readonly<Record<string, string>> = {
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
  'permissions-policy': 'camera=(), microphone=(), geolocation=(), payment=()',
};

/** Express layer for pages served by third-party routers (Swagger UI, Bull Board). */
export function pageSecurityHeaders(req: Request, res: Response, next: NextFunction): void {
  for (const [name, value] of Object.entries(PAGE_SECURITY_HEADERS)) res.setHeader(name, value);
  res.setHeader('content-security-policy', "frame-ancestors 'none'");
  // Those routers are express apps of their own, which would announce "X-Powered-By: Express" again.
  const setHeader = res.setHeader.bind(res);
  res.setHeader = ((name: string, value: number | string | readonly string[]) =>
    name.toLowerCase() === 'x-powered-by' ? res : setHeader(name, value)) as Response['setHeader'];
  next();
}
