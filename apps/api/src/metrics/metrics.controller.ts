import { Controller, Get, Inject, Req, Res } from '@nestjs/common';
import { ApiExcludeController } from '@nestjs/swagger';
import { InjectDataSource } from '@nestjs/typeorm';
import { platformCounts } from '@verity/persistence';
import { VERITY_CONFIG, VerityConfig, isMetricsToken, metricsRegistry } from '@verity/platform';
import type { Request, Response } from 'express';
import { DataSource } from 'typeorm';
import { ApiKeyService } from '../auth/api-key.service';
import { authenticateOperator, bearerToken, clientAddress } from '../auth/auth.guard';
import { Public } from '../auth/principal';
import { refuseQuery } from '../http/no-query';
import { executionsInFlight, openObligations, operationsInFlight, overdueObligations } from './metrics';

/**
 * Prometheus scrape endpoint. The in-flight counts come from Postgres (the truth), so every API replica agrees; they
 * read only unfinished rows (see METRICS_SQL), never the event log. They count every tenant, so only the operator
 * sees them: an operator key, or METRICS_TOKEN as a bearer token (Prometheus' `authorization`), unless
 * METRICS_PUBLIC=true. (Public to the tenant guard: the check is this one.)
 */
@ApiExcludeController()
@Controller('metrics')
export class MetricsController {
  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly keys: ApiKeyService,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
  ) {}

  @Get()
  @Public()
  async scrape(@Req() req: Request, @Res() res: Response) {
    if (this.config.METRICS_PUBLIC !== true) {
      // METRICS_TOKEN is a key like any other to an address that keeps guessing: once the address has used its failed
      // authentications, the right token gets the 429 a wrong one gets, or the limit would confirm a guess.
      if (isMetricsToken(this.config, bearerToken(req))) await this.keys.refuseBlocked(clientAddress(req));
      else await authenticateOperator(req, this.keys, '/metrics');
    }
    refuseQuery(req);
    const counts = await platformCounts(this.db.manager);
    for (const [status, n] of Object.entries(counts.executions)) executionsInFlight.set({ status }, n);
    for (const [status, n] of Object.entries(counts.operations)) operationsInFlight.set({ status }, n);
    for (const [age, n] of Object.entries(counts.obligations)) openObligations.set({ age }, n);
    overdueObligations.set(
      counts.obligations.overdue_lt_1h + counts.obligations.overdue_1h_to_24h + counts.obligations.overdue_gt_24h,
    );
    res.setHeader('content-type', metricsRegistry.contentType);
    res.send(await metricsRegistry.metrics());
  }
}
