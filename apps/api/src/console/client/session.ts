import { Verity, VerityError } from '@verity/sdk';
import { shown } from './shown-text';

const KEY_SLOT = 'verity.console.key';

/** The reviewer key lives in this tab's session storage only, and travels in the Authorization header only. */
export const session = {
  key(): string | null {
    return sessionStorage.getItem(KEY_SLOT);
  },
  signIn(key: string): void {
    sessionStorage.setItem(KEY_SLOT, key);
  },
  signOut(): void {
    sessionStorage.removeItem(KEY_SLOT);
  },
};

let cached: { key: string; client: Verity } | null = null;

/**
 * The SDK's client for this origin and a key. Requests never carry cookies (`credentials: 'omit'`): the key in the
 * Authorization header is the only credential the console sends.
 */
export function clientFor(key: string): Verity {
  if (cached?.key !== key) {
    cached = {
      key,
      client: new Verity({
        baseUrl: location.origin,
        apiKey: key,
        fetch: (input, init) => fetch(input, { ...init, credentials: 'omit' }),
      }),
    };
  }
  return cached.client;
}

type Unauthorized = (error: VerityError) => void;
let onUnauthorized: Unauthorized = () => undefined;

/** Called whenever the API refuses the stored key (revoked mid-session): the console signs out. */
export function whenUnauthorized(handler: Unauthorized): void {
  onUnauthorized = handler;
}

/** A 401 for the stored key: it was revoked (or never valid), and the console returns to sign-in. */
export function checkUnauthorized(error: unknown): void {
  if (error instanceof VerityError && error.status === 401) onUnauthorized(error);
}

/** Runs an SDK call with the signed-in reviewer's key. */
export async function api<T>(call: (dx: Verity) => Promise<T>): Promise<T> {
  const key = session.key();
  if (!key) throw new Error('signed out');
  try {
    return await call(clientFor(key));
  } catch (error) {
    checkUnauthorized(error);
    throw error;
  }
}

/** The API's words for a refusal, or a plain sentence when it could not be reached. */
export function problemText(error: unknown, unreachable = 'the API could not be reached'): string {
  // Set as textContent in places, not through h(): a detail may quote what was sent.
  return shown(error instanceof VerityError ? error.detail || error.title : unreachable);
}
