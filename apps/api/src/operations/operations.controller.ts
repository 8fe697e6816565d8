import { Body, Controller, Get, HttpCode, Param, Post, Req, Res } from '@nestjs/common';
import { ApiBearerAuth, ApiTags } from '@nestjs/swagger';
import type { Request, Response } from 'express';
import type { z } from 'zod';
import { CurrentPrincipal, Principal, ReviewerDecision, Roles } from '../auth/principal';
import { findOperation } from '@verity/persistence';
import {
  ActsOn,
  TakesIfMatch,
  VERSION_ETAG,
  answerRead,
  answerWrite,
  ifMatchOf,
  ifNoneMatchOf,
} from '../http/if-match';
import { JsonBody, refuseBody } from '../http/parse';
import { APPROVAL_EXAMPLE, OPERATION_DETAIL_EXAMPLE, RESOLVE_EXAMPLE } from '../openapi-examples';
import { ApiEndpoint } from '../openapi';
import { MAX_INVESTIGATION_BYTES_PER_HOLD, MAX_INVESTIGATIONS_PER_HOLD, OperationStatus } from '@verity/status-model';
import { ApprovalBody, ResolveBody } from '../schemas';
import { OperationsService } from './operations.service';

const ID = { name: 'id', description: 'operation id (op_…)' };

@ApiTags('operations')
@ApiBearerAuth()
@Controller('v1/operations')
export class OperationsController {
  constructor(private readonly operations: OperationsService) {}

  @Get(':id')
  @ApiEndpoint({
    id: 'getOperation',
    summary: 'One operation with evidence, retry rule and recovery obligation',
    description:
      'The ETag is the version a person decides on: it changes whenever the status, the hold and its reason, the ' +
      'attempt, the approval, the recovery obligation (its resolution, investigations, a re-check that showed the ' +
      'effect) or the evidence change, and when a FAILED up its chain of retries is contradicted. Send it as `If-Match` with an approval decision, a resolution or a re-check: ' +
      'it is then made only on the operation as it was shown (412 `precondition-failed` otherwise, nothing written). ' +
      'It is not a cache validator: what is shown also changes with time alone (resolution options), so the answer ' +
      'is never `304` and is sent with `Cache-Control: no-store, no-transform` (no intermediary re-encodes it and ' +
      'weakens its ETag).',
    params: [ID],
    response: {
      schema: 'OperationDetail',
      example: { summary: 'The charge, VERIFIED with its read-back', value: OPERATION_DETAIL_EXAMPLE },
      headers: VERSION_ETAG,
    },
  })
  async get(
    @CurrentPrincipal() principal: Principal,
    @Param('id') id: string,
    @Req() req: Request,
    @Res({ passthrough: true }) res: Response,
  ) {
    // The ETag names the version a person decides on, not this representation: what it shows also changes with time
    // alone (a FAILED becomes permitted once no call can still land), the version does not (answerVersioned).
    return answerRead(req, res, this.operations.get(principal, id));
  }

  @Post(':id/approval')
  @HttpCode(200)
  @ReviewerDecision()
  @ApiEndpoint({
    id: 'decideApproval',
    summary: 'Approve or deny an operation that needs approval (reviewer)',
    params: [ID],
    body: { schema: 'ApprovalRequest', example: { summary: 'Approve', value: APPROVAL_EXAMPLE } },
    response: { description: 'The operation after the decision', schema: 'OperationDetail', headers: VERSION_ETAG },
    problems: [
      'validation-error',
      'already-decided',
      'not-awaiting-approval',
      'operation-moved',
      'precondition-failed',
    ],
  })
  @TakesIfMatch()
  async approval(
    @CurrentPrincipal() principal: Principal,
    @Param('id') id: string,
    @Req() req: Request,
    @Res({ passthrough: true }) res: Response,
    @JsonBody(ApprovalBody) input: z.infer<typeof ApprovalBody>,
  ) {
    return this.decided(principal, id, req, res, (ifMatch, ifNoneMatch) =>
      this.operations.decide(principal, id, input.decision, input.reason, input.requested_at, ifMatch, ifNoneMatch),
    );
  }

  @Post(':id/resolve')
  @HttpCode(200)
  @ReviewerDecision()
  @ApiEndpoint({
    id: 'resolveOperation',
    summary: 'Resolve a MANUAL_REVIEW operation with evidence (reviewer)',
    description:
      'VERIFIED / FAILED / SENT / CANCELLED end the hold. MANUAL_REVIEW records "still unknown after investigation": ' +
      'the operation stays held, its obligation is re-dated (`due_in_seconds`, default the tenant policy) and the ' +
      'history shows it (`operation.still_unknown`); a later resolution is still possible. A hold keeps at most ' +
      `${MAX_INVESTIGATIONS_PER_HOLD} such records and ${MAX_INVESTIGATION_BYTES_PER_HOLD / 1024} KiB (UTF-8) of ` +
      'their evidence together: one past either is 409 `resolution-not-permitted` ' +
      '(`investigations`, and `investigation_bytes` with `investigation_bytes_limit`), nothing written.',
    params: [ID],
    body: { schema: 'ResolveRequest', example: { summary: 'Found at the provider', value: RESOLVE_EXAMPLE } },
    response: { description: 'The operation after the resolution', schema: 'OperationDetail', headers: VERSION_ETAG },
    problems: [
      'validation-error',
      'resolution-not-permitted',
      'effect-exists',
      'already-decided',
      'operation-moved',
      'precondition-failed',
    ],
  })
  @TakesIfMatch()
  async resolve(
    @CurrentPrincipal() principal: Principal,
    @Param('id') id: string,
    @Req() req: Request,
    @Res({ passthrough: true }) res: Response,
    @JsonBody(ResolveBody) input: z.infer<typeof ResolveBody>,
  ) {
    return this.decided(principal, id, req, res, (ifMatch, ifNoneMatch) =>
      input.status === OperationStatus.MANUAL_REVIEW
        ? this.operations.stillUnknown(principal, id, input.evidence, input.due_in_seconds, ifMatch, ifNoneMatch)
        : this.operations.resolve(principal, id, input.status, input.evidence, ifMatch, ifNoneMatch),
    );
  }

  @Post(':id/recheck')
  @HttpCode(202)
  @Roles('reviewer')
  @ApiEndpoint({
    id: 'recheckOperation',
    summary: 'Read the source of a MANUAL_REVIEW operation now (reviewer)',
    description:
      'Asks the reconciler to read the effect back now (never a send). A hold for SOURCE_UNREACHABLE or ' +
      'STALE_REPLICA whose effect is found is released to VERIFIED; any other result stays held and is recorded ' +
      'as an `operation.rechecked` event. 409 `not-in-review` if the operation is not held, `cannot-read-back` if ' +
      'it was never sent or its connector cannot read it back. Takes no body.',
    params: [ID],
    response: { status: 202, description: 'The re-check is queued', schema: 'OperationDetail', headers: VERSION_ETAG },
    problems: [
      'validation-error',
      'not-in-review',
      'cannot-read-back',
      'already-decided',
      'precondition-failed',
      'queue-unavailable',
    ],
  })
  @TakesIfMatch()
  async recheck(
    @CurrentPrincipal() principal: Principal,
    @Param('id') id: string,
    @Req() req: Request,
    @Res({ passthrough: true }) res: Response,
    @Body() body: unknown,
  ) {
    refuseBody(req, body, 'recheck');
    return this.decided(principal, id, req, res, (ifMatch, ifNoneMatch) =>
      this.operations.recheck(principal, id, ifMatch, ifNoneMatch),
    );
  }

  @Post(':id/retry')
  @HttpCode(201)
  @Roles('agent')
  @ApiEndpoint({
    id: 'retryOperation',
    summary: 'Retry a FAILED or CANCELLED operation',
    description:
      'Creates a new operation (`retry_of` = this one) in a new execution; the original history stays as it ' +
      'happened. Any other status answers 409 naming its retry rule (`forbidden` for UNKNOWN: a blind re-send ' +
      'could charge twice). A FAILED operation whose source showed the effect after it was resolved (a re-check ' +
      'recorded with `after: "FAILED"`) answers 409 effect-exists with that read: a retry could make it twice. ' +
      'An amount the tenant’s spending cap cannot count now (not a positive number of its places, or another ' +
      'currency) answers 400 naming `params.<field>`, as a submission of it would; so do params, an expected state, ' +
      'an intent, an agent id or a key holding the value of one of the tenant’s secrets (set since they were ' +
      'accepted): 400 `secret_value` naming the field; and params naming a secret its host’s allowlist entry does ' +
      'not bind now: 400 `secret_not_bound`; a read-back the tenant’s `read_back_binding: "bound"` does not count ' +
      'now: 400 `read_back_unbound`. Nothing is written. ' +
      'Takes no body.',
    params: [ID],
    response: {
      status: 201,
      description: 'The new operation and its new execution',
      schema: 'RetryResult',
      headers: { Location: { description: 'the new operation’s URL', required: true, schema: { type: 'string' } } },
    },
    problems: [
      'validation-error',
      'retry-not-allowed',
      'already-retried',
      'denial-limit-reached',
      'effect-exists',
      'reference-unsettled',
    ],
  })
  @ActsOn(async (db, principal, { id }) => (await findOperation(db.manager, id, principal.tenantId)) !== null)
  async retry(
    @CurrentPrincipal() principal: Principal,
    @Param('id') id: string,
    @Req() req: Request,
    @Res({ passthrough: true }) res: Response,
    @Body() body: unknown,
  ) {
    refuseBody(req, body, 'retry');
    const result = await this.operations.retry(principal, id);
    res.setHeader('location', `/v1/operations/${result.operation.id}`);
    res.locals.executionId = result.execution.id;
    return result;
  }

  /**
   * A reviewer's request on a held or waiting operation (a decision, a re-check), made on the versions the request
   * names: If-Match as sent, If-None-Match refused at once (412) where it is `*` or names the operation's current
   * version; answered with the operation after it, its new version the ETag.
   */
  private async decided<T>(
    principal: Principal,
    id: string,
    req: Request,
    res: Response,
    decide: (ifMatch?: string[], ifNoneMatch?: readonly string[]) => Promise<{ view: T; version: string }>,
  ): Promise<T> {
    const ifMatch = ifMatchOf(req);
    const ifNoneMatch = await this.operations.refuseNoneMatch(principal, id, ifNoneMatchOf(req));
    return answerWrite(res, decide(ifMatch, ifNoneMatch));
  }
}
