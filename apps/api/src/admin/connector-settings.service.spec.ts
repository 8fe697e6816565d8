import { ConnectorRegistry, TenantConnectors, TenantSecrets, TenantSecretsCache } from '@verity/connectors';
import {
  KeyRevokedError,
  SecretsCipher,
  changeConnectorSettings,
  connectorSettingsVersion,
  spendingUsage,
  upsertConnectorSettings,
  writeConnectorSecret,
} from '@verity/persistence';
import type { VerityConfig } from '@verity/platform';
import pino from 'pino';
import {
  chargeOperation,
  insertStandingKeys,
  insertTestExecution,
  markSentWithoutLedger,
  spendLedger,
} from '../../../../test/support/fixtures';
import { waitForLockWaiter, writeDuringRevocation } from '../../../../test/support/lock-waits';
import { useTestDatabase } from '../../../../test/support/test-database';
import type { Principal } from '../auth/principal';
import { Problem } from '../problem/problem';
import { ConnectorSettingsService } from './connector-settings.service';

/**
 * A caps PUT counts what its window already holds (the sends made before the cap), and a PUT refused writes nothing —
 * not the ledger rows of that count either (they are written with the change, in its transaction).
 */
describe('ConnectorSettingsService.put with spending caps (real Postgres)', () => {
  const db = useTestDatabase('capsput', ['acme', 'beta', 'gamma']);
  const CONNECTOR = 'sandbox.payments';
  const acme: Principal = { keyId: 'key_capsput_acme', tenantId: 'acme', role: 'admin' };
  const beta: Principal = { keyId: 'key_capsput_beta', tenantId: 'beta', role: 'admin' };
  const cap = { period: 'day' as const, max_amount: 1000, amount_field: 'amount' };
  const otherCap = { period: 'hour' as const, max_operations: 5 };
  let service: ConnectorSettingsService;

  beforeAll(async () => {
    await insertStandingKeys(db.dataSource.manager, 'acme', [acme.keyId]);
    await insertStandingKeys(db.dataSource.manager, 'beta', [beta.keyId]);
    service = new ConnectorSettingsService(
      db.dataSource,
      new SecretsCipher(undefined),
      new ConnectorRegistry(),
      { NODE_ENV: 'test' } as VerityConfig,
      pino({ level: 'silent' }),
    );
  });

  /** A send of 300 by `tenantId` made before any cap (SENT, never counted in the ledger). */
  async function sentBeforeTheCap(tenantId: string, key: string): Promise<string> {
    const op = chargeOperation({ key, params: { amount: 300, currency: 'EUR', reference: `ref-${key}` } });
    await insertTestExecution(db.dataSource.manager, tenantId, { operations: [op] });
    await markSentWithoutLedger(db.dataSource.manager, op.id);
    return op.id;
  }

  it('counts a send made before the cap existed', async () => {
    const id = await sentBeforeTheCap('acme', 'before-cap');
    await service.put(acme, CONNECTOR, { spending_caps: [cap] });
    expect(await spendLedger(db.dataSource.manager, 'acme')).toEqual([id]);
    expect(await spendingUsage(db.dataSource.manager, 'acme', CONNECTOR, cap, ['amount'])).toMatchObject({
      operations: 1,
      amount: 300,
    });
  });

  it('writes nothing, no ledger row either, when its If-Match version moved after its pre-check (412)', async () => {
    await sentBeforeTheCap('beta', 'before-refused');
    const version = await connectorSettingsVersion(db.dataSource.manager, 'beta', CONNECTOR);
    // Another change holds the caps' lock when the PUT's prefill takes its mark, and commits a new version meanwhile.
    const other = db.dataSource.createQueryRunner();
    await other.connect();
    let refusal: unknown;
    try {
      await other.startTransaction();
      await changeConnectorSettings(other.manager, { tenantId: 'beta', connector: CONNECTOR, by: beta.keyId }, () =>
        upsertConnectorSettings(other.manager, 'beta', CONNECTOR, { spendingCaps: [otherCap], by: beta.keyId }),
      );
      let answered = false;
      const putting = service
        .put(beta, CONNECTOR, { spending_caps: [cap] }, { ifMatch: [version] })
        .finally(() => (answered = true));
      putting.catch(() => undefined);
      await waitForLockWaiter(db.dataSource, { unless: () => answered });
      expect(answered).toBe(false);
      await other.commitTransaction();
      refusal = await putting.then(
        () => 'taken',
        (error: unknown) => error,
      );
    } finally {
      if (other.isTransactionActive) await other.rollbackTransaction();
      await other.release();
    }
    expect(refusal).toBeInstanceOf(Problem);
    expect((refusal as Problem).status).toBe(412);
    expect(await spendLedger(db.dataSource.manager, 'beta')).toEqual([]);
    // The settings are the other change's.
    expect((await service.get(beta, CONNECTOR)).view.spending_caps).toEqual([otherCap]);
  });
  it('writes nothing, no ledger row either, when its key is revoked while it is made', async () => {
    const gamma: Principal = { keyId: 'key_capsput_gamma', tenantId: 'gamma', role: 'admin' };
    await insertStandingKeys(db.dataSource.manager, 'gamma', [gamma.keyId]);
    await sentBeforeTheCap('gamma', 'before-revoked');
    const refusal = await writeDuringRevocation(db.dataSource, gamma.keyId, () =>
      service.put(gamma, CONNECTOR, { spending_caps: [cap] }).then(
        () => 'taken',
        (error: unknown) => error,
      ),
    );
    expect(refusal).toBeInstanceOf(KeyRevokedError);
    expect(await spendLedger(db.dataSource.manager, 'gamma')).toEqual([]);
  });
});

/**
 * The API process that changes a tenant's secrets answers its next request with the secrets of now, not with what it
 * kept before the change: it does not wait for its own NOTIFY to reach it (the change's answer may come first).
 */
describe("ConnectorSettingsService: the values kept by the process that changes a tenant's secrets (real Postgres)", () => {
  const db = useTestDatabase('secretwriter', ['acme']);
  const acme: Principal = { keyId: 'key_secretwriter_acme', tenantId: 'acme', role: 'admin' };
  const VALUE = 'value-w-Qx81pL';
  const OTHER = 'another-w-Zr2';
  const text = `paid with ${VALUE} and ${OTHER}`;
  let kept: TenantSecretsCache<TenantSecrets>;
  let connectors: TenantConnectors;
  let service: ConnectorSettingsService;

  beforeAll(async () => {
    await insertStandingKeys(db.dataSource.manager, 'acme', [acme.keyId]);
    const cipher = new SecretsCipher(undefined);
    const registry = new ConnectorRegistry();
    const config = { NODE_ENV: 'test' } as VerityConfig;
    kept = new TenantSecretsCache<TenantSecrets>();
    // As while the process listens: its LISTEN connection is up, and no announcement of these changes reached it yet.
    kept.setLive(true);
    connectors = new TenantConnectors(registry, db.dataSource, cipher, config, kept);
    service = new ConnectorSettingsService(db.dataSource, cipher, registry, config, pino({ level: 'silent' }), kept);
  });

  const answered = async () => (await connectors.answerRedactorOf('acme'))(text);

  it('a secret set, replaced, deleted or cleared is what its next answer is redacted with', async () => {
    expect(await answered()).toBe(text);
    expect(kept.tenants).toBe(1);
    await service.put(acme, 'http', { secrets: { tok: VALUE } });
    expect(await answered()).toBe(`paid with {{secret:tok}} and ${OTHER}`);
    await service.put(acme, 'http', { secrets: { tok: OTHER } });
    expect(await answered()).toBe(`paid with ${VALUE} and {{secret:tok}}`);
    await service.deleteSecret(acme, 'http', 'tok');
    expect(await answered()).toBe(text);
    await service.put(acme, 'http', { secrets: { tok: VALUE } });
    expect(await answered()).toBe(`paid with {{secret:tok}} and ${OTHER}`);
    await service.clear(acme, 'http');
    expect(await answered()).toBe(text);
  });
  it('a secret stored before the 8-character minimum is replaced only where a string is its whole value', async () => {
    // Written as it was before values under 8 characters were refused.
    await writeConnectorSecret(db.dataSource.manager, new SecretsCipher(undefined), 'acme', 'http', 'pin', '1', 'k');
    kept.changed('acme');
    const answer = {
      id: 'exe_01J9Z1A1',
      status: 'MANUAL_REVIEW',
      created_at: '2026-12-01T10:11:12.100Z',
      params: { pin: '1', amount: 1, note: 'order 1 of 11' },
    };
    expect((await connectors.answerRedactorOf('acme'))(answer)).toEqual({
      ...answer,
      params: { ...answer.params, pin: '{{secret:pin}}' },
    });
    await service.clear(acme, 'http');
  });
});
