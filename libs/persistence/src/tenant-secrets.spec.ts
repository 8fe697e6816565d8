import { randomBytes } from 'node:crypto';
import { useTestDatabase } from '../../../test/support/test-database';
import { writeConnectorSecret } from './connector-settings.repository';
import { loadTenantSecrets } from './entities/connector-settings.entity';
import { SecretUnreadableError, SecretsCipher } from './secrets-cipher';

/** What every answer to a tenant is looked through for (answerRedactorOf): its secrets alone, opened, in one read. */
describe('loadTenantSecrets (real Postgres)', () => {
  const db = useTestDatabase('tenantsecrets', ['acme', 'other']);
  const cipher = new SecretsCipher(randomBytes(32).toString('base64'));

  it("reads the tenant's secrets of the connectors asked for, opened; another tenant's, or connector's, never", async () => {
    const m = db.dataSource.manager;
    await writeConnectorSecret(m, cipher, 'acme', 'http', 'crm_token', 'crm-token-value', 't');
    await writeConnectorSecret(m, cipher, 'acme', 'http', 'other_token', 'other-token-value', 't');
    await writeConnectorSecret(m, cipher, 'acme', 'sandbox.sms', 'crm_token', 'not-asked-for', 't');
    await writeConnectorSecret(m, cipher, 'other', 'http', 'crm_token', 'another-tenant', 't');
    const found = await loadTenantSecrets(m, 'acme', ['http'], cipher);
    expect(found.sort((a, b) => a.name.localeCompare(b.name))).toEqual([
      { connector: 'http', name: 'crm_token', value: 'crm-token-value' },
      { connector: 'http', name: 'other_token', value: 'other-token-value' },
    ]);
    expect(await loadTenantSecrets(m, 'acme', [], cipher)).toEqual([]);
    expect(await loadTenantSecrets(m, 'nobody', ['http'], cipher)).toEqual([]);
  });

  it('throws SecretUnreadableError for a secret that does not open with this key', async () => {
    const another = new SecretsCipher(randomBytes(32).toString('base64'));
    await expect(loadTenantSecrets(db.dataSource.manager, 'acme', ['http'], another)).rejects.toBeInstanceOf(
      SecretUnreadableError,
    );
  });
});
