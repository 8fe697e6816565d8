/**
 * Secret masking shared by the review API and the browser console (esbuild bundles it into the console's script, so
 * it stays free of imports: nothing of the server may follow it into the browser). Reviewers judge whether an effect
 * happened; they never need a credential to do it, so values under secret-looking keys, `{{secret:…}}` references,
 * bearer tokens and secret-looking query parameters are replaced before anything is shown.
 */
export const MASK = '••••••';

const SECRET_KEY_PARTS = [
  'token',
  'secret',
  'password',
  'passwd',
  'passphrase',
  'authorization',
  'apikey',
  'credential',
  'privatekey',
  'cookie',
  'signature',
  'cvv',
  'cvc',
  'cardnumber',
];

export function isSecretKey(key: string): boolean {
  const normalized = key.toLowerCase().replace(/[^a-z0-9]/g, '');
  return SECRET_KEY_PARTS.some((part) => normalized.includes(part));
}

/**
 * A query parameter that names a credential: a secret-looking name, or one with a word `key` or `auth` in it
 * (`api_key`, `apiKey`, `auth`) — as a word, so `monkey`, `keyword` and `author` are shown as they are.
 */
export function isSecretParam(name: string): boolean {
  if (isSecretKey(name)) return true;
  const words = name
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .toLowerCase()
    .split(/[^a-z0-9]+/);
  return words.includes('key') || words.includes('auth');
}

export function maskString(value: string): string {
  return (
    value
      .replace(/\{\{\s*secret:[^}]*\}\}/gi, `{{secret:${MASK}}}`)
      // A bearer token is token68 (RFC 6750's b64token): what follows its own characters (`Bearer abc$500`, `…€500`) is
      // text a reviewer reads. Basic's credential stays masked up to a separator: written unencoded, `user:pa$$`, it
      // holds any character.
      .replace(/\b(Bearer)\s+[A-Za-z0-9\-._~+/]+=*/gi, `$1 ${MASK}`)
      .replace(/\b(Basic)\s+[^\s"',;]+/gi, `$1 ${MASK}`)
      .replace(/([?&])([^=&#\s]+)=([^&#\s]*)/g, (match, separator: string, name: string) =>
        isSecretParam(name) ? `${separator}${name}=${MASK}` : match,
      )
  );
}

export function maskSecrets<T>(value: T): T {
  return maskValue(value, 0) as T;
}

function maskValue(value: unknown, depth: number): unknown {
  if (depth > 32) return MASK;
  if (typeof value === 'string') return maskString(value);
  if (Array.isArray(value)) return value.map((item) => maskValue(item, depth + 1));
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [key, inner] of Object.entries(value as Record<string, unknown>)) {
      out[key] =
        isSecretKey(key) && inner !== null && inner !== undefined && inner !== '' ? MASK : maskValue(inner, depth + 1);
    }
    return out;
  }
  return value;
}
