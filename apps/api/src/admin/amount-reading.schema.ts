import { z } from 'zod';

/**
 * Where a spending cap or an approval rule reads an operation's amount and currency (dot paths into its params), and
 * the currency its threshold is in: as the admin views show them. `currency` says what its absence means for the one.
 */
export function amountReadingView(currency: string) {
  return {
    amount_field: z.string().optional(),
    currency: z.string().optional().describe(currency),
    currency_field: z.string().optional(),
  };
}
