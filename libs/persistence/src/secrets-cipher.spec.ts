import { randomBytes } from 'node:crypto';
import { SecretUnreadableError, openSecret, sealSecret, secretBinding, useSecretsKey } from './secrets-cipher';

describe('connector secrets at rest', () => {
  const binding = secretBinding('acme', 'http', 'crm_token');
  afterEach(() => useSecretsKey(undefined));

  it('seals with SECRETS_KEY and opens only with the same key, in the same row', () => {
    useSecretsKey(randomBytes(32).toString('base64'));
    const sealed = sealSecret('s3cret-value', binding);
    expect(sealed).toMatch(/^v1:/);
    expect(sealed).not.toContain('s3cret-value');
    expect(sealSecret('s3cret-value', binding)).not.toBe(sealed);
    expect(openSecret(sealed, binding)).toBe('s3cret-value');
    expect(() => openSecret(sealed, secretBinding('other', 'http', 'crm_token'))).toThrow(SecretUnreadableError);
    useSecretsKey(randomBytes(32).toString('base64'));
    expect(() => openSecret(sealed, binding)).toThrow(SecretUnreadableError);
    useSecretsKey(undefined);
    expect(() => openSecret(sealed, binding)).toThrow(/SECRETS_KEY is not set/);
  });

  it('without a key stores values as given, and reads values stored before a key was set', () => {
    expect(sealSecret('plain', binding)).toBe('plain');
    useSecretsKey(randomBytes(32).toString('base64'));
    expect(openSecret('plain', binding)).toBe('plain');
  });
});
