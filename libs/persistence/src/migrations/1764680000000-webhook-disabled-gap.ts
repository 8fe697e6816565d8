import { sqlMigration } from './sql-migration';

/**
 * `webhook_endpoints.last_disabled_at` and `reenabled_at`: the time an endpoint was last disabled and the time an admin
 * enabled it again (both null until then). The outbox may reach an event late — a slow pass, a long transaction holding
 * it back — and then judged it by the endpoint as it is at the pass: an event of the disabled time scanned after the
 * enable was delivered, though enabling sends only events from then on. Now an event in that gap is owed nothing
 * (webhookOwedTo, libs/status-model). Endpoints enabled before this migration have no gap on record.
 */
export class WebhookDisabledGap1764680000000 extends sqlMigration('WebhookDisabledGap1764680000000', {
  up: [`ALTER TABLE webhook_endpoints ADD COLUMN last_disabled_at timestamptz, ADD COLUMN reenabled_at timestamptz`],
  down: [`ALTER TABLE webhook_endpoints DROP COLUMN last_disabled_at, DROP COLUMN reenabled_at`],
}) {}
