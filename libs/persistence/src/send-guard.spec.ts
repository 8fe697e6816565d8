import {
  CANCEL_CAUSE_OF_ENDED_EXECUTION,
  ExecutionStatus,
  OperationStatus,
  VerificationMethod,
} from '@verity/status-model';
import {
  lockWaiters,
  waitForLockWaiter,
  writeDuringRevocation,
  writeWhileRowHeld,
} from '../../../test/support/lock-waits';
import type { EntityManager } from 'typeorm';
import { TENANT_POLICY_SQL, changeTenantPolicy } from './tenant-policy';
import { newId } from '@verity/platform';
import { withSessions } from '../../../test/support/sessions';
import { waitFor } from '../../../test/support/stack';
import { useTestDatabase } from '../../../test/support/test-database';
import { EventEntity, OperationEntity } from './entities';
import { SendGuard, sendGuardConditions, sendRefusals } from './send-guard';
import { SecretsCipher } from './secrets-cipher';
import { NewOperation, findOperationToSend, lockExecutionForWorker, snapshotOf } from './store';
import { backfillSpend, commitWithinSpendingCaps, lockSpendingCaps, spendingUsage } from './entities';
import {
  changeConnectorSettings,
  clearConnectorSettings,
  upsertConnectorSettings,
} from './connector-settings.repository';

/** No connector's secrets are opened in these reads. */
const NO_CIPHER = null as unknown as SecretsCipher;
import { chargeOperation, insertStandingKeys, insertTestExecution } from '../../../test/support/fixtures';
import { sentFromPrepared } from '../../../test/support/sends';
import { TransitionService } from './transition.service';

/**
 * The statement that commits SENT guards itself (I15): whatever a worker read before, it refuses — changing nothing,
 * writing no event — unless the execution runs, the dependencies are done, the approval is granted and fresh, and no
 * precondition read is owed; a human release needs its resolution on the row.
 */
describe('the guarded SENT statement (real Postgres)', () => {
  const db = useTestDatabase('sendguard', ['acme']);
  beforeAll(async () => insertStandingKeys(db.dataSource.manager, 'acme', ['key_admin']));
  const transitions = new TransitionService();
  const dispatch: SendGuard = { kind: 'dispatch', approvalRequired: false };

  function op(key: string, extra: Partial<NewOperation> = {}): NewOperation {
    return chargeOperation({ key, ...extra });
  }

  async function execution(operations: NewOperation[], status = 'running') {
    const executionId = await insertTestExecution(db.dataSource.manager, 'acme', {
      operations: operations.map((o, position) => ({ ...o, position })),
    });
    await db.dataSource.query(`UPDATE executions SET status = $2 WHERE id = $1`, [executionId, status]);
    return executionId;
  }

  async function set(id: string, sql: string, params: unknown[] = []) {
    await db.dataSource.query(`UPDATE operations SET ${sql} WHERE id = $1`, [id, ...params]);
  }

  /** A hold for a knowledge conflict whose reviewer's release (SENT) is recorded on the row. */
  const RELEASE_RECORDED = `status = 'MANUAL_REVIEW', terminal_reason = 'KNOWLEDGE_CONFLICT',
                            obligation = '{"resolution": {"status": "SENT"}}'`;

  /** An operation held with its release recorded (RELEASE_RECORDED), alone in an execution in `status`. */
  async function heldWithRelease(key: string, status: string) {
    const held = op(key);
    const executionId = await execution([held], status);
    await set(held.id, RELEASE_RECORDED);
    return { held, executionId };
  }

  async function send(id: string, guard: SendGuard = dispatch, from = OperationStatus.PREPARED) {
    const result = await transitions.operation(db.dataSource.manager, {
      operation: { id, status: from, attempt: 0, verificationMethod: VerificationMethod.READ_AFTER_WRITE },
      to: OperationStatus.SENT,
      actor: guard.kind === 'release' ? 'human' : 'system',
      bumpAttempt: true,
      sendGuard: guard,
    });
    return { won: result.won, refusals: result.won ? [] : await sendRefusals(db.dataSource.manager, id, guard) };
  }

  async function unchanged(id: string, status = OperationStatus.PREPARED) {
    const row = await db.dataSource.getRepository(OperationEntity).findOneByOrFail({ id });
    expect({ status: row.status, attempt: row.attempt }).toEqual({ status, attempt: 0 });
    expect(await db.dataSource.getRepository(EventEntity).countBy({ operationId: id })).toBe(0);
  }

  /** As the sender releases: the operation's row, then its execution's, locked before the SENT statement. */
  function senderReleases(id: string, guard: SendGuard) {
    return commitWithinSpendingCaps(
      db.dataSource,
      {
        tenantId: 'acme',
        connector: 'sandbox.payments',
        operationId: id,
        caps: [],
        amountOf: () => null,
        lockOperationFirst: true,
      },
      (tx) =>
        transitions.operation(tx, {
          operation: {
            id,
            status: OperationStatus.MANUAL_REVIEW,
            attempt: 0,
            verificationMethod: VerificationMethod.READ_AFTER_WRITE,
          },
          to: OperationStatus.SENT,
          actor: 'human',
          bumpAttempt: true,
          sendGuard: guard,
        }),
    );
  }

  /** `guard` with the approval policy a send of `id` is judged against now, as the sender finds it. */
  async function judgedAgainstPolicy(id: string, guard: SendGuard): Promise<SendGuard> {
    const found = await findOperationToSend(db.dataSource.manager, id, { connectors: [], cipher: NO_CIPHER });
    return { ...guard, approvalPolicy: found!.approvalPolicy };
  }

  it('sends an operation whose execution runs and which needs nothing else', async () => {
    const charge = op('charge');
    await execution([charge]);
    expect(await send(charge.id)).toEqual({ won: true, refusals: [] });
  });

  it('refuses while the execution is not running (waiting for approval, cancelled, planning)', async () => {
    for (const status of ['waiting_for_approval', 'cancelled', 'planning', 'completed']) {
      const charge = op('charge');
      await execution([charge], status);
      expect(await send(charge.id)).toEqual({ won: false, refusals: ['execution_not_running'] });
      await unchanged(charge.id);
    }
  });

  it('refuses past the execution’s deadline, by the database’s clock, though the execution still runs', async () => {
    const charge = op('charge-late');
    const executionId = await execution([charge]);
    // The sweeper has not expired it yet; the worker's own clock may say there is time left.
    await db.dataSource.query(
      `UPDATE executions SET deadline_at = clock_timestamp() - interval '1 millisecond' WHERE id = $1`,
      [executionId],
    );
    expect(await send(charge.id)).toEqual({ won: false, refusals: ['execution_ended'] });
    await unchanged(charge.id);
  });

  it('refuses until every dependency (its latest generation) is VERIFIED, or ACKNOWLEDGED without read-back', async () => {
    const charge = op('charge');
    const sms = op('notify', { connector: 'sandbox.sms', verification_method: '', depends_on: ['charge'] });
    await execution([charge, sms]);
    for (const [status, method] of [
      ['PREPARED', 'read_after_write'],
      ['SENT', 'read_after_write'],
      ['ACKNOWLEDGED', 'read_after_write'],
      ['MANUAL_REVIEW', 'read_after_write'],
    ]) {
      await set(charge.id, `status = $2, verification_method = $3`, [status, method]);
      expect(await send(sms.id)).toEqual({ won: false, refusals: ['dependency_not_done'] });
    }
    // A VERIFIED the provider's late rejection of its send contradicted since: no longer established, not done.
    await set(charge.id, `status = 'VERIFIED', verification_method = 'read_after_write', rejected_at = now()`);
    expect(await send(sms.id)).toEqual({ won: false, refusals: ['dependency_not_done'] });
    await unchanged(sms.id);
    await set(charge.id, `status = 'ACKNOWLEDGED', verification_method = '', rejected_at = NULL`);
    expect((await send(sms.id)).won).toBe(true);
  });

  it('judges a dependency by its latest generation, and a missing one as not done', async () => {
    const charge = op('charge');
    const sms = op('notify', { connector: 'sandbox.sms', verification_method: '', depends_on: ['charge'] });
    const orphan = op('orphan', { depends_on: ['nowhere'] });
    const executionId = await execution([charge, sms, orphan]);
    await set(charge.id, `status = 'VERIFIED'`);
    // A later generation of the same key that is not done yet (as a retry would be) is what counts.
    await db.dataSource.query(
      `INSERT INTO operations (id, execution_id, tenant_id, key, generation, position, connector, action, params,
                               status)
       VALUES ($1, $2, 'acme', 'charge', 1, 0, 'sandbox.payments', 'charge', '{}', 'PREPARED')`,
      [newId('op'), executionId],
    );
    expect(await send(sms.id)).toEqual({ won: false, refusals: ['dependency_not_done'] });
    expect(await send(orphan.id)).toEqual({ won: false, refusals: ['dependency_not_done'] });
  });

  it('refuses an approval that is required and pending, denied or expired; sends a fresh grant', async () => {
    const pending = op('pending', { requires_approval: true, approval: { state: 'requested' } });
    const denied = op('denied', { approval: { state: 'denied' } });
    const expired = op('expired', {
      requires_approval: true,
      approval: { state: 'granted', expires_at: new Date(Date.now() - 1000).toISOString() },
    });
    const byPolicy = op('by-policy');
    const fresh = op('fresh', {
      requires_approval: true,
      approval: { state: 'granted', expires_at: new Date(Date.now() + 60_000).toISOString() },
    });
    await execution([pending, denied, expired, byPolicy, fresh]);
    for (const o of [pending, denied, expired]) {
      expect(await send(o.id)).toEqual({ won: false, refusals: ['approval_not_granted'] });
      await unchanged(o.id);
    }
    // The tenant's policy (decided by the caller) requires an approval the row does not have.
    expect(await send(byPolicy.id, { kind: 'dispatch', approvalRequired: true })).toEqual({
      won: false,
      refusals: ['approval_not_granted'],
    });
    expect((await send(fresh.id)).won).toBe(true);
  });

  it('refuses a grant whose deciding key was revoked since (approval_key_revoked), also one revoked as the send runs', async () => {
    const keyOf = async (id: string) => {
      await insertStandingKeys(db.dataSource.manager, 'acme', [id]);
      return id;
    };
    const grantBy = (keyId: string): Partial<NewOperation> => ({
      requires_approval: true,
      approval: { state: 'granted', decided_by: keyId, expires_at: new Date(Date.now() + 600_000).toISOString() },
    });
    const revoke = (keyId: string) =>
      db.dataSource.query(`UPDATE api_keys SET revoked_at = now() WHERE id = $1`, [keyId]);
    const standing = await keyOf(newId('key'));
    const revoked = await keyOf(newId('key'));
    const racing = await keyOf(newId('key'));
    const held = await keyOf(newId('key'));
    const byStanding = op('by-standing', grantBy(standing));
    const byRevoked = op('by-revoked', grantBy(revoked));
    const byRacing = op('by-racing', grantBy(racing));
    // Another tenant's key of that id would not do either: the grant is the operation's tenant's.
    const byNobody = op('by-nobody', grantBy(newId('key')));
    await execution([byStanding, byRevoked, byRacing, byNobody]);
    await revoke(revoked);
    for (const o of [byRevoked, byNobody]) {
      expect(await send(o.id)).toEqual({ won: false, refusals: ['approval_key_revoked'] });
      await unchanged(o.id);
    }
    expect((await send(byStanding.id)).won).toBe(true);

    // A revocation under way when the send's statement runs: the send waits for it, then refuses. (Its statement is
    // longer than what pg_stat_activity shows of it: any lock wait is its.)
    const sending = () => send(byRacing.id);
    expect(await writeDuringRevocation(db.dataSource, racing, sending, { waitingStatementLike: null })).toEqual({
      won: false,
      refusals: ['approval_key_revoked'],
    });
    await unchanged(byRacing.id);

    // A release's grant is held to the same: the release is refused (and withdrawn by its sender).
    const release = op('release-by-revoked');
    await execution([release], 'completed');
    await set(
      release.id,
      `${RELEASE_RECORDED},
       approval = jsonb_build_object('state', 'granted', 'decided_by', $2::text, 'expires_at', now() + interval '1 hour')`,
      [held],
    );
    await revoke(held);
    expect(await send(release.id, { kind: 'release', approvalRequired: true }, OperationStatus.MANUAL_REVIEW)).toEqual({
      won: false,
      refusals: ['approval_key_revoked'],
    });
    await unchanged(release.id, OperationStatus.MANUAL_REVIEW);
  });

  it('does not release what a key revoked since recorded (release_key_revoked); one a standing key recorded is sent', async () => {
    const [standing, revoked] = [newId('key'), newId('key')];
    await insertStandingKeys(db.dataSource.manager, 'acme', [standing, revoked]);
    const byStanding = op('released-by-standing');
    const byRevoked = op('released-by-revoked');
    await execution([byStanding, byRevoked], 'completed');
    for (const [o, by] of [
      [byStanding, standing],
      [byRevoked, revoked],
    ] as const) {
      await set(
        o.id,
        `status = 'MANUAL_REVIEW', terminal_reason = 'KNOWLEDGE_CONFLICT',
         obligation = jsonb_build_object('resolution', jsonb_build_object('status', 'SENT', 'by', $2::text))`,
        [by],
      );
    }
    await db.dataSource.query(`UPDATE api_keys SET revoked_at = now() WHERE id = $1`, [revoked]);
    expect(await send(byRevoked.id, { kind: 'release' }, OperationStatus.MANUAL_REVIEW)).toEqual({
      won: false,
      refusals: ['release_key_revoked'],
    });
    await unchanged(byRevoked.id, OperationStatus.MANUAL_REVIEW);
    expect((await send(byStanding.id, { kind: 'release' }, OperationStatus.MANUAL_REVIEW)).won).toBe(true);
  });

  it('refuses while a precondition read is owed (next_check_at set on a PREPARED operation)', async () => {
    const charge = op('charge', { expected_state: { charged: false } });
    await execution([charge]);
    await set(charge.id, `next_check_at = now() + interval '1 minute', check_count = 1`);
    expect(await send(charge.id)).toEqual({ won: false, refusals: ['precondition_unread'] });
    await set(charge.id, `next_check_at = NULL`);
    expect((await send(charge.id)).won).toBe(true);
  });

  it('names every failed condition at once, and none for a lost compare-and-set', async () => {
    const sms = op('notify', { depends_on: ['charge'], requires_approval: true, approval: { state: 'requested' } });
    await execution([op('charge'), sms], 'cancelled');
    expect((await send(sms.id)).refusals.sort()).toEqual(
      ['approval_not_granted', 'dependency_not_done', 'execution_not_running'].sort(),
    );
    const charge = op('charge');
    await execution([charge]);
    expect((await send(charge.id)).won).toBe(true);
    // Sent already: the guard itself would pass, so nothing names a condition — the status moved.
    expect(await send(charge.id)).toEqual({ won: false, refusals: [] });
  });

  it('refuses when the connector settings changed since the version the send was prepared with (settings_changed)', async () => {
    const versionOf = async (id: string) => {
      const found = await findOperationToSend(db.dataSource.manager, id, { connectors: [], cipher: NO_CIPHER });
      return found!.settings.version;
    };
    // No settings row: read as null, and null is what is stored.
    const first = op('first');
    await execution([first]);
    expect(await versionOf(first.id)).toBeNull();
    expect(await send(first.id, { ...dispatch, settingsVersion: null })).toEqual({ won: true, refusals: [] });

    const charge = op('charge');
    await execution([charge]);
    await db.dataSource.query(
      `INSERT INTO tenant_connector_settings (tenant_id, connector, allow_hosts) VALUES ('acme', 'sandbox.payments', '[]')`,
    );
    const read = await versionOf(charge.id);
    expect(read).toMatch(/^\d+$/);
    // An admin writes the row after the read (a cap, an allowlist): the send prepared from the read is refused.
    await db.dataSource.query(
      `UPDATE tenant_connector_settings SET spending_caps = '[{"period":"day","max_operations":1}]', updated_at = now()
        WHERE tenant_id = 'acme' AND connector = 'sandbox.payments'`,
    );
    expect(await send(charge.id, { ...dispatch, settingsVersion: read })).toEqual({
      won: false,
      refusals: ['settings_changed'],
    });
    await unchanged(charge.id);
    // Read again, it sends; and a row that appeared after a read of none is a change too.
    expect(await send(charge.id, { ...dispatch, settingsVersion: await versionOf(charge.id) })).toEqual({
      won: true,
      refusals: [],
    });
    const later = op('later');
    await execution([later]);
    expect(await send(later.id, { ...dispatch, settingsVersion: null })).toEqual({
      won: false,
      refusals: ['settings_changed'],
    });
  });

  it('refuses when the tenant’s approval policy changed since the send was judged against it (approval_policy_changed)', async () => {
    // The policy as the sender reads it, with the operation (the production read).
    const policyOf = async (id: string) => {
      const found = await findOperationToSend(db.dataSource.manager, id, { connectors: [], cipher: NO_CIPHER });
      return found!.approvalPolicy;
    };
    const setPolicy = (json: string) =>
      db.dataSource.query(`UPDATE tenants SET settings = settings || $1::jsonb WHERE id = 'acme'`, [json]);
    const charge = op('charge');
    const asked = op('asked', { requires_approval: true, approval: { state: 'granted' } });
    const granted = op('granted', { approval: { state: 'granted' } });
    const other = op('other');
    await execution([charge, asked, granted, other]);
    const judged = await policyOf(charge.id);
    expect(judged).toEqual(expect.any(String));
    // Unchanged since the read: the send commits as before.
    expect(await send(other.id, { ...dispatch, approvalPolicy: judged })).toEqual({ won: true, refusals: [] });

    // An admin adds a rule after the read (every charge needs approval): the send judged without it changes nothing.
    await setPolicy('{"approvalRules": [{"connector": "sandbox.payments"}]}');
    expect(await send(charge.id, { ...dispatch, approvalPolicy: judged })).toEqual({
      won: false,
      refusals: ['approval_policy_changed'],
    });
    await unchanged(charge.id);
    // Judged again from the stored policy, the approval it asks for is what refuses it.
    expect(
      await send(charge.id, { kind: 'dispatch', approvalRequired: true, approvalPolicy: await policyOf(charge.id) }),
    ).toEqual({ won: false, refusals: ['approval_not_granted'] });
    await unchanged(charge.id);
    // An approval already decided (or asked for by the agent) stands whatever the policy became.
    expect(await send(asked.id, { ...dispatch, approvalPolicy: judged })).toEqual({ won: true, refusals: [] });
    expect(await send(granted.id, { ...dispatch, approvalPolicy: judged })).toEqual({ won: true, refusals: [] });

    // The older threshold key counts too; a read of no tenant row (null) does not match a stored one.
    const later = op('later');
    await execution([later]);
    const before = await policyOf(later.id);
    await setPolicy('{"approvalAmountAbove": 5}');
    expect(await send(later.id, { ...dispatch, approvalPolicy: before })).toEqual({
      won: false,
      refusals: ['approval_policy_changed'],
    });
    expect(await send(later.id, { ...dispatch, approvalPolicy: null })).toEqual({
      won: false,
      refusals: ['approval_policy_changed'],
    });
    // Any stored value compares equal to itself as read — a number beyond a double's precision, a key stored as null,
    // an empty list of rules — so no send is refused for ever by a policy no one changed.
    await setPolicy('{"approvalAmountAbove": 12345678901234567890, "approvalRules": null}');
    expect(await send(later.id, { ...dispatch, approvalPolicy: await policyOf(later.id) })).toEqual({
      won: true,
      refusals: [],
    });
    await setPolicy('{"approvalRules": []}');
    const last = op('last');
    await execution([last]);
    expect(await send(last.id, { ...dispatch, approvalPolicy: await policyOf(last.id) })).toEqual({
      won: true,
      refusals: [],
    });
  });

  it('sends what was judged against a policy changed and changed back since: the policy in force is the one judged', async () => {
    // A → B → A within one send's lifetime: the guard compares the policy as stored with the one the send was judged
    // by, not its history. The rules in force when SENT commits are those the send was judged against, so it is
    // right to send; anything B made happen to the operation meanwhile (an approval asked for, a decision) is on its
    // row, which the guard judges as it is.
    const policyOf = async (id: string) =>
      (await findOperationToSend(db.dataSource.manager, id, { connectors: [], cipher: NO_CIPHER }))!.approvalPolicy;
    const charge = op('aba');
    await execution([charge]);
    const judged = await policyOf(charge.id);
    // A is the settings as they are (earlier cases of this file leave rules and an amount of 20 digits), restored as
    // stored: as text, which a JavaScript number would round.
    const [{ a }] = (await db.dataSource.query(`SELECT settings::text AS a FROM tenants WHERE id = 'acme'`)) as {
      a: string;
    }[];
    await db.dataSource.query(
      `UPDATE tenants SET settings = settings || '{"approvalRules": [{"connector": "sandbox.payments"}]}' WHERE id = 'acme'`,
    );
    expect(await policyOf(charge.id)).not.toBe(judged);
    await db.dataSource.query(`UPDATE tenants SET settings = $1::jsonb WHERE id = 'acme'`, [a]);
    expect(await send(charge.id, { ...dispatch, approvalPolicy: judged })).toEqual({ won: true, refusals: [] });
  });

  it('releases a held operation only with a SENT resolution on the row, whatever the execution status', async () => {
    const held = op('held');
    await execution([held], 'completed');
    await set(held.id, `status = 'MANUAL_REVIEW', terminal_reason = 'KNOWLEDGE_CONFLICT'`);
    const release: SendGuard = { kind: 'release' };
    expect(await send(held.id, release, OperationStatus.MANUAL_REVIEW)).toEqual({
      won: false,
      refusals: ['release_not_resolved'],
    });
    await unchanged(held.id, OperationStatus.MANUAL_REVIEW);
    await set(held.id, `obligation = '{"resolution": {"status": "SENT"}}'`);
    // Prepared from settings that are no longer the stored ones: refused as well.
    expect(await send(held.id, { ...release, settingsVersion: '0' }, OperationStatus.MANUAL_REVIEW)).toEqual({
      won: false,
      refusals: ['settings_changed'],
    });
    await unchanged(held.id, OperationStatus.MANUAL_REVIEW);
    expect((await send(held.id, release, OperationStatus.MANUAL_REVIEW)).won).toBe(true);
  });

  it('releases an operation that needs approval only with a granted, unexpired approval on the row', async () => {
    const { held } = await heldWithRelease('held-approval', 'completed');
    // Required by the tenant's policy (the caller's fresh read), none on record: not sent.
    expect(await send(held.id, { kind: 'release', approvalRequired: true }, OperationStatus.MANUAL_REVIEW)).toEqual({
      won: false,
      refusals: ['approval_not_granted'],
    });
    // Asked for by the agent: the same without the policy.
    await set(held.id, `requires_approval = true`);
    expect(await send(held.id, { kind: 'release' }, OperationStatus.MANUAL_REVIEW)).toEqual({
      won: false,
      refusals: ['approval_not_granted'],
    });
    // A grant that expired since: not sent either.
    await set(held.id, `approval = '{"state": "granted", "expires_at": "2000-01-01T00:00:00Z"}'`);
    expect(await send(held.id, { kind: 'release' }, OperationStatus.MANUAL_REVIEW)).toEqual({
      won: false,
      refusals: ['approval_not_granted'],
    });
    await unchanged(held.id, OperationStatus.MANUAL_REVIEW);
    // The grant a release records with it: sent.
    await set(held.id, `approval = jsonb_build_object('state', 'granted', 'expires_at', now() + interval '1 hour')`);
    expect((await send(held.id, { kind: 'release', approvalRequired: true }, OperationStatus.MANUAL_REVIEW)).won).toBe(
      true,
    );
  });

  it('does not release what was judged before an approval rule was added (approval_policy_changed)', async () => {
    const { held } = await heldWithRelease('held-policy', 'completed');
    const policyOf = async () =>
      (await findOperationToSend(db.dataSource.manager, held.id, { connectors: [], cipher: NO_CIPHER }))!
        .approvalPolicy;
    const judged = await policyOf();
    // An admin adds a rule after the release was read (every charge needs approval): the release judged without it is
    // refused, changing nothing; judged again, the approval the rule asks for refuses it (and withdraws it).
    await db.dataSource.query(`UPDATE tenants SET settings = settings || $1::jsonb WHERE id = 'acme'`, [
      '{"approvalRules": [{"connector": "sandbox.payments"}]}',
    ]);
    try {
      const release: SendGuard = { kind: 'release', approvalRequired: false, approvalPolicy: judged };
      expect(await send(held.id, release, OperationStatus.MANUAL_REVIEW)).toEqual({
        won: false,
        refusals: ['approval_policy_changed'],
      });
      await unchanged(held.id, OperationStatus.MANUAL_REVIEW);
      const fresh: SendGuard = { kind: 'release', approvalRequired: true, approvalPolicy: await policyOf() };
      expect(await send(held.id, fresh, OperationStatus.MANUAL_REVIEW)).toEqual({
        won: false,
        refusals: ['approval_not_granted'],
      });
      await unchanged(held.id, OperationStatus.MANUAL_REVIEW);
    } finally {
      await db.dataSource.query(
        `UPDATE tenants SET settings = settings || '{"approvalRules": []}'::jsonb WHERE id = 'acme'`,
      );
    }
  });

  it('does not send a retry whose retried FAILED, or one up its chain of retries, was contradicted since (retry_refuted)', async () => {
    const original = op('original');
    const between = op('between');
    const retry = op('retry');
    const declined = op('declined');
    const other = op('other-retry');
    await execution([original, between, declined]);
    await execution([retry]);
    await execution([other]);
    // Those sent once first (the guard let them through) and put back: still there, no new move.
    const stillThere = async (id: string, status = OperationStatus.PREPARED) => {
      const row = await db.dataSource.getRepository(OperationEntity).findOneByOrFail({ id });
      expect({ status: row.status, attempt: row.attempt }).toEqual({ status, attempt: 0 });
    };
    await set(original.id, `status = 'FAILED', attempt = 1`);
    await set(declined.id, `status = 'FAILED', attempt = 1`);
    // A retry of the original that was itself cancelled, and a retry of that one.
    await set(between.id, `status = 'CANCELLED', retry_of = $2`, [original.id]);
    await set(retry.id, `retry_of = $2`, [between.id]);
    // While the FAILED stands uncontradicted, its retry is sent as any operation.
    await set(other.id, `retry_of = $2`, [declined.id]);
    expect(await send(other.id)).toEqual({ won: true, refusals: [] });
    await set(other.id, `status = 'PREPARED', attempt = 0`);

    // The provider's 2xx comes back late: the retry is refused, nothing changed.
    await set(declined.id, `acknowledged_at = now()`);
    expect(await send(other.id)).toEqual({ won: false, refusals: ['retry_refuted'] });
    await stillThere(other.id);
    // A read of its source that showed the effect after the FAILED refutes it as well, for a retry of its retry too.
    expect(await send(retry.id)).toEqual({ won: true, refusals: [] });
    await set(retry.id, `status = 'PREPARED', attempt = 0`);
    await set(original.id, `obligation = '{"effect_shown_after_failed": {"result": "found"}}'`);
    expect(await send(retry.id)).toEqual({ won: false, refusals: ['retry_refuted'] });
    await stillThere(retry.id);
    // A release of a held retry likewise.
    await set(retry.id, `status = 'MANUAL_REVIEW', obligation = '{"resolution": {"status": "SENT"}}'`);
    expect(await send(retry.id, { kind: 'release' }, OperationStatus.MANUAL_REVIEW)).toEqual({
      won: false,
      refusals: ['retry_refuted'],
    });
    await stillThere(retry.id, OperationStatus.MANUAL_REVIEW);
  });

  it('does not release after the execution was cancelled, expired or failed, nor before a dependency is done', async () => {
    const release: SendGuard = { kind: 'release' };
    for (const status of ['cancelled', 'expired', 'failed']) {
      const { held } = await heldWithRelease(`held-${status}`, status);
      expect(await send(held.id, release, OperationStatus.MANUAL_REVIEW)).toEqual({
        won: false,
        refusals: ['execution_ended'],
      });
      await unchanged(held.id, OperationStatus.MANUAL_REVIEW);
    }
    // Held before the charge it depends on was sent: released, it waits for the charge.
    const charge = op('charge');
    const sms = op('notify', { depends_on: ['charge'] });
    await execution([charge, sms], 'waiting_for_approval');
    await set(sms.id, RELEASE_RECORDED);
    expect(await send(sms.id, release, OperationStatus.MANUAL_REVIEW)).toEqual({
      won: false,
      refusals: ['dependency_not_done'],
    });
    await unchanged(sms.id, OperationStatus.MANUAL_REVIEW);
    await set(charge.id, `status = 'VERIFIED', attempt = 1`);
    expect((await send(sms.id, release, OperationStatus.MANUAL_REVIEW)).won).toBe(true);
  });

  it('does not release past the execution’s deadline before the sweeper expired it, by the database’s clock', async () => {
    const release: SendGuard = { kind: 'release' };
    /** A held operation with a recorded release, its execution in `status` and its deadline `ago` in the past. */
    async function heldPastDeadline(key: string, status: string, ago: string) {
      const { held, executionId } = await heldWithRelease(key, status);
      await db.dataSource.query(`UPDATE executions SET deadline_at = clock_timestamp() - $2::interval WHERE id = $1`, [
        executionId,
        ago,
      ]);
      return held;
    }
    const late = await heldPastDeadline('held-late', 'waiting_for_approval', '1 millisecond');
    expect(await send(late.id, release, OperationStatus.MANUAL_REVIEW)).toEqual({
      won: false,
      refusals: ['execution_ended'],
    });
    await unchanged(late.id, OperationStatus.MANUAL_REVIEW);
    // A completed execution is not bound by its deadline any more: the reviewer's release is carried out.
    const done = await heldPastDeadline('held-completed', 'completed', '1 hour');
    expect((await send(done.id, release, OperationStatus.MANUAL_REVIEW)).won).toBe(true);
  });

  it('does not release after a cancel that committed while the release waited for the held row (the row locked first)', async () => {
    const { held, executionId } = await heldWithRelease('held-race', 'waiting_for_approval');
    // The caller's cancel, as ExecutionsService.cancel writes it: the execution's operations locked (a held row is not
    // rewritten), then the execution moved — held open while the release starts.
    await withSessions(db.dataSource, ['cancel'], async ({ cancel }) => {
      await cancel.startTransaction();
      await cancel.query(`SELECT id FROM operations WHERE execution_id = $1 ORDER BY id FOR UPDATE`, [executionId]);
      await cancel.query(`UPDATE executions SET status = 'cancelled' WHERE id = $1`, [executionId]);
      const releasing = senderReleases(held.id, { kind: 'release' });
      // Proven waiting on the cancel's row lock (not slept on): its backend shows a lock wait.
      await waitForLockWaiter(db.dataSource);
      await cancel.commitTransaction();
      expect(await releasing).toEqual({ sent: { won: false } });
    });
    await unchanged(held.id, OperationStatus.MANUAL_REVIEW);
    expect(await sendRefusals(db.dataSource.manager, held.id, { kind: 'release' })).toEqual(['execution_ended']);
  });

  describe('an operation naming a resend_ref (a provider that does not deduplicate)', () => {
    const sms = (key: string, ref: string): NewOperation =>
      op(key, {
        connector: 'sandbox.sms',
        action: 'send',
        params: { to: '+15550100', body: 'Hi', client_ref: ref },
        resend_ref: ref,
      });

    it('is not sent while another send of its reference was made and is not settled', async () => {
      const ref = newId('msg');
      const first = sms('first', ref);
      await execution([first]);
      const cases: [string, number, boolean][] = [
        ['SENT', 1, true],
        ['UNKNOWN', 1, true],
        ['RECONCILING', 1, true],
        ['MANUAL_REVIEW', 1, true],
        // Held before it was ever sent, or settled: no effect of uncertain outcome to make twice.
        ['MANUAL_REVIEW', 0, false],
        ['ACKNOWLEDGED', 1, false],
        ['VERIFIED', 1, false],
        ['FAILED', 1, false],
      ];
      for (const [status, attempt, blocks] of cases) {
        // Accepted at intake while the first was not sent yet; the first goes out (and its outcome is unknown) after.
        await set(first.id, `status = 'PREPARED', attempt = 0`);
        const later = sms('later', ref);
        await execution([later]);
        await set(first.id, `status = $2, attempt = $3`, [status, attempt]);
        if (blocks) {
          expect(await send(later.id)).toEqual({ won: false, refusals: ['reference_unsettled'] });
          await unchanged(later.id);
        } else {
          expect(await send(later.id)).toEqual({ won: true, refusals: [] });
          // Settled again, so it holds nothing back in the next case.
          await set(later.id, `status = 'VERIFIED'`);
        }
      }
      // Another reference, or none, is not held back by it.
      const other = sms('other', newId('msg'));
      const plain = op('plain', { connector: 'sandbox.sms', action: 'send', params: { to: '+15550100', body: 'Hi' } });
      await execution([other, plain]);
      await set(first.id, `status = 'UNKNOWN', attempt = 1`);
      expect(await send(other.id)).toEqual({ won: true, refusals: [] });
      expect(await send(plain.id)).toEqual({ won: true, refusals: [] });
    });

    it('two sends of one reference prepared at once take turns: the second sees the first SENT and is refused', async () => {
      const ref = newId('msg');
      const a = sms('a', ref);
      const b = sms('b', ref);
      await execution([a, b]);
      let written!: () => void;
      const aWritten = new Promise<void>((resolve) => (written = resolve));
      const commitSent = (id: string, gate?: Promise<void>) =>
        commitWithinSpendingCaps(
          db.dataSource,
          {
            tenantId: 'acme',
            connector: 'sandbox.sms',
            operationId: id,
            caps: [],
            amountOf: () => null,
            resendRef: ref,
          },
          async (tx) => {
            const sent = await sentFromPrepared(transitions, tx, id, dispatch);
            if (gate) {
              written();
              await gate;
            }
            return sent;
          },
        );
      let open!: () => void;
      const gate = new Promise<void>((resolve) => (open = resolve));
      // A's SENT is written, not committed yet (its transaction waits on the gate), when B's send starts.
      const sendingA = commitSent(a.id, gate);
      await aWritten;
      let settled = false;
      const sendingB = commitSent(b.id).finally(() => (settled = true));
      // B waits for A's turn (not slept on: its backend shows a lock wait), or, without the turn, is done at once.
      await waitForLockWaiter(db.dataSource, { unless: () => settled });
      open();
      expect(await sendingA).toMatchObject({ sent: { won: true } });
      expect(await sendingB).toEqual({ sent: { won: false } });
      expect(await sendRefusals(db.dataSource.manager, b.id, dispatch)).toEqual(['reference_unsettled']);
      await unchanged(b.id);
    });
  });

  it('counts every send made while a spending cap is being set: none commits unseen by the cap', async () => {
    // What ConnectorSettingsService.put writes for a first cap of one operation a day (its transaction held open after
    // the backfill, where it reads the usage it answers with), while a send prepared from the settings read before the
    // cap (no row: no cap, so no cap lock, nothing in the ledger) commits SENT.
    const cap = { period: 'day' as const, max_operations: 1 };
    const racing = op('racing');
    await execution([racing]);
    const readBefore = null;
    let sending: Promise<unknown>;
    await withSessions(db.dataSource, ['admin'], async ({ admin }) => {
      await admin.startTransaction();
      await lockSpendingCaps(admin.manager, 'acme', 'sandbox.payments');
      await changeConnectorSettings(
        admin.manager,
        { tenantId: 'acme', connector: 'sandbox.payments', by: 'key_admin' },
        () =>
          upsertConnectorSettings(admin.manager, 'acme', 'sandbox.payments', { spendingCaps: [cap], by: 'key_admin' }),
      );
      await backfillSpend(admin.manager, 'acme', 'sandbox.payments', 86_400);
      let settled = false;
      sending = commitWithinSpendingCaps(
        db.dataSource,
        { tenantId: 'acme', connector: 'sandbox.payments', operationId: racing.id, caps: [], amountOf: () => null },
        (tx) =>
          sentFromPrepared(
            transitions,
            tx,
            racing.id,
            { ...dispatch, settingsVersion: readBefore },
            { sent_at: 'now' },
          ),
      ).finally(() => (settled = true));
      // Either it committed at once, or it waits for the admin's change (not slept on: its backend shows a lock wait).
      await waitForLockWaiter(db.dataSource, { unless: () => settled });
      await admin.commitTransaction();
      const outcome = (await sending) as { sent?: { won: boolean } };
      // Not sent: only because it was prepared from the settings before the cap (it is prepared again from the cap).
      if (!outcome.sent?.won) {
        expect(
          await sendRefusals(db.dataSource.manager, racing.id, { ...dispatch, settingsVersion: readBefore }),
        ).toEqual(['settings_changed']);
      }
    });
    // The cap is in force: whatever was sent in its window is in its usage, so one more send is over it.
    const [{ sent }] = (await db.dataSource.query(
      `SELECT count(*)::int AS sent FROM operations WHERE tenant_id = 'acme' AND connector = 'sandbox.payments'
          AND attempt > 0 AND sent_at >= now() - interval '1 day'`,
    )) as { sent: number }[];
    const usage = await spendingUsage(db.dataSource.manager, 'acme', 'sandbox.payments', cap, null);
    expect(usage.operations).toBe(sent);
  });

  it('commits no send after a clear of the settings it was prepared from: it waits for the clear, then is refused', async () => {
    // A reviewer's release of a held http call (its SENT statement in a transaction, as commitWithinSpendingCaps makes it
    // for a release), prepared from the allowlist read before an admin clears it (DELETE
    // /v1/admin/connector-settings/http, as ConnectorSettingsService.clear writes it, its transaction held open). Without
    // the turn every settings change takes, the statement read the version from the row the clear had not committed
    // yet and passed; its transaction then committed SENT after the clear — sent through an allowlist the admin had
    // been told (204) was gone.
    const { held } = await heldWithRelease('through-allowlist', 'running');
    await set(held.id, `connector = 'http', action = 'request'`);
    await upsertConnectorSettings(db.dataSource.manager, 'acme', 'http', {
      allowHosts: [{ host: 'hooks.example.com' }],
      by: 'key_admin',
    });
    const found = await findOperationToSend(db.dataSource.manager, held.id, { connectors: [], cipher: NO_CIPHER });
    const release: SendGuard = { kind: 'release', settingsVersion: found!.settings.version };
    expect(release.settingsVersion).toMatch(/^\d+$/);
    let written!: () => void;
    const statementDone = new Promise<void>((resolve) => (written = resolve));
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    // Assigned by the admin's session below, awaited once the gate opens.
    let sending!: Promise<unknown>;
    await withSessions(db.dataSource, ['admin'], async ({ admin }) => {
      await admin.startTransaction();
      await changeConnectorSettings(admin.manager, { tenantId: 'acme', connector: 'http', by: 'key_admin' }, () =>
        clearConnectorSettings(admin.manager, 'acme', 'http'),
      );
      let passed = false;
      sending = commitWithinSpendingCaps(
        db.dataSource,
        {
          tenantId: 'acme',
          connector: 'http',
          operationId: held.id,
          caps: [],
          amountOf: () => null,
          lockOperationFirst: true,
        },
        async (tx) => {
          const sent = await transitions.operation(tx, {
            operation: { id: held.id, status: OperationStatus.MANUAL_REVIEW, attempt: 0, verificationMethod: '' },
            to: OperationStatus.SENT,
            actor: 'human',
            bumpAttempt: true,
            sendGuard: release,
          });
          passed = true;
          written();
          // Its transaction commits only once the clear has (the gate opens after the admin's commit).
          await gate;
          return sent;
        },
      );
      // The statement waits for the clear (not slept on: its backend shows a lock wait), or it is done at once.
      await waitForLockWaiter(db.dataSource, { unless: () => passed });
      await admin.commitTransaction();
    });
    await statementDone;
    open();
    expect(await sending).toEqual({ sent: { won: false } });
    expect(await sendRefusals(db.dataSource.manager, held.id, release)).toEqual(['settings_changed']);
    await unchanged(held.id, OperationStatus.MANUAL_REVIEW);
  });

  describe('a SENT statement that waits for its operation’s row (another writer holds it)', () => {
    /**
     * The statement starts (and judges what it reads), then waits for the operation's row, held by another session as
     * a reviewer's decision or a sweep does. Meanwhile `change` is made and committed in a transaction of its own, and
     * is answered at once or waits for the statement (writeWhileRowHeld). Then the row is let go. The send is written only before the
     * change committed (the change waited for it); otherwise it is refused. Judged from the statement's snapshot, it was
     * written after a change it never saw, however long it waited.
     */
    async function sendWhileRowHeld(id: string, guard: SendGuard, change: (tx: EntityManager) => Promise<unknown>) {
      const { written, statusSeenByChange } = await writeWhileRowHeld(db.dataSource, id, () => send(id, guard), change);
      return { ...written, changeSawSend: statusSeenByChange === OperationStatus.SENT };
    }

    it('is not written after an admin’s approval rule it never saw (approval_policy_changed)', async () => {
      const charge = op('charge-under-new-rule');
      await execution([charge]);
      const guard = await judgedAgainstPolicy(charge.id, dispatch);
      try {
        const result = await sendWhileRowHeld(charge.id, guard, (tx) =>
          changeTenantPolicy(tx, 'acme', {
            set: { approvalRules: [{ connector: 'sandbox.payments' }] },
            remove: [],
            by: 'key_admin',
          }),
        );
        if (result.won) expect(result.changeSawSend).toBe(true);
        else expect(result.refusals).toEqual(['approval_policy_changed']);
      } finally {
        await changeTenantPolicy(db.dataSource.manager, 'acme', {
          set: {},
          remove: ['approvalRules'],
          by: 'key_admin',
        });
      }
    });

    it('is not written after the VERIFIED it depends on was contradicted (dependency_not_done)', async () => {
      const charge = op('paid');
      const sms = op('paid-sms', { connector: 'sandbox.sms', verification_method: '', depends_on: ['paid'] });
      await execution([charge, sms]);
      await set(charge.id, `status = 'VERIFIED', attempt = 1`);
      const result = await sendWhileRowHeld(sms.id, dispatch, (tx) =>
        tx.query(`UPDATE operations SET rejected_at = now() WHERE id = $1`, [charge.id]),
      );
      if (result.won) expect(result.changeSawSend).toBe(true);
      else expect(result.refusals).toEqual(['dependency_not_done']);
    });

    it('is not written after the FAILED it retries, or one up its chain, was refuted (retry_refuted)', async () => {
      const original = op('refuted-original');
      const between = op('refuted-between');
      const retry = op('refuted-retry');
      await execution([original]);
      await execution([between]);
      await execution([retry]);
      await set(original.id, `status = 'FAILED', attempt = 1`);
      await set(between.id, `status = 'CANCELLED', retry_of = $2`, [original.id]);
      await set(retry.id, `retry_of = $2`, [between.id]);
      const result = await sendWhileRowHeld(retry.id, dispatch, (tx) =>
        tx.query(`UPDATE operations SET acknowledged_at = now() WHERE id = $1`, [original.id]),
      );
      if (result.won) expect(result.changeSawSend).toBe(true);
      else expect(result.refusals).toEqual(['retry_refuted']);
    });
  });

  describe('a SENT statement that waits for a row it share-locks while its execution ends', () => {
    /**
     * How a writer that ends an execution writes it (ExecutionsService.cancel, LifecycleService expire): its rows locked
     * (operations, then the execution), its PREPARED operations cancelled, the execution moved to `to`, its held
     * never-sent operations cancelled — one transaction.
     */
    async function endExecution(
      tx: EntityManager,
      executionId: string,
      to: ExecutionStatus.CANCELLED | ExecutionStatus.EXPIRED,
    ) {
      const locked = await lockExecutionForWorker(tx, executionId);
      const cause = CANCEL_CAUSE_OF_ENDED_EXECUTION[to];
      for (const o of locked!.operations) {
        if (o.status !== OperationStatus.PREPARED) continue;
        await transitions.operation(tx, {
          operation: snapshotOf(o),
          to: OperationStatus.CANCELLED,
          eventData: { cause },
        });
      }
      await transitions.execution(tx, { executionId, from: locked!.status, to });
      await transitions.cancelHeldOfEndedExecution(tx, locked!.operations.map(snapshotOf), { cause });
    }

    /**
     * An `end` that writes nothing: it waits (in its transaction, reading the clock afresh each time) until the
     * database's clock is past `instant` (SQL, `$1` the id): the execution's deadline, or a grant's expiry.
     */
    function clockPasses(instant: string, id: string) {
      return (tx: EntityManager) =>
        waitFor(
          async () =>
            ((await tx.query(`SELECT clock_timestamp() > (${instant}) AS past`, [id])) as { past: boolean }[])[0].past,
          (past) => past,
        );
    }

    /** The execution ends by its deadline, before the sweeper expires it (see clockPasses). */
    const deadlinePasses = (executionId: string) =>
      clockPasses(`SELECT deadline_at FROM executions WHERE id = $1`, executionId);

    /** Moves the execution's deadline `seconds` ahead of the database's clock. */
    async function deadlineIn(executionId: string, seconds: number) {
      await db.dataSource.query(
        `UPDATE executions SET deadline_at = clock_timestamp() + make_interval(secs => $2) WHERE id = $1`,
        [executionId, seconds],
      );
    }

    /**
     * `hold` takes a row the send's statement share-locks, in a writer's transaction of its own. The send starts, takes
     * its snapshot and waits for that row (its backend shows a lock wait). The execution is ended by `end` in another
     * transaction (or its deadline passes: deadlinePasses), which commits at once or waits itself (then two sessions
     * wait on locks). Then the writer commits without changing what the send judges. Answers what the send answered
     * and whether the end had committed first.
     */
    async function sendWhileExecutionEnds<T>(
      hold: (tx: EntityManager) => Promise<unknown>,
      end: (tx: EntityManager) => Promise<unknown>,
      sending: () => Promise<T>,
    ): Promise<{ sent: T; endedFirst: boolean }> {
      return withSessions(db.dataSource, ['writer', 'ender'], async ({ writer, ender }) => {
        await writer.startTransaction();
        await hold(writer.manager);
        let answered = false;
        const sent = sending().finally(() => (answered = true));
        sent.catch(() => undefined);
        await waitForLockWaiter(db.dataSource, { unless: () => answered });
        expect(answered).toBe(false);
        let ended = false;
        const ending = (async () => {
          await ender.startTransaction();
          await end(ender.manager);
          await ender.commitTransaction();
        })().finally(() => (ended = true));
        ending.catch(() => undefined);
        await waitFor(
          async () => ended || (await lockWaiters(db.dataSource)) >= 2,
          (done) => done,
        );
        const endedFirst = ended;
        await writer.commitTransaction();
        const result = await sent;
        await ending;
        return { sent: result, endedFirst };
      });
    }

    /** The send lost to the end that committed while it waited (its execution no longer running), which cancelled it. */
    async function expectLostToTheEnd(id: string, { sent, endedFirst }: { sent: unknown; endedFirst: boolean }) {
      expect({ sent, endedFirst }).toEqual({
        sent: { won: false, refusals: ['execution_not_running'] },
        endedFirst: true,
      });
      expect(await statusOf(id)).toBe(OperationStatus.CANCELLED);
    }

    async function statusOf(id: string) {
      return (await db.dataSource.getRepository(OperationEntity).findOneByOrFail({ id })).status;
    }

    it('does not dispatch for an execution cancelled while it waited for the tenant’s row (a policy write)', async () => {
      const charge = op('charge-cancelled-under-policy-write');
      const executionId = await execution([charge]);
      const guard = await judgedAgainstPolicy(charge.id, dispatch);
      const answer = await sendWhileExecutionEnds(
        // The row a policy change locks first (TENANT_POLICY_SQL.lockPolicy), committed with nothing changed.
        (tx) => tx.query(TENANT_POLICY_SQL.lockPolicy, ['acme']),
        (tx) => endExecution(tx, executionId, ExecutionStatus.CANCELLED),
        () => send(charge.id, guard),
      );
      // The cancel rewrote the PREPARED row during the wait: the statement's compare-and-set re-reads the row it
      // updates as committed now (not as its snapshot had it) and finds it CANCELLED.
      await expectLostToTheEnd(charge.id, answer);
    });

    it('does not dispatch for an execution expired while it waited for the row of the key that granted it', async () => {
      const key = newId('key');
      await insertStandingKeys(db.dataSource.manager, 'acme', [key]);
      const charge = op('charge-expired-under-key-write', {
        requires_approval: true,
        approval: { state: 'granted', decided_by: key, expires_at: new Date(Date.now() + 600_000).toISOString() },
      });
      const executionId = await execution([charge]);
      const answer = await sendWhileExecutionEnds(
        (tx) => tx.query(`SELECT 1 FROM api_keys WHERE id = $1 FOR NO KEY UPDATE`, [key]),
        (tx) => endExecution(tx, executionId, ExecutionStatus.EXPIRED),
        () => send(charge.id),
      );
      await expectLostToTheEnd(charge.id, answer);
    });

    it('does not dispatch once the execution’s deadline passed while it waited for the tenant’s row (a policy write)', async () => {
      const charge = op('charge-deadline-under-policy-write');
      const executionId = await execution([charge]);
      const guard = await judgedAgainstPolicy(charge.id, dispatch);
      await deadlineIn(executionId, 2);
      const { sent, endedFirst } = await sendWhileExecutionEnds(
        (tx) => tx.query(TENANT_POLICY_SQL.lockPolicy, ['acme']),
        deadlinePasses(executionId),
        () => send(charge.id, guard),
      );
      // The deadline was ahead when the statement started and behind when its wait ended: judged after the wait.
      expect({ sent, endedFirst }).toEqual({ sent: { won: false, refusals: ['execution_ended'] }, endedFirst: true });
      await unchanged(charge.id);
    });

    it('does not dispatch once its grant expired while it waited for the row of the key that granted it', async () => {
      const key = newId('key');
      await insertStandingKeys(db.dataSource.manager, 'acme', [key]);
      const charge = op('charge-grant-expiring-under-key-write', { requires_approval: true });
      await execution([charge]);
      await set(
        charge.id,
        `approval = jsonb_build_object('state', 'granted', 'decided_by', $2::text,
                              'expires_at', clock_timestamp() + interval '2 seconds')`,
        [key],
      );
      const { sent, endedFirst } = await sendWhileExecutionEnds(
        (tx) => tx.query(`SELECT 1 FROM api_keys WHERE id = $1 FOR NO KEY UPDATE`, [key]),
        // Not an end: the grant's expiry passes, by the database's clock.
        clockPasses(`SELECT (approval->>'expires_at')::timestamptz FROM operations WHERE id = $1`, charge.id),
        () => send(charge.id),
      );
      expect({ sent, endedFirst }).toEqual({
        sent: { won: false, refusals: ['approval_not_granted'] },
        endedFirst: true,
      });
      await unchanged(charge.id);
    });

    it('does not release once the execution’s deadline passed while it waited for the row of a dependency', async () => {
      // A release locks its operation's row and its execution's before its statement, and then waits in the statement
      // for the rows it share-locks (here the latest generation of what it depends on, held by a writer that annotates
      // it): the deadline goes on meanwhile.
      const charge = op('paid-before-deadline');
      const sms = op('held-deadline-under-dependency-write', { depends_on: ['paid-before-deadline'] });
      const executionId = await execution([charge, sms]);
      await set(charge.id, `status = 'VERIFIED', attempt = 1`);
      await set(sms.id, RELEASE_RECORDED);
      const guard: SendGuard = { kind: 'release' };
      await deadlineIn(executionId, 2);
      const { sent, endedFirst } = await sendWhileExecutionEnds(
        (tx) => tx.query(`SELECT 1 FROM operations WHERE id = $1 FOR NO KEY UPDATE`, [charge.id]),
        deadlinePasses(executionId),
        () => senderReleases(sms.id, guard),
      );
      expect({ sent, endedFirst }).toEqual({ sent: { sent: { won: false } }, endedFirst: true });
      await unchanged(sms.id, OperationStatus.MANUAL_REVIEW);
      expect(await sendRefusals(db.dataSource.manager, sms.id, guard)).toEqual(['execution_ended']);
    });

    it('releases before a cancel that comes while it waits for the tenant’s row: the cancel waits for the release', async () => {
      const { held, executionId } = await heldWithRelease('held-under-policy-write', 'running');
      const guard = await judgedAgainstPolicy(held.id, { kind: 'release' });
      const { sent, endedFirst } = await sendWhileExecutionEnds(
        (tx) => tx.query(TENANT_POLICY_SQL.lockPolicy, ['acme']),
        (tx) => endExecution(tx, executionId, ExecutionStatus.CANCELLED),
        () => senderReleases(held.id, guard),
      );
      // The cancel could not end the execution during the wait (the release holds its rows): it waited, and ended it
      // after the send — which it leaves to be reconciled (I11).
      expect(endedFirst).toBe(false);
      expect(sent).toEqual({ sent: expect.objectContaining({ won: true }) });
      const history = await db.dataSource.query(
        `SELECT operation_id IS NOT NULL AS of_operation, to_status FROM events WHERE execution_id = $1 ORDER BY seq`,
        [executionId],
      );
      expect(history.slice(-2)).toEqual([
        { of_operation: true, to_status: OperationStatus.SENT },
        { of_operation: false, to_status: ExecutionStatus.CANCELLED },
      ]);
      expect(await statusOf(held.id)).toBe(OperationStatus.SENT);
    });
  });

  it('will not commit SENT without a guard', async () => {
    const charge = op('charge');
    await execution([charge]);
    await expect(
      transitions.operation(db.dataSource.manager, {
        operation: { id: charge.id, status: OperationStatus.PREPARED, attempt: 0, verificationMethod: '' },
        to: OperationStatus.SENT,
      }),
    ).rejects.toThrow(/send guard/);
    await unchanged(charge.id);
  });
});

describe('the order of the guard’s conditions (sendGuardSql)', () => {
  // Every guard the sender builds, with every optional check on: a condition that locks a row or reads the clock
  // must say so, or `sendGuardSql` leaves it to the planner's order and a send that waited could judge a deadline
  // from before its wait (decisions: "the send guard reads the clock after every condition that may wait").
  const guards: SendGuard[] = [
    {
      kind: 'dispatch',
      approvalRequired: true,
      approvalPolicy: '{}',
      executionFrom: ExecutionStatus.PLANNING,
      settingsVersion: 'v1',
    },
    { kind: 'release', approvalRequired: true, approvalPolicy: '{}', settingsVersion: 'v1' },
  ];
  const locks = /\bFOR (SHARE|UPDATE|NO KEY UPDATE|KEY SHARE)\b|_locked\(/i;
  const clock = /clock_timestamp\(\)|\bnow\(\)|current_timestamp|localtimestamp/i;

  it.each(guards.map((g) => [g.kind, g] as const))(
    '%s: each condition that locks a row may wait; each that reads the clock says so',
    (_, guard) => {
      const conditions = sendGuardConditions(guard, []);
      expect(conditions.length).toBeGreaterThan(5);
      for (const c of conditions) {
        if (locks.test(c.sql))
          expect({ name: c.name, evaluation: c.evaluation }).toEqual({ name: c.name, evaluation: 'may-wait' });
        if (clock.test(c.sql))
          expect({ name: c.name, evaluation: c.evaluation }).toEqual({ name: c.name, evaluation: 'reads-clock' });
        // Judged at a statement's stamp, it reads no other clock: a SENT's sent_at is the instant it was judged at.
        if (c.evaluation === 'reads-clock')
          expect({ name: c.name, atStampReadsClock: clock.test(c.atClock('(SELECT at FROM stamp)')) }).toEqual({
            name: c.name,
            atStampReadsClock: false,
          });
      }
    },
  );
});
