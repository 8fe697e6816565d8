import { sqlMigration } from './sql-migration';

/**
 * I8: each claim of an Idempotency-Key carries a token, and intake writes the execution only while its claim still
 * holds that token. A claim abandoned for a minute can be taken over by a retry; without the token, the first
 * request, if it was only slow, could still complete and create a second execution for the same key.
 */
export class IdempotencyClaimToken1764470100000 extends sqlMigration('IdempotencyClaimToken1764470100000', {
  up: [`ALTER TABLE idempotency_keys ADD COLUMN claim_token text`],
  down: [`ALTER TABLE idempotency_keys DROP COLUMN claim_token`],
}) {}
