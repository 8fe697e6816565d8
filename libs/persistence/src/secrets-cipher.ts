import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

const PREFIX = 'v1:';
/**
 * Marks a value stored as given (no key) that begins like a sealed one (`v1:`), or like this marker: without it, such a
 * value was taken for a sealed one when read and could never be used. Values stored as given otherwise carry nothing.
 */
const AS_GIVEN_PREFIX = 'plain:';
/** The AES-GCM tag every sealed value carries, whole (the cipher's default). */
const TAG_BYTES = 16;

export class SecretUnreadableError extends Error {
  override readonly name = 'SecretUnreadableError';
}

/**
 * Connector secrets at rest. With SECRETS_KEY set (32 bytes, base64), every secret is stored sealed with AES-256-GCM
 * (`v1:<iv>:<tag>:<ciphertext>`, base64 parts, the tenant/connector/name bound in as associated data, so a sealed
 * value copied to another row does not open). Without it they are stored as given, as before; values stored before
 * the key was set keep working and are sealed when next written.
 *
 * One instance per app, made from the config by PersistenceModule and injected; the repositories that store or read a
 * secret are handed it, so which key a call uses is visible at the call.
 */
export class SecretsCipher {
  private readonly key: Buffer | null;

  constructor(base64Key: string | undefined) {
    this.key = base64Key ? Buffer.from(base64Key, 'base64') : null;
  }

  /** Whether a key is set (secrets are sealed with it). */
  get sealing(): boolean {
    return this.key !== null;
  }

  seal(value: string, boundTo: string): string {
    if (!this.key) {
      const ambiguous = value.startsWith(PREFIX) || value.startsWith(AS_GIVEN_PREFIX);
      return ambiguous ? `${AS_GIVEN_PREFIX}${value}` : value;
    }
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.key, iv, { authTagLength: TAG_BYTES });
    cipher.setAAD(Buffer.from(boundTo));
    const sealed = Buffer.concat([cipher.update(value, 'utf8'), cipher.final()]);
    return `${PREFIX}${iv.toString('base64')}:${cipher.getAuthTag().toString('base64')}:${sealed.toString('base64')}`;
  }

  open(stored: string, boundTo: string): string {
    if (stored.startsWith(AS_GIVEN_PREFIX)) return stored.slice(AS_GIVEN_PREFIX.length);
    if (!stored.startsWith(PREFIX)) return stored;
    if (!this.key) throw new SecretUnreadableError('a connector secret is sealed but SECRETS_KEY is not set');
    const [iv, tag, sealed] = stored.slice(PREFIX.length).split(':');
    try {
      // The tag's length is fixed: GCM otherwise accepts a tag cut down to 4 bytes, which a writer of the table could
      // forge by trial without the key.
      const decipher = createDecipheriv('aes-256-gcm', this.key, Buffer.from(iv, 'base64'), {
        authTagLength: TAG_BYTES,
      });
      decipher.setAAD(Buffer.from(boundTo));
      decipher.setAuthTag(Buffer.from(tag, 'base64'));
      return Buffer.concat([decipher.update(Buffer.from(sealed, 'base64')), decipher.final()]).toString('utf8');
    } catch {
      throw new SecretUnreadableError('a connector secret does not open with this SECRETS_KEY');
    }
  }
}

/** What a sealed secret is bound to: it opens only in its own row. */
export function secretBinding(tenantId: string, connector: string, name: string): string {
  return `${tenantId}\u0000${connector}\u0000${name}`;
}
