import { Controller, Get, Inject, Req, Res } from '@nestjs/common';
import { ApiExcludeController } from '@nestjs/swagger';
import { InjectDataSource } from '@nestjs/typeorm';
import { platformCounts } from '@verity/persistence';
import { VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { JobProducer, PRODUCER_REDIS, workerCountersKey } from '@verity/queues';
import type { Request, Response } from 'express';
import type { Redis } from 'ioredis';
import { createHash, timingSafeEqual } from 'node:crypto';
import { DataSource } from 'typeorm';
import { ApiKeyService } from '../auth/api-key.service';
import { authenticateOperator, bearerToken } from '../auth/auth.guard';
import { Public } from '../auth/principal';
import {
  dispatchRefused,
  enqueueFailures,
  executionsByStatus,
  operationsByStatus,
  overdueObligations,
  registry,
  transitionsTotal,
} from './metrics';

/**
 * Prometheus scrape endpoint. Status counts come from Postgres (the truth), so every API replica agrees. They count
 * every tenant, so only the operator sees them: an operator key, or METRICS_TOKEN as a bearer token (Prometheus'
 * `bearer_token`), unless METRICS_PUBLIC=true. (Public to the tenant guard: the check is this one.)
 */
@ApiExcludeController()
@Controller('metrics')
export class MetricsController {
  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly keys: ApiKeyService,
    @Inject(PRODUCER_REDIS) private readonly redis: Redis,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
    private readonly producer: JobProducer,
  ) {}

  private enqueueFailuresSeen = 0;

  @Get()
  @Public()
  async scrape(@Req() req: Request, @Res() res: Response) {
    if (this.config.METRICS_PUBLIC !== true && !this.isMetricsToken(bearerToken(req))) {
      await authenticateOperator(req, this.keys, '/metrics');
    }
    const counts = await platformCounts(this.db.manager);
    executionsByStatus.reset();
    for (const r of counts.executions) executionsByStatus.set({ status: r.status }, r.n);
    operationsByStatus.reset();
    for (const r of counts.operations) operationsByStatus.set({ status: r.status }, r.n);
    transitionsTotal.reset();
    for (const r of counts.transitions) {
      transitionsTotal.set({ type: r.type, to_status: r.to_status }, r.n);
    }
    overdueObligations.set(counts.overdueObligations);
    // The dispatchers' counters live in Redis (they serve no HTTP); without Redis the scrape omits them.
    const counters = await this.redis.hgetall(workerCountersKey(this.config.QUEUE_PREFIX)).catch(() => null);
    dispatchRefused.reset();
    for (const [field, n] of Object.entries(counters ?? {})) {
      if (field.startsWith('dispatch_refused:')) dispatchRefused.set({ reason: field.slice(17) }, Number(n));
    }
    enqueueFailures.inc(this.producer.enqueueFailures - this.enqueueFailuresSeen);
    this.enqueueFailuresSeen = this.producer.enqueueFailures;
    res.setHeader('content-type', registry.contentType);
    res.send(await registry.metrics());
  }

  /** Compared as digests in constant time: the answer's timing says nothing about how much of the token matched. */
  private isMetricsToken(token: string | null): boolean {
    const expected = this.config.METRICS_TOKEN;
    if (!expected || !token) return false;
    const digest = (v: string) => createHash('sha256').update(v).digest();
    return timingSafeEqual(digest(token), digest(expected));
  }
}
