import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { ExpressAdapter } from '@bull-board/express';
import type { INestApplication } from '@nestjs/common';
import { VerityConfig } from '@verity/platform';
import { JobProducer } from '@verity/queues';
import type { NextFunction, Request, Response } from 'express';
import { ApiKeyService } from './auth/api-key.service';
import { authenticateOperator, basicPassword, bearerToken } from './auth/auth.guard';
import type { OperatorPrincipal } from './auth/principal';
import { isDatabaseUnavailable } from '@verity/persistence';
import { pageSecurityHeaders } from './http/security-headers';
import { Problem, sendProblem } from './problem/problem';

export const BULL_BOARD_ROUTE = '/admin/queues';

/**
 * Bull Board has no auth of its own and shows every tenant's jobs: it sits behind the platform operator role (Bearer,
 * or Basic with the key as password so a browser can open it). Read-only in every mode unless BULL_BOARD_WRITABLE is
 * set explicitly: retries go through the API's rules, never around them.
 */
export async function mountBullBoard(app: INestApplication, config: VerityConfig): Promise<void> {
  const producer = app.get(JobProducer);
  const keys = app.get(ApiKeyService);
  const readOnlyMode = config.BULL_BOARD_WRITABLE !== true;
  const serverAdapter = new ExpressAdapter();
  serverAdapter.setBasePath(BULL_BOARD_ROUTE);
  createBullBoard({
    // Every queue on every shard (named `<shard>.<queue>` when there are several).
    queues: (await producer.everyQueue()).map(
      ({ queue, namePrefix }) => new BullMQAdapter(queue, { readOnlyMode, prefix: namePrefix }),
    ),
    serverAdapter,
  });
  const guard = async (req: Request, res: Response, next: NextFunction) => {
    const crossSite = fromAnotherSite(req);
    if (crossSite) {
      sendProblem(req, res, new Problem(403, 'forbidden', 'Forbidden', crossSite));
      return;
    }
    const token = bearerToken(req) ?? basicPassword(req);
    try {
      const principal = await authenticateOperator(req, keys, 'Bull Board', token);
      (req as Request & { principal?: OperatorPrincipal }).principal = principal;
    } catch (error) {
      sendProblem(req, res, asProblem(error));
      return;
    }
    next();
  };
  app.use(BULL_BOARD_ROUTE, pageSecurityHeaders, guard, serverAdapter.getRouter());
}

/**
 * A write sent by a page of another site (CSRF): a browser that opened Bull Board sends its Basic credentials with every
 * request to it, also a form's POST from any other page (no preflight for text/plain or form bodies). The browser says
 * where a request comes from (Sec-Fetch-Site, else Origin); a client that is no browser sends neither and is not judged.
 */
function fromAnotherSite(req: Request): string | null {
  if (req.method === 'GET' || req.method === 'HEAD') return null;
  const site = req.headers['sec-fetch-site'];
  if (typeof site === 'string' && site !== 'same-origin' && site !== 'none') {
    return `Bull Board takes writes from its own pages only (Sec-Fetch-Site: ${site})`;
  }
  const origin = req.headers.origin;
  if (site === undefined && origin !== undefined && !sameHost(origin, req.headers.host)) {
    return 'Bull Board takes writes from its own pages only (the Origin is another site)';
  }
  return null;
}

function sameHost(origin: string, host: string | undefined): boolean {
  try {
    return host !== undefined && new URL(origin).host === host.toLowerCase();
  } catch {
    return false;
  }
}

function asProblem(error: unknown): Problem {
  if (error instanceof Problem) {
    // A browser asks for the key only when told Basic works here.
    if (error.status !== 401) return error;
    return new Problem(401, error.code, error.title, 'Bull Board needs an operator API key', error.extras, {
      'www-authenticate': 'Basic realm="verity-operator", charset="UTF-8"',
    });
  }
  if (isDatabaseUnavailable(error)) return Problem.unavailable();
  return new Problem(500, 'internal', 'Internal error');
}
