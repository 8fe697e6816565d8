import { CallHandler, ExecutionContext, Injectable, NestInterceptor } from '@nestjs/common';
import { type SecretsMoment, TenantConnectors } from '@verity/connectors';
import type { Request } from 'express';
import { Observable, catchError, mergeMap } from 'rxjs';
import type { AnyPrincipal } from '../auth/principal';
import { Problem } from '../problem/problem';

/**
 * Secret values are never returned: every answer a handler gives a tenant's key is sent with the tenant's secret values
 * of now replaced by `{{secret:NAME}}` in its strings (TenantConnectors.answerRedactorOf: the tenant's secrets, read
 * once and kept by this process while every change of them reaches it by NOTIFY — no read per answer). Intake refuses text that holds a secret's value, but text written before the tenant made that
 * value a secret (an operation's params, an intent, a reason in an event, a webhook URL, the policy's texts) is stored
 * as it was written, and is read back through here: the execution and operation reads, event pages, the console's and
 * the MCP tools' reads (which call these routes), the admin reads — and the problems they answer, whose members can
 * show what is on file (a rejection, a read-back's evidence). Only string values are rewritten, never member names or
 * numbers: an answer keeps its shape whatever a secret's value is. The event stream, which writes its own answer,
 * redacts each page the same way (StreamService).
 */
@Injectable()
export class RedactSecretValues implements NestInterceptor {
  constructor(private readonly connectors: TenantConnectors) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const tenantId = context.switchToHttp().getRequest<Request & { principal?: AnyPrincipal }>().principal?.tenantId;
    // No tenant (a public route, the operator's key): nothing of a tenant to redact.
    if (!tenantId) return next.handle();
    // When the request arrived: every change of the tenant's secrets committed before it is honoured by its answer, and
    // confirmed once for the request (a check of its text against the secrets, made while it ran, may have done so).
    const since = this.connectors.secretsMoment();
    return next.handle().pipe(
      mergeMap(async (answer: unknown) => {
        // A handler that wrote its own answer (`@Res()`) hands on nothing.
        if (answer === undefined || answer === null) return answer;
        return (await this.connectors.answerRedactorOf(tenantId, since))(answer);
      }),
      catchError(async (error: unknown) => {
        throw await this.redactedProblem(tenantId, since, error);
      }),
    );
  }

  /** `error`, a problem with its detail and members redacted; any other error is mapped to one later, as it is. */
  private async redactedProblem(tenantId: string, since: SecretsMoment, error: unknown): Promise<unknown> {
    if (!(error instanceof Problem)) return error;
    let redact;
    try {
      redact = await this.connectors.answerRedactorOf(tenantId, since);
    } catch (readError) {
      // An outage's answer (5xx) names nothing on file: it is given. Any other is not given unredacted: the read's
      // failure is answered instead (503 when the database is away).
      return error.status >= 500 ? error : readError;
    }
    const detail = redact(error.detail);
    const extras = redact(error.extras);
    if (detail === error.detail && JSON.stringify(extras) === JSON.stringify(error.extras)) return error;
    // A copy with everything else kept (its class, status, headers, cause, stack).
    const copy = Object.create(
      Object.getPrototypeOf(error) as object,
      Object.getOwnPropertyDescriptors(error),
    ) as Problem;
    return Object.defineProperties(copy, {
      detail: { value: detail },
      extras: { value: extras },
      message: { value: redact(error.message) },
    });
  }
}
