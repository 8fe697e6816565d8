import { CallHandler, ExecutionContext, Injectable, NestInterceptor } from '@nestjs/common';
import { TenantConnectors } from '@verity/connectors';
import type { Request } from 'express';
import { Observable, mergeMap } from 'rxjs';
import type { AnyPrincipal } from '../auth/principal';

/**
 * Secret values are never returned: every answer a handler gives a tenant's key is sent with the tenant's secret values
 * of now replaced by `{{secret:NAME}}` in its strings (TenantConnectors.answerRedactorOf, one read of the tenant's
 * secrets per answer). Intake refuses text that holds a secret's value, but text written before the tenant made that
 * value a secret (an operation's params, an intent, a reason in an event, a webhook URL, the policy's texts) is stored
 * as it was written, and is read back through here: the execution and operation reads, event pages, the console's and
 * the MCP tools' reads (which call these routes), the admin reads. Only string values are rewritten, never member
 * names or numbers: an answer keeps its shape whatever a secret's value is. The event stream, which writes its own
 * answer, redacts each page the same way (StreamService).
 */
@Injectable()
export class RedactSecretValues implements NestInterceptor {
  constructor(private readonly connectors: TenantConnectors) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const tenantId = context.switchToHttp().getRequest<Request & { principal?: AnyPrincipal }>().principal?.tenantId;
    // No tenant (a public route, the operator's key): nothing of a tenant to redact.
    if (!tenantId) return next.handle();
    return next.handle().pipe(
      mergeMap(async (answer: unknown) => {
        // A handler that wrote its own answer (`@Res()`) hands on nothing.
        if (answer === undefined || answer === null) return answer;
        return (await this.connectors.answerRedactorOf(tenantId))(answer);
      }),
    );
  }
}
