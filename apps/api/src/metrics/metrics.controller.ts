import { Controller, Get, Res } from '@nestjs/common';
import { ApiExcludeController } from '@nestjs/swagger';
import { InjectDataSource } from '@nestjs/typeorm';
import type { Response } from 'express';
import { DataSource } from 'typeorm';
import { Public } from '../auth/principal';
import { executionsByStatus, operationsByStatus, overdueObligations, registry, transitionsTotal } from './metrics';

/** Prometheus scrape endpoint. Status counts come from Postgres (the truth), so every API replica agrees. */
@ApiExcludeController()
@Controller('metrics')
export class MetricsController {
  constructor(@InjectDataSource() private readonly db: DataSource) {}

  @Get()
  @Public()
  async scrape(@Res() res: Response) {
    const [executions, operations, transitions, overdue] = await Promise.all([
      this.db.query(`SELECT status, count(*)::int AS n FROM executions GROUP BY status`),
      this.db.query(`SELECT status, count(*)::int AS n FROM operations GROUP BY status`),
      this.db.query(`SELECT type, coalesce(to_status, '') AS to_status, count(*)::int AS n FROM events GROUP BY 1, 2`),
      this.db.query(
        `SELECT count(*)::int AS n FROM operations
         WHERE status = 'MANUAL_REVIEW' AND (obligation->>'due_at')::timestamptz < now()`,
      ),
    ]);
    executionsByStatus.reset();
    for (const r of executions as { status: string; n: number }[]) executionsByStatus.set({ status: r.status }, r.n);
    operationsByStatus.reset();
    for (const r of operations as { status: string; n: number }[]) operationsByStatus.set({ status: r.status }, r.n);
    transitionsTotal.reset();
    for (const r of transitions as { type: string; to_status: string; n: number }[]) {
      transitionsTotal.set({ type: r.type, to_status: r.to_status }, r.n);
    }
    overdueObligations.set((overdue as { n: number }[])[0]?.n ?? 0);
    res.setHeader('content-type', registry.contentType);
    res.send(await registry.metrics());
  }
}
