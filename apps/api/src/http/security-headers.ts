import type { NextFunction, Request, Response } from 'express';

/**
 * What every page the API serves to a browser sends (the console, Swagger UI at /docs, Bull Board): no framing
 * (clickjacking), no content sniffing, no referrer, isolated from other origins. The console adds its own strict
 * content policy; Swagger UI and Bull Board bring their own scripts, so they get only `frame-ancestors`.
 */
export const PAGE_SECURITY_HEADERS: Readonly<Record<string, string>> = {
  'x-content-type-options': 'nosniff',
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
