import { Get, Put, Req, Res } from '@nestjs/common';
import type { Request, Response } from 'express';
import { CurrentPrincipal, Principal } from '../auth/principal';
import { TakesIfMatch, VERSION_ETAG, answerRead, answerWrite, versionConditionOf } from '../http/if-match';
import { JsonBody } from '../http/parse';
import { POLICY_EXAMPLE } from '../openapi-examples';
import { ApiEndpoint } from '../openapi';
import { AdminController } from './admin-controller';
import { PolicyInput, PolicyInputSchema, PolicyView } from './policy.schema';
import { PolicyService } from './policy.service';

/** The tenant's policy (admin role): obligation owner, escalation target, due times per hold reason, approval rules. */
@AdminController('policy')
export class PolicyController {
  constructor(private readonly policy: PolicyService) {}

  @Get()
  @ApiEndpoint({
    id: 'getPolicy',
    summary: 'The policy in force for this tenant (its values, and the defaults where it set none)',
    response: { schema: PolicyView, headers: VERSION_ETAG },
    problems: ['not-found'],
  })
  async get(@CurrentPrincipal() principal: Principal, @Req() req: Request, @Res({ passthrough: true }) res: Response) {
    // The defaults shown (OBLIGATION_DUE_MS, the connectors' amount declarations) are no part of the version.
    return answerRead(req, res, this.policy.get(principal));
  }

  @Put()
  @ApiEndpoint({
    id: 'setPolicy',
    summary: 'Set the tenant policy',
    description:
      'Each field given replaces that setting, a field left out is kept, null resets it to the default; a body ' +
      'that names no field is refused (400, rule `no_change`). ' +
      'Applies to obligations created and approvals planned from now on. With `If-Match` (the ETag of a GET), the ' +
      'change is made only if the policy is still that version (412 `precondition-failed` otherwise, nothing ' +
      'written): two admins editing at once cannot undo each other without a word.',
    body: {
      schema: PolicyInputSchema,
      example: { summary: 'Owner, escalation, due times, a rule', value: POLICY_EXAMPLE },
    },
    response: { schema: PolicyView, headers: VERSION_ETAG },
    problems: ['validation-error', 'not-found', 'precondition-failed'],
  })
  @TakesIfMatch()
  async put(
    @CurrentPrincipal() principal: Principal,
    @Req() req: Request,
    @Res({ passthrough: true }) res: Response,
    @JsonBody(PolicyInputSchema) input: PolicyInput,
  ) {
    return answerWrite(res, this.policy.put(principal, input, versionConditionOf(req)));
  }
}
