import { ADMIN_CHANGE_KINDS } from '@verity/persistence';
import { z } from 'zod';
import { cursorPageQuery } from '../http/parse';

/** GET /v1/admin/changes: newest first, `cursor` the `next_cursor` of the page before; optional filters. */
export const ChangesQuery = z
  .strictObject({
    kind: z.enum(ADMIN_CHANGE_KINDS).optional(),
    connector: z
      .string()
      .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/, 'a connector name, e.g. http or sandbox.payments')
      .optional(),
    ...cursorPageQuery('chg'),
  })
  // Policy and webhook changes are recorded without a connector (approval rules name connectors, but the change is the
  // tenant's policy): asked for with one, the list was always empty, which read as "never changed".
  .refine((query) => query.connector === undefined || query.kind === undefined || query.kind === 'connector_settings', {
    message:
      'only connector_settings changes name a connector: leave out connector, or ask for kind=connector_settings',
    path: ['connector'],
    params: { rule: 'only_with_connector_settings' },
  });
export type ChangesQueryOf = z.infer<typeof ChangesQuery>;

const PolicySettings = z
  .object({
    obligation_owner: z.string().nullable(),
    escalation_target: z.string().nullable(),
    obligation_due_seconds: z.record(z.string(), z.number()).nullable(),
    approval_rules: z.array(z.record(z.string(), z.unknown())).nullable(),
    approval_amount_above: z.number().nullable().describe('the older single threshold (before approval rules)'),
  })
  .describe('the policy as the tenant had set it; null: not set (the default applied)')
  .meta({ id: 'PolicySnapshot' });

const ConnectorSettings = z
  .object({
    allow_hosts: z.array(z.record(z.string(), z.unknown())),
    spending_caps: z.array(z.record(z.string(), z.unknown())),
    read_back_binding: z
      .enum(['declared', 'bound'])
      .optional()
      .describe('absent in changes recorded before the setting existed (they were all "declared")'),
    secrets: z.array(z.string()).describe('the names of the secrets set; a secret value is never recorded'),
    secrets_written_at: z
      .record(z.string(), z.string())
      .optional()
      .describe(
        'by name, when each secret set was last written (UTC): a rotation keeps the names and moves this; never anything of a value. Absent in changes recorded before 2026-12-04',
      ),
  })
  .describe(
    'the connector’s settings as stored: allowlist, spending caps, read-back binding, secret names and when each was written',
  )
  .meta({ id: 'ConnectorSettingsSnapshot' });

const WebhookEndpoint = z
  .object({
    id: z.string(),
    url: z.string(),
    events: z.array(z.string()).describe('the event types it was subscribed to'),
    disabled: z.boolean(),
    disabled_reason: z.string().nullable(),
  })
  .describe('the endpoint as `GET /v1/admin/webhooks/{id}` shows its configuration; never its signing secret')
  .meta({ id: 'WebhookEndpointSnapshot' });

const ChangeBase = {
  id: z.string().describe('chg_…; also the cursor of the next page'),
  by: z.string().describe('the id of the API key that made the change'),
  at: z.string().describe('when the change was made (the database’s clock)'),
};

/** A change of a kind of settings: before and after it, the whole settings as stored. */
function settingsChange<K extends string, S extends z.ZodType>(kind: K, connector: string, settings: S) {
  return z.object({
    ...ChangeBase,
    kind: z.enum([kind]),
    connector: z.string().nullable().describe(connector),
    before: settings,
    after: settings,
  });
}

const PolicyChange = settingsChange('policy', 'null for the policy', PolicySettings);

const ConnectorSettingsChange = settingsChange(
  'connector_settings',
  'the connector whose settings changed',
  ConnectorSettings,
);

const WebhookEndpointChange = z.object({
  ...ChangeBase,
  kind: z.enum(['webhook_endpoint']),
  connector: z.string().nullable().describe('null: an endpoint is no connector’s'),
  endpoint_id: z.string().describe('whk_…: the endpoint created, enabled or deleted'),
  before: WebhookEndpoint.nullable().describe('null: a create (there was no endpoint)'),
  after: WebhookEndpoint.nullable().describe('null: a delete'),
});

export const ChangeView = z.union([PolicyChange, ConnectorSettingsChange, WebhookEndpointChange]);
export type ChangeViewOf = z.infer<typeof ChangeView>;

export const ChangeList = z.object({ data: z.array(ChangeView), next_cursor: z.string().nullable() });
export type ChangeListOf = z.infer<typeof ChangeList>;
