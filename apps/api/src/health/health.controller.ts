import { Controller, Get, Inject, Res } from '@nestjs/common';
import { ApiOkResponse, ApiOperation, ApiResponse, ApiTags } from '@nestjs/swagger';
import { InjectDataSource } from '@nestjs/typeorm';
import { ping } from '@verity/persistence';
import { PRODUCER_REDIS } from '@verity/queues';
import type { Response } from 'express';
import type { Redis } from 'ioredis';
import { DataSource } from 'typeorm';
import { Public } from '../auth/principal';
import { schemaRef } from '../openapi';

/** Liveness says the process runs; readiness says it can do its job (Postgres and Redis answer). */
@ApiTags('health')
@Controller('health')
export class HealthController {
  constructor(
    @InjectDataSource() private readonly db: DataSource,
    @Inject(PRODUCER_REDIS) private readonly redis: Redis,
  ) {}

  @Get('live')
  @Public()
  @ApiOperation({ operationId: 'getLiveness', summary: 'Liveness: the process runs' })
  @ApiOkResponse({ schema: schemaRef('Liveness') })
  live() {
    return { status: 'ok' };
  }

  @Get('ready')
  @Public()
  @ApiOperation({
    operationId: 'getReadiness',
    summary: 'Readiness: Postgres and Redis answer (503 when either does not)',
  })
  @ApiOkResponse({
    schema: schemaRef('Readiness'),
    example: { status: 'ok', checks: { postgres: 'up', redis: 'up' } },
  })
  @ApiResponse({
    status: 503,
    description: 'A dependency is down',
    schema: schemaRef('Readiness'),
    example: { status: 'error', checks: { postgres: 'up', redis: 'down' } },
  })
  async ready(@Res() res: Response) {
    const check = async (probe: () => Promise<unknown>) => {
      try {
        await Promise.race([probe(), new Promise((_, reject) => setTimeout(() => reject(new Error('timeout')), 1500))]);
        return 'up';
      } catch {
        return 'down';
      }
    };
    const [postgres, redis] = await Promise.all([check(() => ping(this.db.manager)), check(() => this.redis.ping())]);
    const ok = postgres === 'up' && redis === 'up';
    res.status(ok ? 200 : 503).json({ status: ok ? 'ok' : 'error', checks: { postgres, redis } });
  }
}
