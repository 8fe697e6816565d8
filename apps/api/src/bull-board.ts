import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { ExpressAdapter } from '@bull-board/express';
import type { INestApplication } from '@nestjs/common';
import { VerityConfig } from '@verity/platform';
import { JobProducer, QueueName } from '@verity/queues';
import type { NextFunction, Request, Response } from 'express';
import { ApiKeyService } from './auth/api-key.service';
import { bearerToken } from './auth/auth.guard';

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
    const principal = token ? await keys.authenticate(token).catch(() => null) : null;
    if (!principal) {
      res.setHeader('www-authenticate', 'Basic realm="verity-admin", charset="UTF-8"');
      problem(res, 401, 'unauthorized', 'Unauthorized', 'Bull Board needs an admin API key');
      return;
    }
    if (principal.role !== 'admin') {
      problem(res, 403, 'forbidden', 'Forbidden', 'Bull Board needs the admin role');
      return;
    }
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

function problem(res: Response, status: number, code: string, title: string, detail: string): void {
  res
    .status(status)
    .type('application/problem+json')
    .send(JSON.stringify({ type: `https://verity.dev/problems/${code}`, title, status, detail }));
}
