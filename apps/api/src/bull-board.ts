import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { ExpressAdapter } from '@bull-board/express';
import type { INestApplication } from '@nestjs/common';
import { VerityConfig } from '@verity/platform';
import { JobProducer, QueueName } from '@verity/queues';
import type { NextFunction, Request, Response } from 'express';
import { ApiKeyService } from './auth/api-key.service';
import { bearerToken } from './auth/auth.guard';
import type { Principal } from './auth/principal';
import { isDatabaseUnavailable } from '@verity/persistence';
import { Problem, sendProblem } from './problem/problem';

export const BULL_BOARD_ROUTE = '/admin/queues';

/**
 * Bull Board has no auth of its own: it sits behind the admin role (Bearer, or Basic with the key as password so a
 * browser can open it), and is read-only outside development — retries go through the API's rules, never around them.
 */
export function mountBullBoard(app: INestApplication, config: VerityConfig): void {
  const producer = app.get(JobProducer);
  const keys = app.get(ApiKeyService);
  const readOnlyMode = config.BULL_BOARD_READ_ONLY ?? config.NODE_ENV !== 'development';
  const serverAdapter = new ExpressAdapter();
  serverAdapter.setBasePath(BULL_BOARD_ROUTE);
  createBullBoard({
    queues: Object.values(QueueName).map((name) => new BullMQAdapter(producer.queue(name), { readOnlyMode })),
    serverAdapter,
  });
  const guard = async (req: Request, res: Response, next: NextFunction) => {
    const token = bearerToken(req) ?? basicPassword(req);
    let principal: Principal | null = null;
    try {
      principal = token ? await keys.authenticate(token) : null;
    } catch (error) {
      sendProblem(
        req,
        res,
        isDatabaseUnavailable(error) ? Problem.unavailable() : new Problem(500, 'internal', 'Internal error'),
      );
      return;
    }
    if (!principal) {
      const problem = new Problem(
        401,
        'unauthorized',
        'Unauthorized',
        'Bull Board needs an admin API key',
        {},
        {
          'www-authenticate': 'Basic realm="verity-admin", charset="UTF-8"',
        },
      );
      sendProblem(req, res, problem);
      return;
    }
    if (principal.role !== 'admin') {
      sendProblem(req, res, new Problem(403, 'forbidden', 'Forbidden', 'Bull Board needs the admin role'));
      return;
    }
    (req as Request & { principal?: Principal }).principal = principal;
    next();
  };
  app.use(BULL_BOARD_ROUTE, guard, serverAdapter.getRouter());
}

function basicPassword(req: Request): string | null {
  const match = /^Basic\s+(\S+)$/i.exec(req.headers.authorization ?? '');
  if (!match) return null;
  const decoded = Buffer.from(match[1], 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  return colon >= 0 ? decoded.slice(colon + 1) : null;
}
