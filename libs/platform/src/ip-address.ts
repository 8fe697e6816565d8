import { isIP } from 'node:net';

/**
 * Spellings of an address, shared by the egress checks (@verity/connectors) and the failed-authentication counts of the
 * API and the workers (auth-failures.ts).
 */

export function parseIpv4(address: string): number[] | null {
  const parts = address.split('.');
  if (parts.length !== 4 || !parts.every((p) => /^(0|[1-9][0-9]{0,2})$/.test(p))) return null;
  const bytes = parts.map(Number);
  return bytes.every((b) => b <= 255) ? bytes : null;
}

/** 16 bytes of an IPv6 address (with or without brackets, `::` and a dotted IPv4 tail), or null. */
export function parseIpv6(input: string): number[] | null {
  let address = input.startsWith('[') && input.endsWith(']') ? input.slice(1, -1) : input;
  if (address.includes('%')) address = address.slice(0, address.indexOf('%'));
  let tail: number[] = [];
  const lastColon = address.lastIndexOf(':');
  if (address.slice(lastColon + 1).includes('.')) {
    const dotted = parseIpv4(address.slice(lastColon + 1));
    if (!dotted) return null;
    tail = dotted;
    address = `${address.slice(0, lastColon + 1)}0:0`;
  }
  const halves = address.split('::');
  if (halves.length > 2) return null;
  const group = (s: string) => (s === '' ? [] : s.split(':'));
  const head = group(halves[0]);
  const rest = halves.length === 2 ? group(halves[1]) : [];
  const missing = 8 - head.length - rest.length;
  if (halves.length === 1 ? missing !== 0 : missing < 1) return null;
  const groups = [...head, ...Array<string>(halves.length === 2 ? missing : 0).fill('0'), ...rest];
  const bytes: number[] = [];
  for (const g of groups) {
    if (!/^[0-9a-f]{1,4}$/i.test(g)) return null;
    const n = parseInt(g, 16);
    bytes.push(n >> 8, n & 0xff);
  }
  if (tail.length) bytes.splice(12, 4, ...tail);
  return bytes;
}

/** A URL's host as the HTTP client will use it: lower case, no brackets, no trailing dot. */
export function normalizeHost(host: string): string {
  let h = host.toLowerCase();
  if (h.startsWith('[') && h.endsWith(']')) h = h.slice(1, -1);
  return h.endsWith('.') ? h.slice(0, -1) : h;
}

/**
 * One spelling per address, so two spellings of one address compare equal: an IPv4-mapped IPv6 address as the IPv4
 * address it carries (`::ffff:192.0.2.2` is 192.0.2.2), any other IPv6 address fully written out; a name as it is.
 */
export function canonicalAddress(host: string): string {
  const bare = normalizeHost(host).split('%')[0];
  if (isIP(bare) !== 6) return bare;
  const bytes = parseIpv6(bare);
  if (!bytes) return bare;
  if (bytes.slice(0, 10).every((b) => b === 0) && bytes[10] === 0xff && bytes[11] === 0xff) {
    return bytes.slice(12).join('.');
  }
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(((bytes[i] << 8) | bytes[i + 1]).toString(16));
  return groups.join(':');
}
