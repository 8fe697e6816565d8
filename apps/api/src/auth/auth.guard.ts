import { CanActivate, ExecutionContext, Inject, Injectable } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import type { Role } from '@verity/persistence';
import { VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { PRODUCER_REDIS } from '@verity/queues';
import type { Redis } from 'ioredis';
import type { Request } from 'express';
import { Problem } from '../problem/problem';
import { ApiKeyService } from './api-key.service';
import { PUBLIC_KEY, Principal, ROLES_KEY } from './principal';
import { SharedRateLimiter } from './rate-limiter';

export function bearerToken(req: Pick<Request, 'headers'>): string | null {
  const header = req.headers.authorization;
  if (!header) return null;
  const match = /^Bearer\s+(\S+)$/i.exec(header);
  return match ? match[1] : null;
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
    const principal = await authenticateRequest(req, this.keys);
    const wait = await this.limiter.take(principal.keyId);
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
    const roles = this.reflector.getAllAndOverride<Role[] | undefined>(ROLES_KEY, targets);
    if (roles && principal.role !== 'admin' && !roles.includes(principal.role)) {
      throw new Problem(403, 'forbidden', 'Forbidden', `this endpoint needs the ${roles.join(' or ')} role`);
    }
    req.principal = principal;
    return true;
  }
}

export async function authenticateRequest(req: Pick<Request, 'headers'>, keys: ApiKeyService): Promise<Principal> {
  const token = bearerToken(req);
  if (!token) {
    throw new Problem(
      401,
      'unauthorized',
      'Unauthorized',
      'send Authorization: Bearer <api key>',
      {},
      {
        'www-authenticate': 'Bearer',
      },
    );
  }
  const principal = await keys.authenticate(token);
  if (!principal) {
    throw new Problem(
      401,
      'unauthorized',
      'Unauthorized',
      'the API key is unknown or revoked',
      {},
      {
        'www-authenticate': 'Bearer error="invalid_token"',
      },
    );
  }
  return principal;
}
