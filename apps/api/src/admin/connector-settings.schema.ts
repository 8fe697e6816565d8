import { z } from 'zod';
import { amountReadingView } from './amount-reading.schema';

/** One connector's settings for a tenant, as the admin endpoints answer them: secret names, never their values. */
export const ConnectorSettingsView = z
  .object({
    connector: z.string(),
    allow_hosts: z.array(
      z.object({
        host: z.string(),
        ports: z.array(z.number()).optional(),
        allow_private: z.boolean().optional(),
        secrets: z
          .array(z.string())
          .optional()
          .describe(
            'the secrets that may be sent to this host (in header values), ["*"] for every one; absent: none (an operation naming another is refused: secret_not_bound)',
          ),
      }),
    ),
    spending_caps: z.array(
      z.object({
        period: z.enum(['hour', 'day', 'week', 'month']),
        max_operations: z.number().optional(),
        max_amount: z.number().positive().optional(),
        amount_decimals: z
          .number()
          .int()
          .optional()
          .describe('at most this many decimal places in an amount; absent: any'),
        ...amountReadingView('the currency of max_amount; absent: amounts of any currency are summed as one unit'),
      }),
    ),
    read_back_binding: z
      .enum(['declared', 'bound'])
      .describe(
        'http: which declared read-backs count ("bound": only one that asks the request\'s own origin and names this effect); "declared" for the others',
      ),
    secrets: z.array(z.string()).describe('names only; values are write-only'),
    usage: z.array(
      z.object({ period: z.string(), since: z.string(), operations: z.number(), amount: z.number().nullable() }),
    ),
    updated_at: z.string().nullable(),
    updated_by: z.string().nullable(),
  })
  .meta({ id: 'ConnectorSettings' });
export type ConnectorSettingsViewOf = z.infer<typeof ConnectorSettingsView>;
