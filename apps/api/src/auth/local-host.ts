import { isIP } from 'node:net';

/**
 * Whether a Host header names this API by an IP address or a loopback name (`localhost`, or a name under
 * `.localhost`, which browsers resolve to loopback themselves, RFC 6761). No page of another site has such a host as
 * its own: under DNS rebinding the browser sends the attacker's host name (`Host: rebound.example:3000`), however its
 * DNS now answers. A missing or unreadable Host is none of these.
 */
export function addressedLocally(host: string | undefined): boolean {
  if (host === undefined) return false;
  const value = host.trim().toLowerCase();
  // `[v6]` or `[v6]:port`; otherwise `name` or `name:port` (a bare IPv6 address is no Host spelling).
  const bracketed = /^\[([^\]]*)\](?::\d*)?$/.exec(value);
  if (bracketed) return isIP(bracketed[1]) === 6;
  const name = /^([^:]*)(?::\d*)?$/.exec(value)?.[1];
  if (!name) return false;
  return isIP(name) === 4 || name === 'localhost' || name.endsWith('.localhost');
}
