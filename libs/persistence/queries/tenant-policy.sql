-- settings
SELECT settings FROM tenants WHERE id = $1;

-- settingsWithVersion
SELECT settings, md5(jsonb_build_object('obligation_owner', settings->'obligationOwner', 'escalation_target', settings->'escalationTarget', 'obligation_due_seconds', settings->'obligationDueSeconds', 'approval_rules', settings->'approvalRules', 'approval_amount_above', settings->'approvalAmountAbove')::text) AS version FROM tenants WHERE id = $1;

-- lockPolicy
SELECT jsonb_build_object('obligation_owner', settings->'obligationOwner', 'escalation_target', settings->'escalationTarget', 'obligation_due_seconds', settings->'obligationDueSeconds', 'approval_rules', settings->'approvalRules', 'approval_amount_above', settings->'approvalAmountAbove')::text AS before, md5(jsonb_build_object('obligation_owner', settings->'obligationOwner', 'escalation_target', settings->'escalationTarget', 'obligation_due_seconds', settings->'obligationDueSeconds', 'approval_rules', settings->'approvalRules', 'approval_amount_above', settings->'approvalAmountAbove')::text) AS version
     FROM tenants WHERE id = $1 FOR NO KEY UPDATE;

-- updatePolicy
WITH changed AS (
       UPDATE tenants t SET settings = (coalesce(t.settings, '{}'::jsonb) - $2::text[]) || $3::jsonb
         || jsonb_build_object('policyUpdatedAt', to_char((clock_timestamp()) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
       WHERE t.id = $1
       RETURNING t.settings AS after, md5(jsonb_build_object('obligation_owner', t.settings->'obligationOwner', 'escalation_target', t.settings->'escalationTarget', 'obligation_due_seconds', t.settings->'obligationDueSeconds', 'approval_rules', t.settings->'approvalRules', 'approval_amount_above', t.settings->'approvalAmountAbove')::text) AS version
     ), recorded AS (
       INSERT INTO admin_changes (id, tenant_id, kind, connector, changed_by, before, after)
       SELECT $4, $1, 'policy', NULL, $5, $6::jsonb, jsonb_build_object('obligation_owner', changed.after->'obligationOwner', 'escalation_target', changed.after->'escalationTarget', 'obligation_due_seconds', changed.after->'obligationDueSeconds', 'approval_rules', changed.after->'approvalRules', 'approval_amount_above', changed.after->'approvalAmountAbove')
       FROM changed
     )
     SELECT after AS settings, version FROM changed;
