import { Controller, Get, Inject, Req, Res } from '@nestjs/common';
import { ApiOkResponse, ApiResponse, ApiTags } from '@nestjs/swagger';
import { InjectDataSource } from '@nestjs/typeorm';
import { ping, schemaMigratedProbe } from '@verity/persistence';
import { notReadyDetail, singleFlight } from '@verity/platform';
import { PRODUCER_REDIS } from '@verity/queues';
import type { Request, Response } from 'express';
import type { RedisClient as Redis } from '@verity/platform';
import { DataSource } from 'typeorm';
import { Public } from '../auth/principal';
import { ApiEndpoint, schemaRef } from '../openapi';
import { problemBody } from '../openapi-examples';
import { Problem, sendProblem } from '../problem/problem';

/** Liveness says the process runs; readiness says it can do its job (Postgres and Redis answer, the schema is there). */
@ApiTags('health')
@Controller('health')
export class HealthController {
  /**
   * One check at a time, shared by every probe that arrives meanwhile: readiness is public, and each check takes a
   * connection from the pool that intake uses; a flood of probes must not queue ahead of intake's statements (which
   * give up after the pool's connection timeout).
   */
  private readonly readiness = singleFlight(async () => {
    const check = async (probe: () => Promise<unknown>) => {
      try {
        await Promise.race([probe(), new Promise((_, reject) => setTimeout(() => reject(new Error('timeout')), 1500))]);
        return 'up';
      } catch {
        return 'down';
      }
    };
    const [postgres, redis, schema] = await Promise.all([
      check(() => ping(this.db.manager)),
      check(() => this.redis.ping()),
      // Started without RUN_MIGRATIONS before the migration step ran: not ready until it has (not asked once it has).
      check(this.schemaMigrated),
    ]);
    return { postgres, redis, schema };
  });

  /** Not asked again once the schema was seen migrated. */
  private readonly schemaMigrated: () => Promise<void>;

  constructor(
    @InjectDataSource() private readonly db: DataSource,
    @Inject(PRODUCER_REDIS) private readonly redis: Redis,
  ) {
    this.schemaMigrated = schemaMigratedProbe(db.manager);
  }

  @Get('live')
  @Public()
  @ApiEndpoint({ id: 'getLiveness', summary: 'Liveness: the process runs', response: { schema: 'Liveness' } })
  live() {
    return { status: 'ok' };
  }

  @Get('ready')
  @Public()
  @ApiEndpoint({
    id: 'getReadiness',
    summary: 'Readiness: Postgres and Redis answer and the schema is migrated (503 otherwise)',
  })
  // Both answers show a plain example (not a named one, as ApiEndpoint writes it).
  @ApiOkResponse({
    schema: schemaRef('Readiness'),
    example: { status: 'ok', checks: { postgres: 'up', redis: 'up', schema: 'up' } },
  })
  @ApiResponse({
    status: 503,
    description: 'Not ready: a dependency is down (problem+json; `checks` gives each one)',
    content: {
      'application/problem+json': {
        schema: schemaRef('Problem'),
        example: problemBody('not-ready', '/health/ready'),
      },
    },
  })
  async ready(@Req() req: Request, @Res() res: Response) {
    const checks = await this.readiness();
    const ok = checks.postgres === 'up' && checks.redis === 'up' && checks.schema === 'up';
    // Not ready is an error answer like every other: problem+json, the checks a member of it.
    if (ok) res.status(200).json({ status: 'ok', checks });
    else sendProblem(req, res, new Problem(503, 'not-ready', 'Not ready', notReadyDetail(checks), { checks }));
  }
}
