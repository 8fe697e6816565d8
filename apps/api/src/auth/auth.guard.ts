import { isIP } from 'node:net';
import { CanActivate, ExecutionContext, Inject, Injectable } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import type { Role } from '@verity/persistence';
import { VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { PRODUCER_REDIS } from '@verity/queues';
import type { RedisClient as Redis } from '@verity/platform';
import type { Request } from 'express';
import { Problem } from '../problem/problem';
import { ApiKeyService } from './api-key.service';
import { internalCallClient } from './internal-caller';
import { AnyPrincipal, DECISION_KEY, OperatorPrincipal, PUBLIC_KEY, Principal, ROLES_KEY } from './principal';
import { SharedRateLimiter } from './rate-limiter';

export function bearerToken(req: Pick<Request, 'headers'>): string | null {
  const header = req.headers.authorization;
  if (!header) return null;
  const match = /^Bearer\s+(\S+)$/i.exec(header);
  return match ? match[1] : null;
}

/** The key as the password of HTTP Basic, so a browser can open Bull Board (it cannot send a Bearer header). */
export function basicPassword(req: Pick<Request, 'headers'>): string | null {
  const match = /^Basic\s+(\S+)$/i.exec(req.headers.authorization ?? '');
  if (!match) return null;
  const decoded = Buffer.from(match[1], 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  return colon >= 0 ? decoded.slice(colon + 1) : null;
}

/**
 * The address failed authentications are counted against: the socket's peer, or — only behind the proxies
 * TRUST_PROXY names — the client they report (Express' `req.ip`, which is the peer when no proxy is trusted). A call
 * this process made to itself for a client (the MCP tools') is that client's (internal-caller.ts).
 */
export function clientAddress(req: Pick<Request, 'socket' | 'ip' | 'headers'>): string {
  const forClient = internalCallClient(req.headers);
  if (forClient) return forClient;
  // What a trusted proxy reports is still text from the wire: only an address is taken (it becomes a Redis key).
  if (req.ip && isIP(req.ip)) return req.ip;
  return req.socket?.remoteAddress ?? 'unknown';
}

@Injectable()
export class AuthGuard implements CanActivate {
  private readonly limiter: SharedRateLimiter;

  constructor(
    private readonly reflector: Reflector,
    private readonly keys: ApiKeyService,
    @Inject(VERITY_CONFIG) config: VerityConfig,
    @Inject(PRODUCER_REDIS) redis: Redis,
  ) {
    this.limiter = new SharedRateLimiter(redis, config.QUEUE_PREFIX, config.RATE_LIMIT_PER_MINUTE);
  }

  async canActivate(context: ExecutionContext): Promise<boolean> {
    const targets = [context.getHandler(), context.getClass()];
    if (this.reflector.getAllAndOverride<boolean>(PUBLIC_KEY, targets)) return true;
    const req = context.switchToHttp().getRequest<Request & { principal?: Principal }>();
    const token = bearerToken(req);
    if (!token) throw missingKey();
    this.keys.refuseDemoKeyByName(token, req.headers.host);
    const { principal, rateWait: wait } = await this.keys.admitFrom(clientAddress(req), token, this.limiter);
    if (wait > 0) {
      throw new Problem(
        429,
        'rate-limited',
        'Too many requests',
        `retry in ${wait} s`,
        {},
        { 'retry-after': `${wait}` },
      );
    }
    // An operator runs the platform; it is no member of any tenant, so no tenant's data answers to its key.
    if (principal.role === 'operator') {
      throw new Problem(
        403,
        'operator-not-tenant',
        'Forbidden',
        'an operator key belongs to no tenant and reads no tenant’s data; use a key of the tenant',
      );
    }
    const roles = this.reflector.getAllAndOverride<Role[] | undefined>(ROLES_KEY, targets);
    // An admin may call every endpoint of its tenant except a reviewer's decision (ReviewerDecision).
    const adminMay = principal.role === 'admin' && !this.reflector.getAllAndOverride<boolean>(DECISION_KEY, targets);
    if (roles && !adminMay && !roles.includes(principal.role)) {
      throw new Problem(403, 'forbidden', 'Forbidden', `this endpoint needs the ${roles.join(' or ')} role`);
    }
    req.principal = principal;
    return true;
  }
}

export async function authenticateRequest(
  req: Pick<Request, 'headers' | 'socket' | 'ip'>,
  keys: ApiKeyService,
  token = bearerToken(req),
): Promise<AnyPrincipal> {
  if (!token) throw missingKey();
  keys.refuseDemoKeyByName(token, req.headers.host);
  return keys.authenticateFrom(clientAddress(req), token);
}

function missingKey(): Problem {
  return new Problem(
    401,
    'unauthorized',
    'Unauthorized',
    'send Authorization: Bearer <api key>',
    {},
    { 'www-authenticate': 'Bearer' },
  );
}

/**
 * For the platform's own pages (Bull Board, /metrics): only the operator role. Tenant keys, admins included, are
 * 403: these pages show every tenant's jobs and counts.
 */
export async function authenticateOperator(
  req: Pick<Request, 'headers' | 'socket' | 'ip'>,
  keys: ApiKeyService,
  what: string,
  token = bearerToken(req),
): Promise<OperatorPrincipal> {
  const principal = await authenticateRequest(req, keys, token);
  if (principal.role !== 'operator') {
    throw new Problem(
      403,
      'forbidden',
      'Forbidden',
      `${what} needs the operator role (it shows every tenant); tenant keys, admin included, cannot open it`,
    );
  }
  return principal;
}
