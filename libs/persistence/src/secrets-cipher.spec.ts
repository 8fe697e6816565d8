import { randomBytes } from 'node:crypto';
import { SecretUnreadableError, SecretsCipher, secretBinding } from './secrets-cipher';
import { connectorSettingsOfRow } from './entities/connector-settings.entity';

describe('connector secrets at rest', () => {
  const binding = secretBinding('acme', 'http', 'crm_token');
  const withKey = () => new SecretsCipher(randomBytes(32).toString('base64'));
  const withoutKey = new SecretsCipher(undefined);

  it('seals with SECRETS_KEY and opens only with the same key, in the same row', () => {
    const cipher = withKey();
    const sealed = cipher.seal('s3cret-value', binding);
    expect(sealed).toMatch(/^v1:/);
    expect(sealed).not.toContain('s3cret-value');
    expect(cipher.seal('s3cret-value', binding)).not.toBe(sealed);
    expect(cipher.open(sealed, binding)).toBe('s3cret-value');
    expect(() => cipher.open(sealed, secretBinding('other', 'http', 'crm_token'))).toThrow(SecretUnreadableError);
    expect(() => withKey().open(sealed, binding)).toThrow(SecretUnreadableError);
    expect(() => withoutKey.open(sealed, binding)).toThrow(/SECRETS_KEY is not set/);
  });

  it('opens only a sealed value carrying its whole 16-byte tag: a shortened tag, forgeable by trial, is refused', () => {
    const cipher = withKey();
    const [iv, tag, sealed] = cipher.seal('s3cret-value', binding).slice('v1:'.length).split(':');
    for (const bytes of [4, 8, 12, 15]) {
      const shortened = Buffer.from(tag, 'base64').subarray(0, bytes).toString('base64');
      expect(() => cipher.open(`v1:${iv}:${shortened}:${sealed}`, binding)).toThrow(SecretUnreadableError);
    }
  });

  it('without a key stores values as given, and reads values stored before a key was set', () => {
    expect(withoutKey.seal('plain', binding)).toBe('plain');
    expect(withKey().open('plain', binding)).toBe('plain');
  });

  it('without a key, a value that begins like a sealed one is kept readable, with the key set later too', () => {
    for (const value of ['v1:not-sealed', 'v1:aaaa:bbbb:cccc', 'plain:v1:x', 'plain:']) {
      const stored = withoutKey.seal(value, binding);
      expect(withoutKey.open(stored, binding)).toBe(value);
      expect(withKey().open(stored, binding)).toBe(value);
    }
    expect(withoutKey.seal('plain-ish', binding)).toBe('plain-ish');
  });
});

describe('connector settings whose secrets do not open (connectorSettingsOfRow)', () => {
  const cipher = new SecretsCipher(randomBytes(32).toString('base64'));
  const row = {
    allow_hosts: [],
    spending_caps: [],
    read_back_binding: null,
    secrets: {
      crm_token: cipher.seal('s3cret-value', secretBinding('acme', 'http', 'crm_token')),
      // Corrupted where it is stored: it opens with no key.
      other: 'v1:AAAA:BBBB:CCCC',
    },
  };

  it('throws by default, as every call that needs them wants', () => {
    expect(() => connectorSettingsOfRow(row, 'acme', 'http', cipher)).toThrow(SecretUnreadableError);
  });

  it('recorded on request: no secret given, the error said, everything else read', () => {
    const settings = connectorSettingsOfRow(row, 'acme', 'http', cipher, { unopened: 'recorded' });
    expect(settings.secrets).toEqual({});
    expect(settings.secretsUnopened).toBeInstanceOf(SecretUnreadableError);
    expect(settings.readBackBinding).toBe('declared');
    const { other: _, ...opening } = row.secrets;
    expect(
      connectorSettingsOfRow({ ...row, secrets: opening }, 'acme', 'http', cipher, { unopened: 'recorded' }),
    ).toEqual({
      allowHosts: [],
      spendingCaps: [],
      readBackBinding: 'declared',
      secrets: { crm_token: 's3cret-value' },
    });
  });
});
