-- lockTenantEndpoints
SELECT pg_advisory_xact_lock(hashtextextended('webhook_endpoints' || chr(31) || $1, 0));

-- createEndpoint
WITH room AS (
       SELECT (SELECT count(*) FROM webhook_endpoints WHERE tenant_id = $2) < $7 AS yes
     ), claim AS (
       INSERT INTO idempotency_keys (tenant_id, route, key, request_hash, state, webhook_endpoint_id, expires_at)
       SELECT $2, 'webhooks', $9, $10, 'completed', $1, now() + make_interval(secs => $11 / 1000.0)
       WHERE $9::text IS NOT NULL AND (SELECT yes FROM room)
       ON CONFLICT (tenant_id, route, key) DO UPDATE
         SET request_hash = EXCLUDED.request_hash, state = 'completed', execution_id = NULL,
             webhook_endpoint_id = EXCLUDED.webhook_endpoint_id, created_at = now(), expires_at = EXCLUDED.expires_at,
             claim_token = NULL
         WHERE idempotency_keys.expires_at < now()
       RETURNING key
     ), created AS (
       INSERT INTO webhook_endpoints (id, tenant_id, url, events, secret, created_by)
       SELECT $1, $2, $3, $4, $5, $6
       WHERE (SELECT yes FROM room) AND ($9::text IS NULL OR EXISTS (SELECT 1 FROM claim))
       RETURNING id, tenant_id, url, events, disabled_at, disabled_reason, consecutive_failures, created_by,
  created_at, updated_at
     ), recorded AS (
       INSERT INTO admin_changes (id, tenant_id, kind, connector, changed_by, before, after)
       SELECT $8, $2, 'webhook_endpoint', NULL, $6, NULL, jsonb_build_object('id', created.id, 'url', created.url, 'events', to_jsonb(created.events),
       'disabled', created.disabled_at IS NOT NULL, 'disabled_reason', created.disabled_reason) FROM created
     )
     SELECT id, tenant_id, url, events, disabled_at, disabled_reason, consecutive_failures, created_by,
  created_at, updated_at FROM created;

-- listEndpoints
SELECT id, tenant_id, url, events, disabled_at, disabled_reason, consecutive_failures, created_by,
  created_at, updated_at FROM webhook_endpoints WHERE tenant_id = $1 ORDER BY created_at, id;

-- findEndpoint
SELECT id, tenant_id, url, events, disabled_at, disabled_reason, consecutive_failures, created_by,
  created_at, updated_at FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2;

-- endpointSecret
SELECT secret FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2;

-- lockEndpointDeliveries
SELECT 1 FROM webhook_deliveries WHERE endpoint_id = $2 AND tenant_id = $1 ORDER BY id FOR UPDATE;

-- deleteEndpoint
WITH deleted AS (
       DELETE FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2 RETURNING id, tenant_id, url, events, disabled_at, disabled_reason, consecutive_failures, created_by,
  created_at, updated_at
     ), recorded AS (
       INSERT INTO admin_changes (id, tenant_id, kind, connector, changed_by, before, after)
       SELECT $3, $1, 'webhook_endpoint', NULL, $4, jsonb_build_object('id', deleted.id, 'url', deleted.url, 'events', to_jsonb(deleted.events),
       'disabled', deleted.disabled_at IS NOT NULL, 'disabled_reason', deleted.disabled_reason), NULL FROM deleted
     )
     SELECT id FROM deleted;

-- lockEndpoint
SELECT jsonb_build_object('id', w.id, 'url', w.url, 'events', to_jsonb(w.events),
       'disabled', w.disabled_at IS NOT NULL, 'disabled_reason', w.disabled_reason)::text AS before FROM webhook_endpoints w
     WHERE w.tenant_id = $1 AND w.id = $2 FOR NO KEY UPDATE;

-- enableEndpoint
WITH changed AS (
       UPDATE webhook_endpoints w
       SET disabled_at = NULL, disabled_reason = NULL, consecutive_failures = 0, updated_at = now(),
           last_disabled_at = coalesce(w.disabled_at, w.last_disabled_at),
           reenabled_at = CASE WHEN w.disabled_at IS NOT NULL THEN now() ELSE w.reenabled_at END
       WHERE w.tenant_id = $1 AND w.id = $2
       RETURNING w.id, w.tenant_id, w.url, w.events, w.disabled_at, w.disabled_reason, w.consecutive_failures, w.created_by, w.created_at, w.updated_at, jsonb_build_object('id', w.id, 'url', w.url, 'events', to_jsonb(w.events),
       'disabled', w.disabled_at IS NOT NULL, 'disabled_reason', w.disabled_reason) AS after
     ), recorded AS (
       INSERT INTO admin_changes (id, tenant_id, kind, connector, changed_by, before, after)
       SELECT $3, $1, 'webhook_endpoint', NULL, $4, $5::jsonb, after FROM changed
     )
     SELECT id, tenant_id, url, events, disabled_at, disabled_reason, consecutive_failures, created_by,
  created_at, updated_at FROM changed;

-- listDeliveries
SELECT id, endpoint_id, event_id, type, payload, status, round, attempts, last_attempt_at,
  last_response_status, last_error, delivered_at, created_at FROM webhook_deliveries
     WHERE tenant_id = $1 AND endpoint_id = $2 AND ($3::text IS NULL OR id < $3)
     ORDER BY id DESC LIMIT $4;

-- deliveriesPage
SELECT c.* FROM (
       SELECT r.*, row_number() OVER w AS page_n, sum(r.page_row_bytes) OVER w AS page_bytes, count(*) OVER () AS page_read
       FROM (SELECT id, endpoint_id, event_id, type, payload, status, round, attempts, last_attempt_at,
  last_response_status, last_error, delivered_at, created_at,
            (octet_length(payload::text) + octet_length(coalesce(last_error, '')))::float8 AS page_row_bytes
     FROM webhook_deliveries
     WHERE tenant_id = $1 AND endpoint_id = $2 AND ($3::text IS NULL OR id < $3)
     ORDER BY id DESC LIMIT $4) r WINDOW w AS (ORDER BY id DESC ROWS UNBOUNDED PRECEDING)) c
     WHERE c.page_n < $4 AND (c.page_n = 1 OR c.page_bytes <= $5::float8) ORDER BY id DESC;

-- redeliver
UPDATE webhook_deliveries d SET status = 'pending', round = d.round + 1, updated_at = clock_timestamp()
     WHERE d.id = $3 AND d.endpoint_id = $2 AND d.tenant_id = $1 AND d.status <> 'pending'
       AND EXISTS (SELECT 1 FROM webhook_endpoints w WHERE w.id = d.endpoint_id AND w.disabled_at IS NULL)
       AND EXISTS (SELECT 1 FROM api_keys k WHERE k.id = $4 AND k.tenant_id = $1 AND k.revoked_at IS NULL FOR SHARE)
     RETURNING id, endpoint_id, event_id, type, payload, status, round, attempts, last_attempt_at,
  last_response_status, last_error, delivered_at, created_at,
       1 + (SELECT count(*)::int FROM webhook_deliveries p
            WHERE p.tenant_id = $1 AND p.status = 'pending' AND p.round > 0) AS backlog;

-- redeliveryRefusal
SELECT d.status, d.round, w.disabled_at IS NOT NULL AS disabled,
       EXISTS (SELECT 1 FROM api_keys k WHERE k.id = $4 AND k.tenant_id = $3 AND k.revoked_at IS NULL) AS key_stands
     FROM webhook_endpoints w
     LEFT JOIN webhook_deliveries d ON d.endpoint_id = w.id AND d.id = $1 AND d.tenant_id = w.tenant_id
     WHERE w.id = $2 AND w.tenant_id = $3;

-- skipDelivery
UPDATE webhook_deliveries SET status = 'skipped', last_error = $3, updated_at = clock_timestamp()
     WHERE id = $1 AND round = $2 AND status = 'pending';

-- lockCursor
SELECT last_txid::text, last_event_id FROM webhook_outbox_cursor WHERE id = 1 FOR UPDATE SKIP LOCKED;

-- candidateEvents
SELECT e.id, e.txid::text, e.tenant_id, e.execution_id, e.operation_id, e.type, e.from_status, e.to_status,
              e.data, e.seq, e.created_at, x.agent_id, o.key AS operation_key, o.connector, o.action,
              o.verification_method
       FROM events e
       JOIN executions x ON x.id = e.execution_id
       LEFT JOIN operations o ON o.id = e.operation_id
       WHERE ((e.type IN ('obligation.escalated', 'outcome.evaluated')
        OR (e.type = 'operation.status_changed' AND e.to_status IN ('VERIFIED', 'FAILED', 'CANCELLED', 'ACKNOWLEDGED', 'MANUAL_REVIEW'))
        OR (e.type = 'execution.status_changed' AND e.to_status IN ('completed', 'failed', 'cancelled', 'expired')))
        OR ((e.type IN ('operation.rechecked', 'operation.acknowledged_late') AND e.data->>'after' = 'FAILED')
          OR (e.type = 'operation.rejected_late' AND e.data->>'after' = 'VERIFIED')))
         AND (e.txid, e.id) > ($1::xid8, $2::text)
         AND e.txid < pg_snapshot_xmin(pg_current_snapshot())
       ORDER BY e.txid, e.id
       LIMIT $3;

-- finishedOperations
SELECT o.execution_id, o.id, o.key, o.status, o.attempt, o.terminal_reason,
              o.acknowledged_at IS NOT NULL AS acknowledged, o.rejected_at IS NOT NULL AS rejected,
              coalesce(jsonb_typeof(o.obligation->'effect_shown_after_failed') = 'object', false) AS effect_shown_after
       FROM operations o WHERE o.execution_id = ANY($1::text[])
       ORDER BY o.execution_id, o.position, o.generation;

-- subscribedEndpoints
SELECT id, tenant_id, events, created_at, disabled_at, last_disabled_at, reenabled_at
       FROM webhook_endpoints
       WHERE tenant_id = ANY($1::text[]) FOR KEY SHARE;

-- advanceCursor
UPDATE webhook_outbox_cursor SET last_txid = $1::xid8, last_event_id = $2, updated_at = now() WHERE id = 1;

-- insertDeliveries
INSERT INTO webhook_deliveries (id, endpoint_id, tenant_id, event_id, type, payload, status, last_error)
     SELECT id, endpoint_id, tenant_id, event_id, type, payload,
            CASE WHEN skipped IS NULL THEN 'pending' ELSE 'skipped' END, skipped
       FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::jsonb[], $7::text[])
            AS d (id, endpoint_id, tenant_id, event_id, type, payload, skipped)
     ON CONFLICT (endpoint_id, event_id) DO NOTHING
     RETURNING id, round, tenant_id, status;

-- pendingByTenant
SELECT tenant_id, count(*)::int AS n FROM webhook_deliveries
     WHERE status = 'pending' AND tenant_id = ANY($1::text[]) GROUP BY tenant_id;

-- owedDeliveries
SELECT id, round,
            row_number() OVER (PARTITION BY tenant_id ORDER BY updated_at, id)::int AS backlog
     FROM (SELECT id, round, tenant_id, updated_at FROM webhook_deliveries
           WHERE status = 'pending' AND updated_at < clock_timestamp() - make_interval(secs => $1 / 1000.0)
           ORDER BY updated_at LIMIT $2) owed
     ORDER BY updated_at, id;

-- deliveryToSend
SELECT d.id, d.tenant_id, d.endpoint_id, w.url, w.secret, d.payload, d.status, d.round, w.disabled_at,
            w.last_disabled_at, coalesce(e.created_at, d.created_at) AS event_at
     FROM webhook_deliveries d JOIN webhook_endpoints w ON w.id = d.endpoint_id
     LEFT JOIN events e ON e.id = d.event_id
     WHERE d.id = $1;

-- markSending
WITH target AS (
       SELECT d.id, d.tenant_id, d.endpoint_id, w.url, w.secret, d.payload, d.status, d.round, w.disabled_at,
              w.last_disabled_at, coalesce(e.created_at, d.created_at) AS event_at
       FROM webhook_deliveries d JOIN webhook_endpoints w ON w.id = d.endpoint_id
       LEFT JOIN events e ON e.id = d.event_id
       WHERE d.id = $1
       FOR KEY SHARE OF w
     ), expired AS (
       DELETE FROM webhook_sends_in_flight
       WHERE endpoint_id = (SELECT endpoint_id FROM target) AND until < clock_timestamp()
     ), marked AS (
       INSERT INTO webhook_sends_in_flight (id, endpoint_id, tenant_id, until)
       SELECT $2, endpoint_id, tenant_id, clock_timestamp() + make_interval(secs => $3 / 1000.0) FROM target
     )
     SELECT * FROM target;

-- clearSending
DELETE FROM webhook_sends_in_flight WHERE id = $1;

-- sendingTo
SELECT 1 FROM webhook_sends_in_flight
     WHERE endpoint_id = $1 AND ($2::text IS NULL OR tenant_id = $2) AND until > clock_timestamp() LIMIT 1;

-- clearExpiredSendsTo
DELETE FROM webhook_sends_in_flight
     WHERE endpoint_id = $1 AND ($2::text IS NULL OR tenant_id = $2) AND until <= clock_timestamp();

-- recordAttempt
UPDATE webhook_deliveries SET status = $3, attempts = attempts + 1, last_attempt_at = clock_timestamp(),
         last_response_status = $4, last_error = $5, updated_at = clock_timestamp(),
         delivered_at = CASE WHEN $3 = 'delivered' THEN clock_timestamp() END
       WHERE id = $1 AND round = $2 AND (status = 'pending' OR (status = 'skipped' AND $3 = 'delivered'))
       RETURNING endpoint_id, tenant_id;

-- resetFailures
UPDATE webhook_endpoints SET consecutive_failures = 0
       WHERE id = $1 AND consecutive_failures <> 0 AND disabled_at IS NULL;

-- countFailure
UPDATE webhook_endpoints SET consecutive_failures = consecutive_failures + 1,
         disabled_at = CASE WHEN consecutive_failures + 1 >= $2 THEN now() END,
         disabled_reason = CASE WHEN consecutive_failures + 1 >= $2 THEN $3 END, updated_at = now()
       WHERE id = $1 AND disabled_at IS NULL RETURNING id, tenant_id, url, events, disabled_at, disabled_reason, consecutive_failures, created_by,
  created_at, updated_at;

-- skipEndpointPending
UPDATE webhook_deliveries d SET status = 'skipped', last_error = $2, updated_at = clock_timestamp()
       WHERE d.id IN (SELECT id FROM webhook_deliveries
                      WHERE endpoint_id = $1 AND status = 'pending' ORDER BY id FOR UPDATE SKIP LOCKED)
         AND d.status = 'pending';

-- disabledSubscribers
SELECT id FROM webhook_endpoints
       WHERE tenant_id = $1 AND id <> $2 AND disabled_at IS NULL AND 'webhook.disabled' = ANY(events) FOR KEY SHARE;

-- pruneDeliveries
DELETE FROM webhook_deliveries d WHERE d.id IN (
       SELECT id FROM webhook_deliveries
       WHERE status <> 'pending' AND updated_at < clock_timestamp() - make_interval(secs => $1 / 1000.0)
       ORDER BY updated_at LIMIT $2
     )
       AND d.status <> 'pending' AND d.updated_at < clock_timestamp() - make_interval(secs => $1 / 1000.0)
     RETURNING d.id;
