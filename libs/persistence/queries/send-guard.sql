-- execution_not_running
SELECT EXISTS (SELECT 1 FROM executions ge WHERE ge.id = op.execution_id
                    AND ge.status IN ('running'));

-- execution_ended
SELECT EXISTS (SELECT 1 FROM executions ge WHERE ge.id = op.execution_id
                    AND ge.status IN ('created', 'validating', 'resolving_context', 'planning', 'running', 'waiting_for_tool', 'waiting_for_approval', 'validating_output', 'completed')
                    AND (ge.status IN ('completed', 'failed', 'cancelled', 'expired') OR ge.deadline_at > clock_timestamp()));

-- precondition_unread
SELECT op.next_check_at IS NULL;

-- dependency_not_done
SELECT NOT EXISTS (
              SELECT 1 FROM unnest(op.depends_on) AS dep(key)
              WHERE NOT coalesce((
                SELECT (d.status IN ('VERIFIED') AND d.rejected_at IS NULL)
                       OR (d.status IN ('ACKNOWLEDGED')
                           AND d.verification_method <> 'read_after_write')
                FROM operations d WHERE d.execution_id = op.execution_id AND d.key = dep.key
                ORDER BY d.generation DESC LIMIT 1 FOR SHARE), false));

-- approval_not_granted
SELECT CASE WHEN op.approval->>'state' IS NULL THEN NOT ($1::boolean OR op.requires_approval)
               ELSE op.approval->>'state' = 'granted'
                    AND (op.approval->>'expires_at' IS NULL
                         OR (op.approval->>'expires_at')::timestamptz > clock_timestamp()) END;

-- approval_key_revoked
SELECT op.approval->>'state' IS DISTINCT FROM 'granted' OR op.approval->>'decided_by' IS NULL
        OR EXISTS (SELECT 1 FROM api_keys gk WHERE gk.id = op.approval->>'decided_by' AND gk.tenant_id = op.tenant_id
                   AND gk.revoked_at IS NULL FOR SHARE);

-- reference_unsettled
SELECT op.resend_ref IS NULL OR NOT EXISTS (SELECT 1 FROM operations ro WHERE ro.tenant_id = op.tenant_id
          AND ro.connector = op.connector AND ro.resend_ref = op.resend_ref AND ro.resend_ref IS NOT NULL
          AND ro.id <> op.id AND ro.status IN ('SENT', 'UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW') AND ro.attempt > 0);

-- retry_refuted
SELECT op.retry_of IS NULL OR NOT EXISTS (SELECT 1 FROM verity_retry_chain_locked(op.retry_of, op.tenant_id) chain WHERE chain.status = 'FAILED'
            AND (chain.acknowledged_at IS NOT NULL
                 OR coalesce(chain.obligation, '{}'::jsonb) ? 'effect_shown_after_failed'));

-- approval_policy_changed
SELECT op.approval->>'state' IS NOT NULL OR op.requires_approval
            OR (SELECT CASE WHEN gt.id IS NOT NULL THEN jsonb_build_object('approvalRules', gt.settings->'approvalRules', 'approvalAmountAbove', gt.settings->'approvalAmountAbove')::text END FROM tenants gt WHERE gt.id = op.tenant_id FOR SHARE)
               IS NOT DISTINCT FROM $2::text;

-- settings_changed
SELECT verity_settings_version_locked(op.tenant_id, op.connector) IS NOT DISTINCT FROM $1::text;

-- release_not_resolved
SELECT (op.obligation->'resolution'->>'status') IS NOT DISTINCT FROM 'SENT';

-- release_key_revoked
SELECT op.obligation->'resolution'->>'by' IS NULL
        OR EXISTS (SELECT 1 FROM api_keys rk WHERE rk.id = op.obligation->'resolution'->>'by'
                   AND rk.tenant_id = op.tenant_id AND rk.revoked_at IS NULL FOR SHARE);
