-- settings
SELECT settings FROM tenants WHERE id = $1;

-- settingsWithVersion
SELECT settings, md5(jsonb_build_object('obligation_owner', settings->'obligationOwner', 'escalation_target', settings->'escalationTarget', 'obligation_due_seconds', settings->'obligationDueSeconds', 'approval_rules', settings->'approvalRules', 'approval_amount_above', settings->'approvalAmountAbove')::text) AS version FROM tenants WHERE id = $1;

-- updatePolicy
WITH changed AS (
       UPDATE tenants t SET settings = (coalesce(t.settings, '{}'::jsonb) - $2::text[]) || $3::jsonb
       FROM (SELECT id, settings FROM tenants
             WHERE id = $1 AND ($6::text[] IS NULL OR md5(jsonb_build_object('obligation_owner', settings->'obligationOwner', 'escalation_target', settings->'escalationTarget', 'obligation_due_seconds', settings->'obligationDueSeconds', 'approval_rules', settings->'approvalRules', 'approval_amount_above', settings->'approvalAmountAbove')::text) = ANY($6::text[]))
             FOR NO KEY UPDATE) prior
       WHERE t.id = prior.id
       RETURNING prior.settings AS before, t.settings AS after, md5(jsonb_build_object('obligation_owner', t.settings->'obligationOwner', 'escalation_target', t.settings->'escalationTarget', 'obligation_due_seconds', t.settings->'obligationDueSeconds', 'approval_rules', t.settings->'approvalRules', 'approval_amount_above', t.settings->'approvalAmountAbove')::text) AS version
     ), recorded AS (
       INSERT INTO admin_changes (id, tenant_id, kind, connector, changed_by, before, after)
       SELECT $4, $1, 'policy', NULL, $5, jsonb_build_object('obligation_owner', changed.before->'obligationOwner', 'escalation_target', changed.before->'escalationTarget', 'obligation_due_seconds', changed.before->'obligationDueSeconds', 'approval_rules', changed.before->'approvalRules', 'approval_amount_above', changed.before->'approvalAmountAbove'), jsonb_build_object('obligation_owner', changed.after->'obligationOwner', 'escalation_target', changed.after->'escalationTarget', 'obligation_due_seconds', changed.after->'obligationDueSeconds', 'approval_rules', changed.after->'approvalRules', 'approval_amount_above', changed.after->'approvalAmountAbove')
       FROM changed
     )
     SELECT after AS settings, version FROM changed;
