import { lookup as dnsLookup } from 'node:dns';
import { isIP } from 'node:net';
import type { LookupFunction } from 'node:net';
import { networkInterfaces } from 'node:os';
import { canonicalAddress, hiddenCharacterIn, normalizeHost, parseIpv4, parseIpv6 } from '@verity/platform';
import type { AllowedHost } from './connector';

// Where they were defined first; the API's and the workers' failure counts (@verity/platform) read addresses too.
export { canonicalAddress, normalizeHost, parseIpv6 };

/**
 * Outbound request policy for connectors that call tenant-chosen hosts (SSRF defence). Order of checks:
 * scheme (http/https only) → no credentials in the URL → host on the tenant's allowlist (and port) → every address
 * the host resolves to is public, unless the tenant explicitly allowed private addresses for that host. The address
 * that was vetted is the one connected to: `lookupFor` hands the HTTP client the vetted answer (no DNS rebinding).
 * And never one of the platform's own services (`PlatformService`), whatever the allowlist says.
 */

export type AddressCategory =
  | 'public'
  | 'unspecified'
  | 'loopback'
  | 'private'
  | 'link_local'
  | 'shared_cgnat'
  | 'multicast'
  | 'broadcast'
  | 'reserved'
  | 'documentation'
  | 'unique_local'
  | 'ipv4_translated';

/** Never a legitimate target, whatever the tenant allows. */
const NEVER_ALLOWED: ReadonlySet<AddressCategory> = new Set(['unspecified', 'multicast', 'broadcast', 'reserved']);

interface Range {
  bytes: number[];
  bits: number;
  category: AddressCategory;
}

const v4 = (cidr: string, category: AddressCategory): Range => {
  const [address, bits] = cidr.split('/');
  return { bytes: address.split('.').map(Number), bits: Number(bits), category };
};

const IPV4_RANGES: Range[] = [
  v4('0.0.0.0/8', 'unspecified'),
  v4('10.0.0.0/8', 'private'),
  v4('100.64.0.0/10', 'shared_cgnat'),
  v4('127.0.0.0/8', 'loopback'),
  v4('169.254.0.0/16', 'link_local'),
  v4('172.16.0.0/12', 'private'),
  v4('192.0.0.0/24', 'reserved'),
  v4('192.0.2.0/24', 'documentation'),
  v4('192.88.99.0/24', 'reserved'),
  v4('192.168.0.0/16', 'private'),
  v4('198.18.0.0/15', 'reserved'),
  v4('198.51.100.0/24', 'documentation'),
  v4('203.0.113.0/24', 'documentation'),
  v4('224.0.0.0/4', 'multicast'),
  v4('255.255.255.255/32', 'broadcast'),
  v4('240.0.0.0/4', 'reserved'),
];

function matches(bytes: number[], range: Range): boolean {
  let bits = range.bits;
  for (let i = 0; bits > 0; i += 1, bits -= 8) {
    const mask = bits >= 8 ? 0xff : (0xff << (8 - bits)) & 0xff;
    if ((bytes[i] & mask) !== (range.bytes[i] & mask)) return false;
  }
  return true;
}

function startsWith(bytes: number[], prefix: number[], bits: number): boolean {
  return matches(bytes, { bytes: prefix, bits, category: 'reserved' });
}

/** What kind of address this is. Anything unparseable is `reserved` (refused). */
export function classifyAddress(address: string): AddressCategory {
  const family = isIP(address.startsWith('[') ? address.slice(1, -1) : address.split('%')[0]);
  if (family === 4) {
    const bytes = parseIpv4(address);
    if (!bytes) return 'reserved';
    return IPV4_RANGES.find((r) => matches(bytes, r))?.category ?? 'public';
  }
  const b = family === 6 ? parseIpv6(address) : null;
  if (!b) return 'reserved';
  const zeros = (n: number) => b.slice(0, n).every((x) => x === 0);
  if (zeros(16)) return 'unspecified';
  if (zeros(15) && b[15] === 1) return 'loopback';
  // IPv4-mapped (::ffff:a.b.c.d) is judged as the IPv4 address it carries; IPv4-compatible (::a.b.c.d) is obsolete.
  if (zeros(10) && b[10] === 0xff && b[11] === 0xff) return classifyAddress(b.slice(12).join('.'));
  if (zeros(12)) return 'reserved';
  // NAT64 (64:ff9b::/96, and its local-use 64:ff9b:1::/48, RFC 8215), SIIT's IPv4-translated addresses
  // (::ffff:0:a.b.c.d, RFC 2765), 6to4 (2002::/16) and Teredo (2001::/32) reach IPv4 hosts a v6 check would not see.
  if (startsWith(b, [0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0], 96)) return 'ipv4_translated';
  if (startsWith(b, [0x00, 0x64, 0xff, 0x9b, 0x00, 0x01], 48)) return 'ipv4_translated';
  if (zeros(8) && b[8] === 0xff && b[9] === 0xff && b[10] === 0 && b[11] === 0) return 'ipv4_translated';
  if (startsWith(b, [0x20, 0x02], 16)) return 'ipv4_translated';
  if (startsWith(b, [0x20, 0x01, 0x00, 0x00], 32)) return 'ipv4_translated';
  if (startsWith(b, [0x20, 0x01, 0x0d, 0xb8], 32)) return 'documentation';
  if (startsWith(b, [0xfc], 7)) return 'unique_local';
  if (startsWith(b, [0xfe, 0x80], 10)) return 'link_local';
  if (startsWith(b, [0xfe, 0xc0], 10)) return 'private';
  if (startsWith(b, [0xff], 8)) return 'multicast';
  if (startsWith(b, [0x01, 0x00, 0, 0, 0, 0, 0, 0], 64)) return 'reserved';
  return 'public';
}

export function isAddressAllowed(category: AddressCategory, allowPrivate: boolean): boolean {
  if (category === 'public') return true;
  return allowPrivate && !NEVER_ALLOWED.has(category);
}

/**
 * The host exactly as written in the URL (before WHATWG parsing turns `2130706433` or `0x7f.1` into 127.0.0.1).
 * Used to refuse ambiguous IPv4 spellings outright, at intake.
 */
export function rawHostOf(url: string): string | null {
  // As the parser reads an http(s) URL: any run of "/" and "\" after the scheme, the authority ending at the first
  // "/", "\", "?" or "#", and the host after its last "@". (A URL taken since urlSpellingProblem has neither "\"
  // nor fewer than two slashes there; one stored before may.)
  const match = /^[a-z][a-z0-9+.-]*:[/\\]*(?:[^/?#\\]*@)?(\[[^\]]*\]|[^:/?#\\]*)/i.exec(url.trim());
  return match ? match[1] : null;
}

/** The port of an http(s) URL as written (the digits after the host's ":"), null when none is written. */
function rawPortOf(url: string): string | null {
  const match = /^[a-z][a-z0-9+.-]*:[/\\]*(?:[^/?#\\]*@)?(?:\[[^\]]*\]|[^:/?#\\]*):([^/?#\\]*)/i.exec(url.trim());
  return match ? match[1] : null;
}

/**
 * A URL must be written as it will be called. The URL parser drops every tab and line break wherever they are, and
 * spaces and control characters at either end: `http://allow\ned.example/` is checked and called as
 * `http://allowed.example/` while the record keeps (and shows) the other string. Refused where a URL is taken.
 */
export function urlSpellingProblem(raw: string): string | null {
  // eslint-disable-next-line no-control-regex -- the characters the URL parser removes are the point
  if (/[\t\n\r]/.test(raw) || /^[\u0000-\u0020]|[\u0000-\u0020]$/.test(raw)) {
    return 'no tabs or line breaks, and no spaces at either end: the URL parser drops them, so the URL called would not be the one written';
  }
  // The parser's rules for http(s) URLs: "http:host", "http:/host" and "http:\\host" are read as "http://host"; a
  // backslash before the query is read as "/" (in the host part it moves the host: "http://a.example\@b.example/"
  // calls a.example, while a reader, and an RFC 3986 parser, sees b.example); an empty user info ("http://@host") is
  // dropped. Each would let the record show another URL than the one called, and the host checks that read the URL
  // as written (IPv4 in dotted-decimal form only) judge another host than the one called.
  if (/^https?:/i.test(raw)) {
    if (!/^https?:\/\/(?![/\\])/i.test(raw)) {
      return 'write it as http://host/… or https://host/…: the URL parser reads other slashes after the scheme as these, so the URL called would not be the one written';
    }
    if (raw.split(/[?#]/, 1)[0].includes('\\')) {
      return 'no backslash before the query: the URL parser reads it as "/", so the URL called (its host, its path) would not be the one written';
    }
    if (/^https?:\/\/:?@/i.test(raw)) {
      return 'no "@" before the host: an empty user info is dropped, so the URL called would not be the one written';
    }
    // "hooks.example.com." (also "%2E" at the end, or "127.0.0.1.", which the parser makes 127.0.0.1): the allowlist
    // compares hosts without the dot, but DNS does not always read the two alike — a name without it may be completed
    // with the resolver's search domains ("api" reaching api.corp.example), one with it never ("api." is the top-level
    // name) — and the Host header and the TLS name carry it. One spelling, so an entry names one host.
    if (rawHostOf(raw)?.endsWith('.') || parsedHostname(raw)?.endsWith('.')) {
      return 'no dot at the end of the host ("hooks.example.com", not "hooks.example.com."): DNS, the Host header and TLS may read the two as different hosts, while the allowlist takes them for one';
    }
    // The parser rewrites a name's host (IDNA): it maps "。" to ".", folds fullwidth letters, drops soft hyphens and
    // zero-width characters, decodes %-escapes and writes Unicode in punycode. "hooks.ex\u00adample.com" would be
    // shown while hooks.example.com is called. Letter case aside, a name is written as called; an IPv6 address is
    // judged by its bytes, a numeric host by the dotted-decimal rule (nonCanonicalIpv4).
    const written = rawHostOf(raw);
    const called = parsedHostname(raw);
    if (
      written !== null &&
      called !== null &&
      !written.startsWith('[') &&
      !nonCanonicalIpv4(raw) &&
      written.toLowerCase() !== called
    ) {
      return `write the host in ASCII as it is called ("${called}"): the URL parser rewrites this one (Unicode, %-escapes, invisible characters), so the URL called would not be the one written`;
    }
    // A name DNS cannot carry (an empty label, a label over 63 characters, more than 253 in all) resolves nowhere: as
    // for port 0, every call would fail. (`*.example.com` matched `..example.com` besides.)
    if (
      called !== null &&
      !called.startsWith('[') &&
      !isIP(called) &&
      (called.length > 253 || called.split('.').some((label) => label === '' || label.length > 63))
    ) {
      return 'each label of the host name is 1 to 63 characters ("a..example.com" has an empty one): DNS cannot look it up, so every call would fail';
    }
    // Port 0 (":0", ":00") is no port a server listens on: every call would fail, and a webhook endpoint would be
    // disabled for failures that no receiver caused.
    if (parsedPort(raw) === '0') {
      return 'port 0 cannot be called: name the port the server listens on, or none for the scheme’s own';
    }
    // "http://127.0.0.1:042309/x": the parser drops a port's leading zeros (it calls 42309, or the scheme's own port
    // for ":080"), while the record keeps and shows the digits as written.
    const port = rawPortOf(raw);
    if (port !== null && /^0\d/.test(port)) {
      return `no leading zeros in the port (":${port.replace(/^0+/, '') || '0'}", not ":${port}"): the URL parser drops them, so the URL called would not be the one written`;
    }
  }
  return null;
}

/**
 * A target URL has no fragment ("#…"): it is never sent, so the URL shown would not be the URL called. Where a URL is
 * taken: a webhook's, and an http operation's (its request, read-back and context read). A reviewer deciding on an
 * approval reads `…/payouts?amount=250000#&amount=25` or `…/accounts/acc_1/close#preview` as a request it is not.
 * An http operation stored with one before is requested, and judged for read-back binding, without it.
 */
export function urlFragmentProblem(raw: string): string | null {
  return raw.includes('#')
    ? 'no fragment ("#…"): it is never sent, so the URL called would not be the one written'
    : null;
}

/**
 * A target URL has no dot segment in its path (`.` or `..`, also percent-encoded): the URL parser resolves it, so
 * `https://hooks.example.com/a/%2e%2e/hook` is listed as the endpoint while every delivery goes to `/hook`. In the query
 * such text is never resolved. Where a URL is taken: a webhook's, and an http operation's request and context read (an
 * approver reads `/payouts/acc_1/../acc_2` as a call to acc_1). A read-back's URL may hold one: the read-back binding
 * judges the URL as sent.
 */
export function urlDotSegmentProblem(raw: string): string | null {
  const path = /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*([^?#]*)/i.exec(raw)?.[1] ?? '';
  const dotSegment = path.split('/').some((segment) => /^(?:\.|%2e){1,2}$/i.test(segment));
  return dotSegment
    ? 'no dot segment ("." or "..", also as %2e) in the path: the URL parser resolves it away, so the URL called would not be the one written'
    : null;
}

/**
 * A target URL holds no character that hides or reorders what is shown (hiddenCharacterIn: bidi controls such as
 * U+202E and U+2066–U+2069, zero-width and other invisible characters, control characters), written or
 * percent-encoded. Where a URL is read by a person deciding something — a webhook endpoint's, in the endpoint list and
 * the history of changes — `…/hooks/\u202Ekcatta` is shown as `…/hooks/attack`. The parser sends such a character
 * percent-encoded, and tools show a path's and a query's escapes decoded (a browser's address bar, many log viewers),
 * so `%E2%80%AE` is refused as U+202E is. A run of escapes that is no UTF-8 text is shown as escapes, never as other
 * text, and is taken.
 */
export function urlHiddenCharacterProblem(raw: string): string | null {
  const written = hiddenCharacterIn(raw);
  const encoded = written === null ? hiddenCharacterIn(decodedEscapes(raw)) : null;
  if (written === null && encoded === null) return null;
  return (
    `no ${written ?? `${encoded} (percent-encoded)`}: a control, bidi or invisible character makes the URL shown ` +
    'read as another than the one called (also percent-encoded: tools show escapes decoded)'
  );
}

/**
 * urlHiddenCharacterProblem for the characters written as they are, escapes taken: an http operation's URLs (its
 * request's, its read-back's, its context read's), which an approver reads to approve a charge or a message —
 * `/pay/\u202Eelgoog` is shown as another path. Their query may carry a message's text, where `%0A` is a line of it:
 * an escape is shown as written by the approval views, so only the raw character is refused.
 */
export function urlWrittenHiddenCharacterProblem(raw: string): string | null {
  const written = hiddenCharacterIn(raw);
  return written === null
    ? null
    : `no ${written}: a control, bidi or invisible character makes the URL shown read as another than the one called (write it percent-encoded if it is the text sent)`;
}

/** `raw` with each run of percent-escapes decoded as UTF-8: a byte that is no part of a character as U+FFFD. */
function decodedEscapes(raw: string): string {
  return raw.replace(/(?:%[0-9a-f]{2})+/gi, (run) => Buffer.from(run.replace(/%/g, ''), 'hex').toString('utf8'));
}

function parsedPort(raw: string): string | null {
  try {
    return new URL(raw).port;
  } catch {
    return null; // refused by the URL checks that follow
  }
}

function parsedHostname(raw: string): string | null {
  try {
    return new URL(raw).hostname;
  } catch {
    return null; // refused by the URL checks that follow
  }
}

/** Numeric-looking hosts must be plain dotted-decimal IPv4: decimal, octal, hex and short forms are refused. */
export function nonCanonicalIpv4(url: string): boolean {
  const raw = rawHostOf(url);
  if (raw === null || raw.startsWith('[')) return false;
  const host = raw.endsWith('.') ? raw.slice(0, -1) : raw;
  const lastLabel = host.split('.').pop() ?? '';
  // WHATWG treats a host whose last label is numeric (decimal, 0x hex, octal) as an IPv4 address.
  if (!/^(0x[0-9a-f]*|[0-9]+)$/i.test(lastLabel)) return false;
  return parseIpv4(host) === null;
}

export type EgressRefusal = { code: 'EGRESS_BLOCKED'; message: string };

export interface EgressTarget {
  url: URL;
  host: string;
  port: number;
  entry: AllowedHost;
  platform: readonly PlatformService[];
}

/**
 * A listener of the platform itself — the sandbox provider, the API, Postgres, Redis, a worker's metrics — which no
 * tenant's http call or webhook may reach, even with `allow_private` for its host: the sandbox tells its accounts
 * apart by a header any caller can set and its `/__reset` wipes every tenant's charges; the API, the stores and the
 * metrics belong to every tenant at once. (With private egress off, as in production, they are private addresses and
 * refused anyway; this holds where it is on: development, the demo, tests.)
 */
export interface PlatformService {
  name: string;
  /** As configured: an IP address, `localhost`, a name (a compose service), or an address it listens on (0.0.0.0). */
  host: string;
  port: number;
}

/** The platform's services from its configuration; URLs that name no TCP port (a Unix socket) name no service. */
export function platformServices(config: {
  SANDBOX_URL: string;
  HOST: string;
  PORT: number;
  DATABASE_URL: string;
  REDIS_URL: string;
  DISPATCHER_METRICS_PORT: number;
  RECONCILER_METRICS_PORT: number;
  REDIS_CLUSTER_NODES?: readonly string[];
}): PlatformService[] {
  const fromUrl = (name: string, raw: string, defaultPort: number): PlatformService[] => {
    try {
      const url = new URL(raw);
      if (!url.hostname) return [];
      return [{ name, host: normalizeHost(url.hostname), port: url.port ? Number(url.port) : defaultPort }];
    } catch {
      return [];
    }
  };
  const listener = (name: string, port: number): PlatformService[] =>
    port > 0 ? [{ name, host: normalizeHost(config.HOST), port }] : [];
  return [
    ...fromUrl('the sandbox provider', config.SANDBOX_URL, 80),
    ...listener('the Verity API', config.PORT),
    ...fromUrl('Postgres', config.DATABASE_URL, 5432),
    ...(/^rediss?:/i.test(config.REDIS_URL) ? fromUrl('Redis', config.REDIS_URL, 6379) : []),
    ...(config.REDIS_CLUSTER_NODES ?? []).flatMap((node) =>
      fromUrl('Redis', /^rediss?:\/\//i.test(node) ? node : `redis://${node}`, 6379),
    ),
    ...listener('the dispatcher metrics', config.DISPATCHER_METRICS_PORT),
    ...listener('the reconciler metrics', config.RECONCILER_METRICS_PORT),
  ];
}

/** Whether an address (or `localhost`) is this machine's: loopback, "every interface", or one of its interfaces. */
function onThisMachine(host: string): boolean {
  if (host === 'localhost') return true;
  const address = canonicalAddress(host);
  if (!isIP(address)) return false;
  const category = classifyAddress(address);
  if (category === 'loopback' || category === 'unspecified') return true;
  return Object.values(networkInterfaces()).some((list) => list?.some((i) => canonicalAddress(i.address) === address));
}

/**
 * The platform service a target address and port would reach, if any. The same address, or — for a service on this
 * machine (loopback, or listening on every interface) — any address of this machine, on the service's port. A service
 * named by a host name (a compose service) is matched by the addresses that name resolves to (`lookupFor`).
 */
export function platformServiceAt(
  services: readonly PlatformService[],
  host: string,
  port: number,
): PlatformService | undefined {
  const addresses = [canonicalAddress(host), ...translatedIpv4Of(host)];
  return services.find(
    (s) =>
      s.port === port &&
      addresses.some(
        (address) => canonicalAddress(s.host) === address || (onThisMachine(s.host) && onThisMachine(address)),
      ),
  );
}

/** The bytes of the IPv4 address a NAT64 prefix of this length carries (RFC 6052 2.2: bits 64–71 are skipped). */
const NAT64_IPV4_BYTES: Readonly<Record<number, readonly number[]>> = {
  48: [6, 7, 9, 10],
  56: [7, 9, 10, 11],
  64: [9, 10, 11, 12],
  96: [12, 13, 14, 15],
};

/**
 * The IPv4 addresses an IPv4-translated IPv6 address (classifyAddress's `ipv4_translated`) may carry, which a translator
 * on the platform's network (NAT64, SIIT; a DNS64 resolver answers names so) sends it to: the last 32 bits of
 * 64:ff9b::/96 and ::ffff:0:a.b.c.d, and for the local-use 64:ff9b:1::/48 each place its prefix length (48 to 96, which
 * the address does not say) may put them. A platform service is judged by each of them, as an IPv4-mapped address is by
 * the one it carries (canonicalAddress). 6to4 and Teredo go through relays on the internet, not to the platform's own
 * addresses.
 */
function translatedIpv4Of(host: string): string[] {
  const address = canonicalAddress(host);
  const bytes = isIP(address) === 6 ? parseIpv6(address) : null;
  if (!bytes) return [];
  const ipv4 = (at: readonly number[]) => at.map((i) => bytes[i]).join('.');
  const prefix = (p: number[]) => p.every((b, i) => bytes[i] === b);
  if (prefix([0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0])) return [ipv4(NAT64_IPV4_BYTES[96])];
  if (prefix([0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0])) return [ipv4(NAT64_IPV4_BYTES[96])];
  if (prefix([0x00, 0x64, 0xff, 0x9b, 0x00, 0x01])) return Object.values(NAT64_IPV4_BYTES).map(ipv4);
  return [];
}

function platformRefusal(service: PlatformService, host: string, port: number): string {
  return `${host}:${port} reaches ${service.name} of this platform, never a tenant's target`;
}

/** Whether an allowlist entry's host (`api.example.com`, `*.example.com`) names `host` (normalized). */
export function hostMatches(pattern: string, host: string): boolean {
  const p = normalizeHost(pattern);
  if (p.startsWith('*.')) return host.endsWith(p.slice(1)) && host.length > p.length - 1;
  return p === host;
}

/**
 * The allowlist entry a URL falls under: the first one (in the tenant's order) that names its host — exactly or by
 * wildcard — and allows its port. The one place that decides it: the egress check (`checkTarget`) and the secrets an
 * entry binds (`secretBindingProblems`, and the connector at the call) must never judge a URL by different entries.
 * Taking the port into account lets an admin give one host different entries per port (each binding its own secrets);
 * only entries for the same host pattern as the first match are considered, so a later wildcard never widens a
 * specific entry's ports.
 */
export function allowlistEntryOf(
  url: URL,
  allowHosts: readonly AllowedHost[] | undefined,
): { entry: AllowedHost; host: string; port: number } | { refusal: string } {
  const host = normalizeHost(url.hostname);
  const port = url.port ? Number(url.port) : url.protocol === 'https:' ? 443 : 80;
  const first = (allowHosts ?? []).find((e) => hostMatches(e.host, host));
  if (!first) return { refusal: `host ${host} is not on this tenant's allowlist` };
  // Only entries written for the same host as the first one that names it: a specific entry keeps confining its host
  // to its ports (and its allow_private, its secrets), whatever a later wildcard would allow.
  const forHost = (allowHosts ?? []).filter((e) => normalizeHost(e.host) === normalizeHost(first.host));
  const entry = forHost.find((e) => !e.ports || e.ports.length === 0 || e.ports.includes(port));
  if (!entry) return { refusal: `port ${port} is not allowed for host ${host}` };
  return { entry, host, port };
}

/** Scheme, credentials, allowlist and port: everything that can be judged before a DNS lookup. */
export function checkTarget(
  rawUrl: string,
  allowHosts: readonly AllowedHost[] | undefined,
  platform: readonly PlatformService[] = [],
): EgressTarget | EgressRefusal {
  const refuse = (message: string): EgressRefusal => ({ code: 'EGRESS_BLOCKED', message });
  let url: URL;
  try {
    url = new URL(rawUrl);
  } catch {
    return refuse('the URL does not parse');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return refuse(`scheme ${url.protocol} is not allowed`);
  if (url.username || url.password) return refuse('credentials in the URL are not allowed');
  if (nonCanonicalIpv4(rawUrl)) return refuse('IPv4 addresses must be written in dotted-decimal form');
  const found = allowlistEntryOf(url, allowHosts);
  if ('refusal' in found) return refuse(found.refusal);
  const { entry, host, port } = found;
  if (isIP(host)) {
    const category = classifyAddress(host);
    if (!isAddressAllowed(category, entry.allow_private === true)) {
      return refuse(`${host} is a ${category.replace('_', '-')} address, not allowed for this host`);
    }
  }
  // By the name or address as written; a name is judged again by what it resolves to (lookupFor).
  const service = platformServiceAt(platform, host, port);
  if (service) return refuse(platformRefusal(service, host, port));
  return { url, host, port, entry, platform };
}

/**
 * A tenant's allowlist as the platform lets it act: without private egress (TENANT_PRIVATE_EGRESS off) its
 * `allow_private` entries count as plain ones, so an entry written before the operator turned it off allows nothing
 * private either.
 */
export function effectiveAllowHosts(
  allowHosts: AllowedHost[] | undefined,
  privateEgress: boolean,
): AllowedHost[] | undefined {
  if (!allowHosts || privateEgress) return allowHosts;
  return allowHosts.map((entry) => (entry.allow_private ? { ...entry, allow_private: false } : entry));
}

/**
 * The addresses a request may reach in cleartext (plain `http://`) with a tenant secret in it: within the operator's own
 * network (loopback, private, link-local, unique local), which a tenant reaches only with `allow_private`. Anywhere
 * else the secret crosses networks readable by whoever is on the way, and nothing proves the other end is the host its
 * allowlist entry binds it to (DNS is not authenticated; TLS is what would).
 */
const CLEARTEXT_SECRET_CATEGORIES: ReadonlySet<AddressCategory> = new Set([
  'loopback',
  'private',
  'link_local',
  'unique_local',
]);

/** Why a secret may not be sent in cleartext to this address, or null when it may (CLEARTEXT_SECRET_CATEGORIES). */
export function cleartextSecretRefusal(host: string, port: number, address: string): string | null {
  const category = classifyAddress(address);
  if (CLEARTEXT_SECRET_CATEGORIES.has(category)) return null;
  const target = `${isIP(host) === 6 ? `[${host}]` : host}:${port}`;
  return `a secret may not be sent over plain http:// to ${target}: it reaches a ${category.replace('_', '-')} address, where the secret can be read on the way, and answered, by whoever is between; use https://`;
}

export type Resolver = (hostname: string) => Promise<{ address: string; family: number }[]>;

export const systemResolver: Resolver = (hostname) =>
  new Promise((resolve, reject) =>
    dnsLookup(hostname, { all: true, verbatim: true }, (error, addresses) =>
      error ? reject(error) : resolve(addresses),
    ),
  );

/**
 * A DNS lookup for the HTTP client that resolves once, refuses the whole answer if any address is not allowed, and
 * returns the first vetted address — the one the socket then connects to. `onRefused` learns why (for the outcome);
 * an empty answer is a failed resolution (ENOTFOUND), not a refusal.
 */
export function lookupFor(
  target: EgressTarget,
  onRefused: (message: string, cause?: 'secret_not_bound') => void,
  resolver: Resolver = systemResolver,
  policy: { secretInCleartext?: boolean } = {},
): LookupFunction {
  const allowPrivate = target.entry.allow_private === true;
  return ((hostname: string, options: { all?: boolean }, callback: (...args: unknown[]) => void) => {
    resolver(hostname).then(
      async (addresses) => {
        if (addresses.length === 0) {
          // No address is a failed resolution, like any other (it may pass): not a refusal of the egress policy.
          callback(Object.assign(new Error(`${target.host} did not resolve`), { code: 'ENOTFOUND' }));
          return;
        }
        const blocked = addresses
          .map((a) => classifyAddress(a.address))
          .find((c) => !isAddressAllowed(c, allowPrivate));
        if (blocked) {
          const message = `${target.host} resolves to a ${blocked.replace('_', '-')} address, not allowed for this host`;
          onRefused(message);
          callback(Object.assign(new Error(message), { code: 'EGRESS_BLOCKED' }));
          return;
        }
        // A secret over plain http: every address must be the operator's own (cleartextSecretRefusal), or none is used.
        const cleartext = policy.secretInCleartext
          ? addresses.map((a) => cleartextSecretRefusal(target.host, target.port, a.address)).find((r) => r !== null)
          : undefined;
        if (cleartext) {
          onRefused(cleartext, 'secret_not_bound');
          callback(Object.assign(new Error(cleartext), { code: 'EGRESS_BLOCKED' }));
          return;
        }
        const service = await platformServiceResolved(target, addresses, resolver);
        if (service) {
          const message = platformRefusal(service, target.host, target.port);
          onRefused(message);
          callback(Object.assign(new Error(message), { code: 'EGRESS_BLOCKED' }));
          return;
        }
        const chosen = addresses[0];
        if (options?.all) callback(null, [{ address: chosen.address, family: chosen.family }]);
        else callback(null, chosen.address, chosen.family);
      },
      (error: NodeJS.ErrnoException) => callback(error),
    );
  }) as unknown as LookupFunction;
}

/**
 * The platform service a resolved target reaches: by address (platformServiceAt), or by the addresses of a service
 * configured by name on the same port (resolved only then: almost no target shares a port with a service).
 */
async function platformServiceResolved(
  target: EgressTarget,
  addresses: readonly { address: string }[],
  resolver: Resolver,
): Promise<PlatformService | undefined> {
  for (const { address } of addresses) {
    const service = platformServiceAt(target.platform, address, target.port);
    if (service) return service;
  }
  const ours = new Set(addresses.flatMap((a) => [canonicalAddress(a.address), ...translatedIpv4Of(a.address)]));
  for (const service of target.platform) {
    if (service.port !== target.port || isIP(service.host) || service.host === 'localhost') continue;
    const theirs = await resolver(service.host).catch(() => []);
    if (theirs.some((t) => ours.has(canonicalAddress(t.address)))) return service;
  }
  return undefined;
}

/**
 * For a target written as an IP address (the HTTP client makes no lookup for it, so `lookupFor` never runs): the
 * platform service that address is, also one configured by a name that resolves to it (a compose service's address
 * written out). For a name, the service it resolves to now — a best effort for an endpoint being created; each call
 * is judged again by `lookupFor`. A refusal message, or null.
 */
export async function platformRefusalOf(
  target: EgressTarget,
  resolver: Resolver = systemResolver,
): Promise<string | null> {
  const addresses = isIP(target.host)
    ? [{ address: target.host }]
    : await resolver(target.host).catch(() => [] as { address: string }[]);
  const service = await platformServiceResolved(target, addresses, resolver);
  return service ? platformRefusal(service, target.host, target.port) : null;
}
