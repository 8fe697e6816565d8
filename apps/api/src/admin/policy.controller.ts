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
    summary: 'The policy of this tenant: its values, and under `effective` the due times in force',
    description:
      '`obligation_due_seconds` holds only the due times the tenant set (null: none); ' +
      '`effective.obligation_due_seconds` the ones in force, with `default` from OBLIGATION_DUE_MS where it set none. ' +
      'Sent back as a PUT, leave out the read-only `effective`, `updated_at` and `updated_by` (400 `unknown_field`).',
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
      'that names no field is refused (400, rule `no_change`), as are the read-only members of a GET (`effective`, ' +
      '`updated_at`, `updated_by`: 400 `unknown_field`). A value that is what applies where none is set ' +
      '(`operations`, `on-call`, `[]` rules, `{}` due times) is stored as none, so a GET sent back keeps its ETag. ' +
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
