import {
  urlDotSegmentProblem,
  urlFragmentProblem,
  urlHiddenCharacterProblem,
  urlSpellingProblem,
} from '@verity/connectors';
import { WEBHOOK_DELIVERY_STATUSES, WEBHOOK_EVENT_TYPES } from '@verity/status-model';
import { z } from 'zod';
import { cursorPageQuery } from '../http/parse';

/** The event types an endpoint subscribes to, and a delivery's type. */
const WebhookEventType = z.enum(WEBHOOK_EVENT_TYPES).meta({ id: 'WebhookEventType' });

/** POST /v1/admin/webhooks. The URL is checked against the tenant's http allowlist and the SSRF rules as well. */
export const WebhookInputSchema = z.strictObject({
  url: z
    .string()
    .min(1)
    .max(2048)
    .superRefine((url, ctx) => {
      // An operator reads the URL to know where the tenant's events go: nothing in it may hide or reorder what is shown.
      const problem =
        urlSpellingProblem(url) ??
        urlFragmentProblem(url) ??
        urlDotSegmentProblem(url) ??
        urlHiddenCharacterProblem(url);
      if (problem) ctx.addIssue({ code: 'custom', message: problem, params: { rule: 'invalid_format' } });
    })
    .describe('http(s) URL; its host must be on the tenant’s http connector allowlist'),
  events: z
    .array(WebhookEventType)
    .min(1)
    .max(WEBHOOK_EVENT_TYPES.length)
    .refine((events) => new Set(events).size === events.length, {
      message: 'each event type once',
      params: { rule: 'unique' },
    }),
});
export type WebhookInput = z.infer<typeof WebhookInputSchema>;

export const DeliveriesQuery = z.strictObject({
  ...cursorPageQuery('msg'),
});

export const WebhookView = z
  .object({
    id: z.string(),
    url: z.string(),
    events: z.array(WebhookEventType),
    disabled: z.boolean(),
    disabled_reason: z.string().nullable(),
    disabled_at: z.string().nullable(),
    consecutive_failures: z.number(),
    created_at: z.string(),
  })
  .meta({ id: 'WebhookEndpoint' });

export const WebhookCreatedView = WebhookView.extend({
  secret: z.string().describe('whsec_…: shown once, in this answer only; verify every delivery’s signature with it'),
}).meta({ id: 'WebhookEndpointCreated' });

export const DeliveryView = z
  .object({
    id: z.string().describe('also the webhook-id header: the same for every attempt and redelivery of this message'),
    type: WebhookEventType,
    event_id: z.string().nullable(),
    status: z.enum(WEBHOOK_DELIVERY_STATUSES),
    attempts: z.number(),
    redeliveries: z.number(),
    last_attempt_at: z.string().nullable(),
    last_response_status: z.number().nullable(),
    last_error: z.string().nullable(),
    delivered_at: z.string().nullable(),
    created_at: z.string(),
    payload: z.object({ type: z.string(), timestamp: z.string(), data: z.record(z.string(), z.unknown()) }),
  })
  .meta({ id: 'WebhookDelivery' });
