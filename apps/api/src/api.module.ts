import { MiddlewareConsumer, Module, NestModule } from '@nestjs/common';
import { APP_FILTER, APP_GUARD } from '@nestjs/core';
import { ConnectorRegistry } from '@verity/connectors';
import { PersistenceModule } from '@verity/persistence';
import { PlatformModule, VerityConfig } from '@verity/platform';
import { QueuesModule } from '@verity/queues';
import { ApiKeyService } from './auth/api-key.service';
import { AuthGuard } from './auth/auth.guard';
import { ExecutionsController } from './executions/executions.controller';
import { ExecutionsService } from './executions/executions.service';
import { HealthController } from './health/health.controller';
import { MetaController } from './meta/meta.controller';
import { MetricsController } from './metrics/metrics.controller';
import { OperationsController } from './operations/operations.controller';
import { OperationsService } from './operations/operations.service';
import { ProblemFilter } from './problem/problem.filter';
import { RequestContextMiddleware } from './request-context.middleware';
import { EventNotifier } from './stream/event-notifier.service';
import { StreamService } from './stream/stream.service';

@Module({})
export class ApiModule implements NestModule {
  static forRoot(config: VerityConfig) {
    return {
      module: ApiModule,
      imports: [PlatformModule.forRoot('api', config), PersistenceModule, QueuesModule],
      controllers: [ExecutionsController, OperationsController, MetaController, HealthController, MetricsController],
      providers: [
        { provide: ConnectorRegistry, useValue: new ConnectorRegistry() },
        ApiKeyService,
        ExecutionsService,
        OperationsService,
        EventNotifier,
        StreamService,
        { provide: APP_GUARD, useClass: AuthGuard },
        { provide: APP_FILTER, useClass: ProblemFilter },
      ],
    };
  }

  configure(consumer: MiddlewareConsumer): void {
    consumer.apply(RequestContextMiddleware).forRoutes('*path');
  }
}
