-- settings
SELECT settings FROM tenants WHERE id = $1;

-- updatePolicy
UPDATE tenants SET settings = (coalesce(settings, '{}'::jsonb) - $2::text[]) || $3::jsonb
     WHERE id = $1 RETURNING settings;
