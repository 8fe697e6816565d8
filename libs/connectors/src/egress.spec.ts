import { isIP } from 'node:net';
import { createServer } from 'node:http';
import {
  checkTarget,
  canonicalAddress,
  platformRefusalOf,
  platformServiceAt,
  platformServices,
  classifyAddress,
  effectiveAllowHosts,
  isAddressAllowed,
  lookupFor,
  nonCanonicalIpv4,
  parseIpv6,
  urlFragmentProblem,
  urlHiddenCharacterProblem,
  urlSpellingProblem,
  urlWrittenHiddenCharacterProblem,
} from './egress';
import { guardedExchange } from './http.connector';
import type { AllowedHost } from './connector';
import type { Resolver } from './egress';
import { serveDuringDescribe } from '../../../test/support/local-server';

describe('classifyAddress', () => {
  it.each([
    ['127.0.0.1', 'loopback'],
    ['127.255.255.254', 'loopback'],
    ['10.1.2.3', 'private'],
    ['172.16.0.1', 'private'],
    ['172.31.255.255', 'private'],
    ['192.168.1.1', 'private'],
    ['100.64.0.1', 'shared_cgnat'],
    ['169.254.169.254', 'link_local'],
    ['0.0.0.0', 'unspecified'],
    ['224.0.0.1', 'multicast'],
    ['255.255.255.255', 'broadcast'],
    ['240.0.0.1', 'reserved'],
    ['198.18.0.1', 'reserved'],
    ['::1', 'loopback'],
    ['::', 'unspecified'],
    ['::ffff:127.0.0.1', 'loopback'],
    ['::ffff:7f00:1', 'loopback'],
    ['::ffff:169.254.169.254', 'link_local'],
    ['::ffff:10.0.0.1', 'private'],
    ['::127.0.0.1', 'reserved'],
    ['fc00::1', 'unique_local'],
    ['fd12:3456::1', 'unique_local'],
    ['fe80::1', 'link_local'],
    ['fe80::1%eth0', 'link_local'],
    ['ff02::1', 'multicast'],
    ['64:ff9b::7f00:1', 'ipv4_translated'],
    ['2002:7f00:1::', 'ipv4_translated'],
    ['2001:db8::1', 'documentation'],
    ['not-an-address', 'reserved'],
  ])('%s is %s', (address, category) => {
    expect(classifyAddress(address)).toBe(category);
  });

  it.each(['93.184.216.34', '8.8.8.8', '172.32.0.1', '2606:4700::1111', '::ffff:8.8.8.8'])('%s is public', (a) => {
    expect(classifyAddress(a)).toBe('public');
  });

  it('allows private ranges only when asked, and never unspecified, multicast or broadcast', () => {
    expect(isAddressAllowed('loopback', false)).toBe(false);
    expect(isAddressAllowed('loopback', true)).toBe(true);
    expect(isAddressAllowed('link_local', true)).toBe(true);
    for (const never of ['unspecified', 'multicast', 'broadcast', 'reserved'] as const) {
      expect(isAddressAllowed(never, true)).toBe(false);
    }
  });

  it('parses IPv6 forms into 16 bytes', () => {
    expect(parseIpv6('::1')).toEqual([...Array(15).fill(0), 1]);
    expect(parseIpv6('[::ffff:127.0.0.1]')!.slice(10)).toEqual([0xff, 0xff, 127, 0, 0, 1]);
    expect(parseIpv6('1:2:3:4:5:6:7:8:9')).toBeNull();
    expect(parseIpv6('1::2::3')).toBeNull();
  });
});

describe('nonCanonicalIpv4', () => {
  it.each([
    'http://2130706433/',
    'http://0177.0.0.1/',
    'http://0x7f.0.0.1/',
    'http://0x7f000001/',
    'http://127.1/',
    'http://127.0.1/',
    'http://017700000001/',
    'http://user@2130706433:80/',
  ])('refuses %s', (url) => expect(nonCanonicalIpv4(url)).toBe(true));

  it.each([
    'http://127.0.0.1/',
    'http://api.example.com/',
    'http://[::1]/',
    'http://1.example/',
    'http://0x7f.example/',
  ])('accepts %s', (url) => expect(nonCanonicalIpv4(url)).toBe(false));
});

describe('urlHiddenCharacterProblem', () => {
  it.each([
    ['https://hooks.example.com/a\u202eb', 'U+202E'],
    ['https://hooks.example.com/a?b=\u{e0041}', 'U+E0041'],
    ['https://hooks.example.com/a%E2%80%AEb', 'U+202E (percent-encoded)'],
    // A byte that is no UTF-8 text before or after the escapes of one does not hide it.
    ['https://hooks.example.com/a%FF%E2%80%AE', 'U+202E (percent-encoded)'],
    ['https://hooks.example.com/a%E2%80%AE%FF', 'U+202E (percent-encoded)'],
    ['https://hooks.example.com/a?x=%7F', 'U+007F (percent-encoded)'],
  ])('refuses %s naming %s', (url, named) => expect(urlHiddenCharacterProblem(url)).toContain(`no ${named}:`));

  it.each([
    'https://hooks.example.com/h%C3%A9ros?q=caf\u00e9',
    'https://hooks.example.com/a%20b?c=%2B%2F',
    'https://hooks.example.com/a%E2%80', // half a character: shown as U+FFFD
    'https://hooks.example.com/%%41%',
  ])('takes %s', (url) => expect(urlHiddenCharacterProblem(url)).toBeNull());
});

describe('urlWrittenHiddenCharacterProblem', () => {
  it.each([
    ['https://api.example.com/pay/\u202eelgoog', 'U+202E'],
    ['https://api.example.com/pay?to=\u2066x', 'U+2066'],
    ['https://api.example.com/pa\u200by', 'U+200B'],
  ])('refuses %s naming %s', (url, named) => expect(urlWrittenHiddenCharacterProblem(url)).toContain(`no ${named}:`));

  // A query may carry a message's text: its escapes are shown as written, so they are taken.
  it.each(['https://api.example.com/pay?memo=a%0Ab', 'https://api.example.com/pay?memo=%E2%80%AE'])('takes %s', (url) =>
    expect(urlWrittenHiddenCharacterProblem(url)).toBeNull(),
  );
});

describe('urlSpellingProblem: a dot at the end of the host', () => {
  it.each([
    'http://hooks.example.com./hook',
    'https://hooks.example.com.:8443/hook',
    'http://hooks.example.com%2E/hook', // the parser decodes it into a trailing dot
    'http://127.0.0.1./hook', // the parser drops it: 127.0.0.1
    'http://api./',
    'https://user@hooks.example.com./',
  ])('refuses %s', (url) => expect(urlSpellingProblem(url)).toMatch(/no dot at the end of the host/));

  it.each([
    'http://hooks.example.com/hook',
    'http://hooks.example.com/path./x.?q=a.', // dots after the host are the path's and the query's
    'http://[::1]:8080/',
    'http://127.0.0.1:8080/',
  ])('takes %s', (url) => expect(urlSpellingProblem(url)).toBeNull());
});

describe('urlSpellingProblem: a host the parser rewrites', () => {
  it.each([
    'http://hooks.example\u3002com/hook', // the parser maps an ideographic full stop to "."
    'http://hooks.ex\u00adample.com/hook', // and drops a soft hyphen
    'http://hooks.ex\u200bample.com/hook', // and a zero-width space
    'https://hooks.\uff45xample.com/hook', // and folds a fullwidth letter
    'http://hooks.ex%61mple.com/hook', // and decodes an escape
    'http://b\u00fccher.example/', // and writes a Unicode name in punycode
    'http://user@b\u00fccher.example:8080/',
  ])('refuses %s', (url) => expect(urlSpellingProblem(url)).toMatch(/host in ASCII/));

  it.each([
    'http://xn--bcher-kva.example/',
    'http://Hooks.Example.COM/hook', // letter case: DNS reads both alike
    'http://[::FFFF:127.0.0.1]:8080/', // an IPv6 address: judged by its bytes
    'http://2130706433/', // a numeric host: refused by its own rule (dotted-decimal IPv4 only)
    'https://hooks.example.com/b\u00fccher?q=\u00fc', // the path and the query are sent escaped, as written
  ])('takes %s', (url) => expect(urlSpellingProblem(url)).toBeNull());
});

describe('urlSpellingProblem: port 0', () => {
  it.each(['http://hooks.example.com:0/hook', 'https://hooks.example.com:00/', 'http://[::1]:0/'])(
    'refuses %s',
    (url) => expect(urlSpellingProblem(url)).toMatch(/port 0 cannot be called/),
  );

  it.each(['http://hooks.example.com:8080/', 'https://hooks.example.com/', 'http://hooks.example.com:10/'])(
    'takes %s',
    (url) => expect(urlSpellingProblem(url)).toBeNull(),
  );
});

describe('urlSpellingProblem: a port with leading zeros', () => {
  it.each([
    ['http://127.0.0.1:042309/x', '":42309", not ":042309"'],
    ['https://hooks.example.com:0443/', '":443", not ":0443"'],
    ['http://hooks.example.com:080/hook', '":80", not ":080"'],
    ['http://[::1]:08080/', '":8080", not ":08080"'],
    ['http://user@hooks.example.com:01/', '":1", not ":01"'],
  ])('refuses %s', (url, named) => {
    expect(urlSpellingProblem(url)).toMatch(/no leading zeros in the port/);
    expect(urlSpellingProblem(url)).toContain(named);
  });

  it.each(['http://127.0.0.1:42309/x', 'http://hooks.example.com:80/', 'http://[::1]:8080/', 'http://a.example/0:01'])(
    'takes %s',
    (url) => expect(urlSpellingProblem(url)).toBeNull(),
  );
});

describe('urlFragmentProblem', () => {
  it('refuses a fragment, an empty one too, and takes a URL without one', () => {
    expect(urlFragmentProblem('https://hooks.example.com/hook#part')).toMatch(/no fragment/);
    expect(urlFragmentProblem('https://hooks.example.com/hook#')).toMatch(/no fragment/);
    expect(urlFragmentProblem('https://hooks.example.com/hook?q=1')).toBeNull();
  });
});

describe('checkTarget', () => {
  const allow = [
    { host: 'api.example.com' },
    { host: '*.corp.example' },
    { host: '127.0.0.1', ports: [8080], allow_private: true },
    { host: '10.0.0.1' },
  ];
  const refused = (url: string) => {
    const result = checkTarget(url, allow);
    return 'code' in result ? result.message : null;
  };

  it('accepts allowlisted hosts and ports', () => {
    expect(refused('https://api.example.com/v1')).toBeNull();
    expect(refused('https://x.corp.example/v1')).toBeNull();
    expect(refused('http://127.0.0.1:8080/v1')).toBeNull();
  });

  it('refuses schemes, credentials, unlisted hosts and ports, and private literals not explicitly allowed', () => {
    expect(refused('file:///etc/passwd')).toMatch(/scheme/);
    expect(refused('gopher://api.example.com/')).toMatch(/scheme/);
    expect(refused('http://u:p@api.example.com/')).toMatch(/credentials/);
    expect(refused('http://evil.example/')).toMatch(/not on this tenant's allowlist/);
    expect(refused('http://corp.example/')).toMatch(/allowlist/);
    expect(refused('http://127.0.0.1:8081/')).toMatch(/port 8081/);
    expect(refused('http://10.0.0.1/')).toMatch(/private address/);
    expect(refused('http://2130706433:8080/')).toMatch(/dotted-decimal/);
    expect(refused('http://[::1]:8080/')).toMatch(/allowlist/);
    expect(checkTarget('http://api.example.com/', undefined)).toMatchObject({ code: 'EGRESS_BLOCKED' });
  });

  it('judges a host written with a dot at its end exactly as without it (a URL stored before intake refused it)', () => {
    const entries = [
      { host: 'api.example.com', ports: [443] },
      { host: '*.corp.example' },
      { host: '127.0.0.1', ports: [8080], allow_private: true },
      { host: '10.0.0.1' },
    ];
    const decision = (url: string) => {
      const result = checkTarget(url, entries);
      return 'code' in result ? result.message : { host: result.host, port: result.port, entry: result.entry };
    };
    for (const [plain, dotted] of [
      ['https://api.example.com/v1', 'https://api.example.com./v1'],
      ['https://api.example.com:8443/v1', 'https://api.example.com.:8443/v1'],
      ['https://x.corp.example/v1', 'https://x.corp.example./v1'],
      ['https://corp.example/v1', 'https://corp.example./v1'],
      ['https://evil.example/v1', 'https://evil.example./v1'],
      ['https://api.example.com.evil.example/v1', 'https://api.example.com.evil.example./v1'],
      ['http://127.0.0.1:8080/v1', 'http://127.0.0.1.:8080/v1'],
      ['http://127.0.0.1:8081/v1', 'http://127.0.0.1.:8081/v1'],
      ['http://10.0.0.1/v1', 'http://10.0.0.1./v1'],
    ]) {
      expect([dotted, decision(dotted)]).toEqual([dotted, decision(plain)]);
    }
    // Two dots are no spelling of the host: refused.
    expect(decision('https://api.example.com../v1')).toMatch(/not on this tenant's allowlist/);
  });

  it('takes a URL by the first entry naming its host, or another entry for the very same host that allows its port', () => {
    const entries = [
      { host: 'db.internal.example', ports: [443] },
      { host: 'db.internal.example', ports: [9443], secrets: ['db_token'] },
      { host: '*.internal.example', ports: [8443], allow_private: true },
    ];
    const entryFor = (url: string) => {
      const result = checkTarget(url, entries);
      return 'code' in result ? result.message : result.entry;
    };
    expect(entryFor('https://db.internal.example/')).toBe(entries[0]);
    // One host, one entry per port (each binding its own secrets): written for the same host, so it counts.
    expect(entryFor('https://db.internal.example:9443/')).toBe(entries[1]);
    // A later wildcard does not widen the specific entries' ports, nor lend them its allow_private.
    expect(entryFor('https://db.internal.example:8443/')).toMatch(/port 8443 is not allowed/);
    expect(entryFor('https://cache.internal.example:8443/')).toBe(entries[2]);
  });
});

describe('guarded requests against real loopback servers', () => {
  let hits = 0;
  const local = serveDuringDescribe(() =>
    createServer((req, res) => {
      hits += 1;
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ host: req.headers.host }));
    }),
  );

  /** A GET of the loopback server by the name service.test, which `resolver` resolves. */
  const getServiceTest = (allowHosts: AllowedHost[], resolver: Resolver) =>
    guardedExchange(
      { method: 'GET', url: `http://service.test:${local.port}/`, timeoutMs: 2000 },
      allowHosts,
      resolver,
    );

  it('connects to the address the vetted lookup returned, whatever the name (no second resolution)', async () => {
    const resolver = jest.fn(async () => [{ address: '127.0.0.1', family: 4 }]);
    const result = await getServiceTest([{ host: 'service.test', allow_private: true }], resolver);
    expect(result).toMatchObject({ kind: 'response', status: 200, body: { host: `service.test:${local.port}` } });
    expect(resolver).toHaveBeenCalledTimes(1);
  });

  it('refuses a name that resolves to loopback unless the tenant allowed private addresses for it', async () => {
    const before = hits;
    const result = await getServiceTest([{ host: 'service.test' }], async () => [{ address: '127.0.0.1', family: 4 }]);
    expect(result).toEqual({ kind: 'refused', message: expect.stringMatching(/loopback/) });
    expect(hits).toBe(before);
  });

  it('refuses the whole answer when any address is private (a rebinding answer mixing public and internal)', async () => {
    const before = hits;
    const result = await getServiceTest([{ host: 'service.test' }], async () => [
      { address: '93.184.216.34', family: 4 },
      { address: '127.0.0.1', family: 4 },
    ]);
    expect(result).toMatchObject({ kind: 'refused' });
    expect(hits).toBe(before);
  });

  it('calls an empty answer a failed resolution (never delivered, may pass), not a refusal of the policy', async () => {
    const before = hits;
    const result = await getServiceTest([{ host: 'service.test' }], async () => []);
    expect(result).toMatchObject({ kind: 'not_delivered', code: 'ENOTFOUND' });
    expect(hits).toBe(before);
  });

  it('resolves localhost with the system resolver and refuses it without an explicit allowance', async () => {
    const before = hits;
    const result = await guardedExchange({ method: 'GET', url: `http://localhost:${local.port}/`, timeoutMs: 2000 }, [
      { host: 'localhost' },
    ]);
    expect(result).toMatchObject({ kind: 'refused', message: expect.stringMatching(/loopback/) });
    expect(hits).toBe(before);
  });

  it('with a secret in cleartext, refuses an answer holding any address outside the operator’s network', async () => {
    const target = checkTarget('http://service.test/', [{ host: 'service.test', allow_private: true }]);
    if ('code' in target) throw new Error(target.message);
    const ask = (addresses: string[], secretInCleartext: boolean) => {
      const refusals: [string, string | undefined][] = [];
      const lookup = lookupFor(
        target,
        (message, cause) => refusals.push([message, cause]),
        async () => addresses.map((address) => ({ address, family: isIP(address) })),
        { secretInCleartext },
      ) as unknown as (h: string, o: object, cb: (...a: unknown[]) => void) => void;
      return new Promise<{ args: unknown[]; refusals: typeof refusals }>((resolve) =>
        lookup('service.test', {}, (...args) => resolve({ args, refusals })),
      );
    };
    // Without a secret (or over https), a public address is what it always was: allowed.
    expect((await ask(['93.184.216.34'], false)).args).toEqual([null, '93.184.216.34', 4]);
    for (const address of ['127.0.0.1', '10.0.0.7', '192.168.1.2', '169.254.1.1', 'fd00::1', '::1']) {
      expect((await ask([address], true)).args).toEqual([null, address, isIP(address)]);
    }
    for (const addresses of [['93.184.216.34'], ['10.0.0.7', '93.184.216.34'], ['100.64.0.1'], ['64:ff9b::a00:1']]) {
      const { args, refusals } = await ask(addresses, true);
      expect(args[0]).toMatchObject({ code: 'EGRESS_BLOCKED' });
      expect(refusals).toEqual([
        [
          expect.stringMatching(/^a secret may not be sent over plain http:\/\/ to service\.test:80/),
          'secret_not_bound',
        ],
      ]);
    }
  });

  it('hands the client the answer in the shape it asked for (all: true for happy eyeballs)', async () => {
    const target = checkTarget('http://service.test/', [{ host: 'service.test' }]);
    if ('code' in target) throw new Error(target.message);
    const lookup = lookupFor(
      target,
      () => undefined,
      async () => [{ address: '93.184.216.34', family: 4 }],
    );
    const all = await new Promise((resolve) =>
      (lookup as unknown as (h: string, o: object, cb: (...a: unknown[]) => void) => void)(
        'service.test',
        { all: true },
        (...args) => resolve(args),
      ),
    );
    expect(all).toEqual([null, [{ address: '93.184.216.34', family: 4 }]]);
    const one = await new Promise((resolve) =>
      (lookup as unknown as (h: string, o: object, cb: (...a: unknown[]) => void) => void)(
        'service.test',
        {},
        (...args) => resolve(args),
      ),
    );
    expect(one).toEqual([null, '93.184.216.34', 4]);
  });
});

describe('effectiveAllowHosts', () => {
  const entries: AllowedHost[] = [
    { host: 'api.example.com' },
    { host: '10.0.0.5', ports: [8443], allow_private: true },
  ];

  it('keeps allow_private when the platform grants private egress, and drops it when not', () => {
    expect(effectiveAllowHosts(entries, true)).toEqual(entries);
    expect(effectiveAllowHosts(entries, false)).toEqual([
      { host: 'api.example.com' },
      { host: '10.0.0.5', ports: [8443], allow_private: false },
    ]);
    expect(effectiveAllowHosts(undefined, false)).toBeUndefined();
  });

  it('so a private address an entry allowed is refused without the grant', () => {
    const target = checkTarget('http://10.0.0.5:8443/x', effectiveAllowHosts(entries, false));
    expect(target).toMatchObject({ message: expect.stringMatching(/10\.0\.0\.5 is a private address/) });
    expect(checkTarget('http://10.0.0.5:8443/x', effectiveAllowHosts(entries, true))).not.toHaveProperty('message');
  });
});

describe("the platform's own services are never a tenant's target", () => {
  const platform = platformServices({
    SANDBOX_URL: 'http://127.0.0.1:4010',
    HOST: '0.0.0.0',
    PORT: 3000,
    DATABASE_URL: 'postgres://verity@db.internal:5432/verity',
    REDIS_URL: 'redis://127.0.0.1:6379/2',
    DISPATCHER_METRICS_PORT: 9101,
    RECONCILER_METRICS_PORT: 0,
  });
  const everything = [
    { host: '127.0.0.1', allow_private: true },
    { host: '127.0.0.2', allow_private: true },
    { host: 'localhost', allow_private: true },
  ];

  it('reads them from the configuration (a port 0 listener and a Unix socket are none)', () => {
    expect(platform).toEqual([
      { name: 'the sandbox provider', host: '127.0.0.1', port: 4010 },
      { name: 'the Verity API', host: '0.0.0.0', port: 3000 },
      { name: 'Postgres', host: 'db.internal', port: 5432 },
      { name: 'Redis', host: '127.0.0.1', port: 6379 },
      { name: 'the dispatcher metrics', host: '0.0.0.0', port: 9101 },
    ]);
    const sockets = platformServices({
      SANDBOX_URL: 'http://sandbox:4010',
      HOST: '127.0.0.1',
      PORT: 0,
      DATABASE_URL: 'postgres://verity@/verity?host=/var/run/postgresql',
      REDIS_URL: 'unix:///run/redis/redis.sock',
      DISPATCHER_METRICS_PORT: 0,
      RECONCILER_METRICS_PORT: 0,
    });
    expect(sockets).toEqual([{ name: 'the sandbox provider', host: 'sandbox', port: 4010 }]);
  });

  it.each([
    ['http://127.0.0.1:4010/__reset', 'the sandbox provider'],
    ['http://localhost:4010/v1/charges', 'the sandbox provider'],
    ['http://127.0.0.2:4010/', 'the sandbox provider'],
    ['http://127.0.0.1:3000/v1/executions', 'the Verity API'],
    ['http://127.0.0.1:6379/', 'Redis'],
    ['http://127.0.0.1:9101/metrics', 'the dispatcher metrics'],
  ])('%s is refused even with allow_private: it reaches %s', (url, name) => {
    expect(checkTarget(url, everything, platform)).toEqual({
      code: 'EGRESS_BLOCKED',
      message: expect.stringContaining(`reaches ${name} of this platform`),
    });
  });

  // A translator on the platform's network (NAT64, SIIT) turns these into packets to the IPv4 address they carry:
  // classifyAddress calls them ipv4_translated for that reason, and an allow_private entry lets a tenant name one.
  it.each([
    ['http://[64:ff9b::7f00:1]:6379/', 'Redis'],
    ['http://[64:ff9b::127.0.0.1]:4010/__reset', 'the sandbox provider'],
    ['http://[::ffff:0:7f00:1]:3000/v1/executions', 'the Verity API'],
    ['http://[64:ff9b:1::7f00:1]:9101/metrics', 'the dispatcher metrics'],
    ['http://[64:ff9b:1:7f00:0:100::]:6379/', 'Redis'],
  ])('%s is refused with allow_private: the IPv4 address it carries is %s', (url, name) => {
    const host = new URL(url).hostname.slice(1, -1);
    expect(checkTarget(url, [{ host, allow_private: true }], platform)).toEqual({
      code: 'EGRESS_BLOCKED',
      message: expect.stringContaining(`reaches ${name} of this platform`),
    });
  });

  it('leaves every other port and host alone', () => {
    expect(checkTarget('http://127.0.0.1:4011/', everything, platform)).not.toHaveProperty('code');
    expect(checkTarget('http://127.0.0.1:9102/', everything, platform)).not.toHaveProperty('code');
    expect(platformServiceAt(platform, '93.184.216.34', 4010)).toBeUndefined();
    // Without the list (the default), nothing is a platform service.
    expect(checkTarget('http://127.0.0.1:4010/', everything)).not.toHaveProperty('code');
  });

  const lookUp = (url: string, allow: AllowedHost[], answer: string[], names: Record<string, string[]> = {}) => {
    const target = checkTarget(url, allow, platform);
    if ('code' in target) throw new Error(target.message);
    let refused: string | undefined;
    const lookup = lookupFor(
      target,
      (message) => (refused = message),
      async (hostname) =>
        (names[hostname] ?? (hostname === target.host ? answer : [])).map((address) => ({ address, family: 4 })),
    );
    return new Promise<{ refused?: string; args: unknown[] }>((resolve) =>
      (lookup as unknown as (h: string, o: object, cb: (...a: unknown[]) => void) => void)(target.host, {}, (...args) =>
        resolve({ refused, args }),
      ),
    );
  };

  it('knows one address in every spelling (an IPv4-mapped IPv6 address is the IPv4 address it carries)', () => {
    expect(canonicalAddress('::ffff:192.0.2.2')).toBe('192.0.2.2');
    expect(canonicalAddress('[::FFFF:c000:202]')).toBe('192.0.2.2');
    expect(canonicalAddress('fd00:0:0::2')).toBe(canonicalAddress('FD00::2'));
    expect(canonicalAddress('db.internal')).toBe('db.internal');
    const remote = platformServices({
      SANDBOX_URL: 'http://192.0.2.50:4010',
      HOST: '127.0.0.1',
      PORT: 0,
      DATABASE_URL: 'postgres://verity@/verity?host=/var/run/postgresql',
      REDIS_URL: 'unix:///run/redis.sock',
      DISPATCHER_METRICS_PORT: 0,
      RECONCILER_METRICS_PORT: 0,
      REDIS_CLUSTER_NODES: ['10.0.0.7:7000', 'redis://10.0.0.8:7001'],
    });
    expect(remote.slice(1)).toEqual([
      { name: 'Redis', host: '10.0.0.7', port: 7000 },
      { name: 'Redis', host: '10.0.0.8', port: 7001 },
    ]);
    const allow = [
      { host: '::ffff:c000:232', allow_private: true },
      { host: '10.0.0.7', allow_private: true },
    ];
    expect(checkTarget('http://[::ffff:192.0.2.50]:4010/__reset', allow, remote)).toMatchObject({
      code: 'EGRESS_BLOCKED',
      message: expect.stringContaining('reaches the sandbox provider'),
    });
    expect(checkTarget('http://10.0.0.7:7000/', allow, remote)).toMatchObject({
      message: expect.stringContaining('reaches Redis'),
    });
  });

  it('refuses the address of a service configured by name when the URL writes the address (no lookup is made)', async () => {
    const allow = [{ host: '10.1.2.3', allow_private: true }];
    const resolver = async (name: string) => (name === 'db.internal' ? [{ address: '10.1.2.3', family: 4 }] : []);
    const target = checkTarget('http://10.1.2.3:5432/', allow, platform);
    if ('code' in target) throw new Error(target.message);
    expect(await platformRefusalOf(target, resolver)).toMatch(/10\.1\.2\.3:5432 reaches Postgres of this platform/);
    const elsewhere = checkTarget('http://10.1.2.3:5433/', allow, platform);
    if ('code' in elsewhere) throw new Error(elsewhere.message);
    expect(await platformRefusalOf(elsewhere, resolver)).toBeNull();
    // The http connector's request path makes that check before it connects.
    const exchange = await guardedExchange(
      { method: 'GET', url: 'http://10.1.2.3:5432/', timeoutMs: 1000 },
      allow,
      resolver,
      platform,
    );
    expect(exchange).toEqual({
      kind: 'refused',
      message: expect.stringContaining('reaches Postgres of this platform'),
    });
  });

  it('refuses a name that resolves to a service on this machine, or to a service configured by name', async () => {
    const local = await lookUp(
      'http://sandbox.test:4010/',
      [{ host: 'sandbox.test', allow_private: true }],
      ['127.0.0.1'],
    );
    expect(local.refused).toMatch(/sandbox\.test:4010 reaches the sandbox provider of this platform/);
    const db = await lookUp('http://pg.test:5432/', [{ host: 'pg.test', allow_private: true }], ['10.1.2.3'], {
      'db.internal': ['10.1.2.3'],
    });
    expect(db.refused).toMatch(/reaches Postgres of this platform/);
    const elsewhere = await lookUp('http://pg.test:5432/', [{ host: 'pg.test', allow_private: true }], ['10.1.2.4'], {
      'db.internal': ['10.1.2.3'],
    });
    expect(elsewhere).toEqual({ refused: undefined, args: [null, '10.1.2.4', 4] });
  });

  it('refuses a name that resolves to a translated address of a service configured by name (DNS64 answers so)', async () => {
    const db = await lookUp('http://pg.test:5432/', [{ host: 'pg.test', allow_private: true }], ['64:ff9b::a01:203'], {
      'db.internal': ['10.1.2.3'],
    });
    expect(db.refused).toMatch(/reaches Postgres of this platform/);
  });
});
