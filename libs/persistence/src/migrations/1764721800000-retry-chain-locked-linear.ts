import { sqlMigration } from './sql-migration';

const HEAD = `
      CREATE OR REPLACE FUNCTION verity_retry_chain_locked(p_first text, p_tenant text)
      RETURNS TABLE (id text, status text, acknowledged_at timestamptz, obligation jsonb)
      LANGUAGE plpgsql VOLATILE AS $$`;

/**
 * verity_retry_chain_locked (the send guard's walk up a chain of retries, each link share-locked) in time linear in
 * the chain: it kept every id it had seen in an array, searched and copied at each link (quadratic: a chain of 10,000
 * links, made before the intake refused chains longer than it counts, took seconds with every link locked). A loop of
 * `retry_of` (no API makes one) is still ended: the walk remembers one link, moved to the current one after 1, 2, 4, 8…
 * steps (Brent), and stops on coming back to it — every link of the loop returned, some of them again, which the
 * callers' EXISTS does not mind.
 */
export class RetryChainLockedLinear1764721800000 extends sqlMigration('RetryChainLockedLinear1764721800000', {
  up: [
    `${HEAD}
      DECLARE
        v_next text := p_first;
        v_mark text;
        v_power int := 1;
        v_steps int := 0;
        v_retry_of text;
      BEGIN
        WHILE v_next IS NOT NULL AND v_next IS DISTINCT FROM v_mark LOOP
          SELECT o.id, o.status, o.acknowledged_at, o.obligation, o.retry_of
            INTO id, status, acknowledged_at, obligation, v_retry_of
            FROM operations o WHERE o.id = v_next AND o.tenant_id = p_tenant FOR SHARE;
          EXIT WHEN NOT FOUND;
          RETURN NEXT;
          v_steps := v_steps + 1;
          IF v_steps = v_power THEN
            v_mark := v_next;
            v_power := v_power * 2;
            v_steps := 0;
          END IF;
          v_next := v_retry_of;
        END LOOP;
      END
      $$`,
  ],
  down: [
    `${HEAD}
      DECLARE
        v_next text := p_first;
        v_seen text[] := '{}';
        v_retry_of text;
      BEGIN
        WHILE v_next IS NOT NULL AND NOT v_next = ANY (v_seen) LOOP
          v_seen := v_seen || v_next;
          SELECT o.id, o.status, o.acknowledged_at, o.obligation, o.retry_of
            INTO id, status, acknowledged_at, obligation, v_retry_of
            FROM operations o WHERE o.id = v_next AND o.tenant_id = p_tenant FOR SHARE;
          EXIT WHEN NOT FOUND;
          RETURN NEXT;
          v_next := v_retry_of;
        END LOOP;
      END
      $$`,
  ],
}) {}
