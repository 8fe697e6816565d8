import { Controller, Get, Inject, Res } from '@nestjs/common';
import { ApiOkResponse, ApiResponse, ApiTags } from '@nestjs/swagger';
import { InjectDataSource } from '@nestjs/typeorm';
import { ping, schemaMigratedProbe } from '@verity/persistence';
import { singleFlight } from '@verity/platform';
import { PRODUCER_REDIS } from '@verity/queues';
import type { Response } from 'express';
import type { RedisClient as Redis } from '@verity/platform';
import { DataSource } from 'typeorm';
import { Public } from '../auth/principal';
import { ApiEndpoint, schemaRef } from '../openapi';

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
    description: 'A dependency is down',
    schema: schemaRef('Readiness'),
    example: { status: 'error', checks: { postgres: 'up', redis: 'down', schema: 'up' } },
  })
  async ready(@Res() res: Response) {
    const checks = await this.readiness();
    const ok = checks.postgres === 'up' && checks.redis === 'up' && checks.schema === 'up';
    res.status(ok ? 200 : 503).json({ status: ok ? 'ok' : 'error', checks });
  }
}
