import { randomBytes, timingSafeEqual } from 'node:crypto';
import { isIP } from 'node:net';
import type { IncomingHttpHeaders } from 'node:http';

/**
 * Calls this API process makes to itself for a client: the MCP endpoint's tools call the REST API over loopback with
 * the client's key. Such a call comes from a loopback address, but it is the client's: failed authentications (its key
 * revoked while its calls were under way) must count against the address the client came from, not against the
 * address every MCP call of every tenant shares — 127.0.0.1 would be blocked for the minute, and every tenant's MCP
 * tools with it. The call names the client's address in a header, believed only beside this process's own token (32
 * random bytes, made at start, never sent anywhere but to this process itself).
 */
const TOKEN = randomBytes(32).toString('base64url');
const TOKEN_HEADER = 'x-verity-internal-call';
const CLIENT_HEADER = 'x-verity-client-address';

/** The headers of a call made to this process for a client at `clientAddress`. */
export function internalCallHeaders(clientAddress: string): Record<string, string> {
  return { [TOKEN_HEADER]: TOKEN, [CLIENT_HEADER]: clientAddress };
}

/** The client a call made by this process for a client was made for; undefined for any other request. */
export function internalCallClient(headers: IncomingHttpHeaders): string | undefined {
  const token = headers[TOKEN_HEADER];
  const client = headers[CLIENT_HEADER];
  if (typeof token !== 'string' || typeof client !== 'string' || !isIP(client)) return undefined;
  const given = Buffer.from(token);
  const ours = Buffer.from(TOKEN);
  return given.length === ours.length && timingSafeEqual(given, ours) ? client : undefined;
}
