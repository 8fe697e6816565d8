import { Module } from '@nestjs/common';
import { APP_FILTER, APP_GUARD, APP_INTERCEPTOR, DiscoveryModule } from '@nestjs/core';
import { ConnectorsModule } from '@verity/connectors';
import { DataSource } from 'typeorm';
import { Logger, VerityConfig } from '@verity/platform';
import { appModules } from '@verity/queues';
import { ChangesController } from './admin/changes.controller';
import { ChangesService } from './admin/changes.service';
import { ConnectorSettingsController } from './admin/connector-settings.controller';
import { ConnectorSettingsService } from './admin/connector-settings.service';
import { PolicyController } from './admin/policy.controller';
import { PolicyService } from './admin/policy.service';
import { WebhooksController } from './admin/webhooks.controller';
import { WebhookDeliveriesService } from './admin/webhook-deliveries.service';
import { WebhooksService } from './admin/webhooks.service';
import { ApiKeyService } from './auth/api-key.service';
import { AuthGuard } from './auth/auth.guard';
import { V1InFlight, V1InFlightWork } from './auth/v1-in-flight';
import { AnswerBytes } from './answer-bytes';
import { RefuseUnmatchableIfMatch } from './http/if-match';
import { ReviewController } from './console/review.controller';
import { ReviewService } from './console/review.service';
import { ExecutionsController } from './executions/executions.controller';
import { ExecutionsService } from './executions/executions.service';
import { HealthController } from './health/health.controller';
import { IndexController, MetaController } from './meta/meta.controller';
import { McpModule } from './mcp/mcp.module';
import { MetricsController } from './metrics/metrics.controller';
import { OperationsController } from './operations/operations.controller';
import { OperationsService } from './operations/operations.service';
import { ResolutionOptionsService } from './operations/resolution-options.service';
import { ProblemFilter } from './problem/problem.filter';
import { RefuseUnreadBody } from './http/no-body';
import { RefuseUnreadQuery } from './http/no-query';
import { RouteMethods } from './http/route-methods';
import { EventNotifier } from './stream/event-notifier.service';
import { StreamService } from './stream/stream.service';
import { RedactSecretValues } from './http/redact-answers';

@Module({})
export class ApiModule {
  /** `dataSource`, `logger`: see appModules. */
  static forRoot(config: VerityConfig, dataSource?: DataSource, logger?: Logger) {
    return {
      module: ApiModule,
      imports: [...appModules('api', config, dataSource, logger), ConnectorsModule, McpModule, DiscoveryModule],
      controllers: [
        ExecutionsController,
        OperationsController,
        ReviewController,
        IndexController,
        MetaController,
        HealthController,
        MetricsController,
        ConnectorSettingsController,
        PolicyController,
        ChangesController,
        WebhooksController,
      ],
      providers: [
        ApiKeyService,
        ExecutionsService,
        OperationsService,
        ResolutionOptionsService,
        ReviewService,
        ConnectorSettingsService,
        PolicyService,
        ChangesService,
        WebhooksService,
        WebhookDeliveriesService,
        EventNotifier,
        StreamService,
        RouteMethods,
        AnswerBytes,
        { provide: APP_GUARD, useClass: AuthGuard },
        // Right after the key is checked, before anything reads the request: a refusal carries nothing out.
        { provide: APP_GUARD, useClass: V1InFlight },
        // After the key is checked (global guards run in this order); a guard, not an interceptor: an interceptor
        // wraps every handler in an rxjs pipeline, a cost on every request the check does not need.
        { provide: APP_GUARD, useClass: RefuseUnreadQuery },
        { provide: APP_GUARD, useClass: RefuseUnreadBody },
        { provide: APP_GUARD, useClass: RefuseUnmatchableIfMatch },
        // First: a counted request's place is held while its handler (and what the interceptors after it do) is at work.
        { provide: APP_INTERCEPTOR, useClass: V1InFlightWork },
        // An interceptor: it maps what each handler answers (a guard runs before there is an answer).
        { provide: APP_INTERCEPTOR, useClass: RedactSecretValues },
        { provide: APP_FILTER, useClass: ProblemFilter },
      ],
    };
  }
}
