import { ADMIN_CHANGES_SQL } from './admin-changes';
import { API_KEY_SQL } from './api-keys';
import { CHECKS_SQL } from './checks.repository';
import { CONNECTOR_SETTINGS_SQL } from './connector-settings.repository';
import { MIGRATION_SQL } from './data-source';
import { CONNECTOR_SPEND_SQL } from './entities/connector-settings.entity';
import { IDEMPOTENCY_SQL } from './idempotency';
import { MAINTENANCE_SQL } from './maintenance';
import { METRICS_SQL } from './metrics.repository';
import { RECHECK_REQUEST_SQL } from './recheck-requests';
import { REVIEW_QUEUE_SQL } from './review-queue.repository';
import { PING_SQL, READ_SNAPSHOT_SQL } from './sql';
import { INTAKE_SQL, READ_SQL, SEND_NOTE_SQL } from './store';
import { SWEEP_SQL } from './sweep.repository';
import { TENANT_POLICY_SQL } from './tenant-policy';
import { WEBHOOKS_SQL } from './webhooks';

/**
 * Every fixed statement of libs/persistence by repository, as written to `libs/persistence/queries/<name>.sql` by
 * queries.spec.ts (with the statements the transition service and the send guard assemble per call): a change of SQL
 * shows up in review as SQL. A new repository's statements are added here.
 */
export const NAMED_STATEMENTS: Readonly<Record<string, Readonly<Record<string, string>>>> = {
  'admin-changes': ADMIN_CHANGES_SQL,
  'api-keys': API_KEY_SQL,
  checks: CHECKS_SQL,
  'connector-settings': CONNECTOR_SETTINGS_SQL,
  'connector-spend': CONNECTOR_SPEND_SQL,
  idempotency: IDEMPOTENCY_SQL,
  intake: INTAKE_SQL,
  maintenance: MAINTENANCE_SQL,
  metrics: METRICS_SQL,
  migrations: MIGRATION_SQL,
  readiness: { ping: PING_SQL },
  'recheck-requests': RECHECK_REQUEST_SQL,
  reads: READ_SQL,
  'read-snapshot': READ_SNAPSHOT_SQL,
  'review-queue': REVIEW_QUEUE_SQL,
  'send-notes': SEND_NOTE_SQL,
  sweep: SWEEP_SQL,
  'tenant-policy': TENANT_POLICY_SQL,
  webhooks: WEBHOOKS_SQL,
};
