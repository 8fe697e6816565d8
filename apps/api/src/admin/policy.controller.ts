import { Get, Put } from '@nestjs/common';
import { CurrentPrincipal, Principal } from '../auth/principal';
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
    response: { schema: PolicyView },
    problems: ['not-found'],
  })
  get(@CurrentPrincipal() principal: Principal) {
    return this.policy.get(principal);
  }

  @Put()
  @ApiEndpoint({
    id: 'setPolicy',
    summary: 'Set the tenant policy',
    description:
      'Each field given replaces that setting, a field left out is kept, null resets it to the default; a body ' +
      'that names no field is refused (400, rule `no_change`). ' +
      'Applies to obligations created and approvals planned from now on.',
    body: {
      schema: PolicyInputSchema,
      example: { summary: 'Owner, escalation, due times, a rule', value: POLICY_EXAMPLE },
    },
    response: { schema: PolicyView },
    problems: ['validation-error', 'not-found'],
  })
  put(@CurrentPrincipal() principal: Principal, @JsonBody(PolicyInputSchema) input: PolicyInput) {
    return this.policy.put(principal, input);
  }
}
