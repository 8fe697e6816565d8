import type { AllowedHost } from './connector';
import { secretBindingProblems } from './connector';
import { allowlistEntryOf, checkTarget } from './egress';
import { HttpConnector, httpSecretBindingProblems } from './http.connector';
import { AllowedHostSchema } from './tenant-settings';

const TOKEN = { authorization: 'Bearer {{secret:crm_token}}' };

/** Which secrets go where they may not, as `field → secret @ target`. */
const unbound = (params: Parameters<typeof httpSecretBindingProblems>[0], allowHosts: AllowedHost[] | undefined) =>
  httpSecretBindingProblems(params, allowHosts).map((p) => `${p.field} → ${p.secret} @ ${p.target}`);

describe('secret binding: a {{secret:NAME}} goes only to a host whose allowlist entry binds NAME', () => {
  const allowHosts: AllowedHost[] = [
    { host: 'crm.example.com', ports: [443], secrets: ['crm_token'] },
    { host: 'echo.example.com' },
    { host: 'hooks.example.com', secrets: [] },
    { host: 'all.example.com', secrets: ['*'] },
    { host: '*.tenant.example', secrets: ['sub_token'] },
    // One host, two entries by port: each binds its own secrets.
    { host: 'api.example.net', ports: [443], secrets: ['api_token'] },
    { host: 'api.example.net', ports: [8443], secrets: ['admin_token'] },
  ];
  const post = (url: string, headers: Record<string, string> = TOKEN) => ({ method: 'POST', url, headers });

  it.each([
    ['a bound name', post('https://crm.example.com/orders'), []],
    ['a bound name, the port written out', post('https://crm.example.com:443/orders'), []],
    ['"*" binds every name', post('https://all.example.com/x', { a: '{{secret:crm_token}}', b: '{{secret:z}}' }), []],
    ['no secret named: nothing to bind', post('https://echo.example.com/x', { 'x-op': '{{operation_id}}' }), []],
    [
      'an entry without secrets binds none (the secure default)',
      post('https://echo.example.com/x', { 'x-t': 'Bearer {{secret:crm_token}}' }),
      ['params.headers.x-t → crm_token @ echo.example.com:443'],
    ],
    [
      'an empty list binds none',
      post('http://hooks.example.com/in'),
      ['params.headers.authorization → crm_token @ hooks.example.com:80'],
    ],
    [
      'a secret bound to another host’s entry is not bound here',
      post('https://api.example.net/x'),
      ['params.headers.authorization → crm_token @ api.example.net:443'],
    ],
    [
      'a host not on the allowlist is the egress check’s refusal, not this rule’s',
      post('https://all.example.com.evil.test/x'),
      [],
    ],
    [
      'a wildcard entry binds its own secrets for every subdomain',
      post('https://a.b.tenant.example/x', { x: '{{secret:sub_token}}', y: '{{secret:crm_token}}' }),
      ['params.headers.y → crm_token @ a.b.tenant.example:443'],
    ],
    [
      'port-specific entries: the entry for the port binds',
      post('https://api.example.net:8443/x', { x: '{{secret:admin_token}}' }),
      [],
    ],
    [
      'port-specific entries: another port’s secret is not bound',
      post('https://api.example.net/x', { x: '{{secret:admin_token}}' }),
      ['params.headers.x → admin_token @ api.example.net:443'],
    ],
    [
      'a port no entry allows is the egress check’s refusal, not this rule’s',
      post('https://crm.example.com:8443/orders', { x: '{{secret:nope}}' }),
      [],
    ],
    [
      'every secret of every header is judged, once per mention',
      post('https://crm.example.com/x', { a: '{{secret:crm_token}} {{secret:other}}', b: '{{secret:third}}' }),
      ['params.headers.a → other @ crm.example.com:443', 'params.headers.b → third @ crm.example.com:443'],
    ],
  ])('%s', (_case, params, expected) => {
    expect(unbound(params, allowHosts)).toEqual(expected);
  });

  it('a bound secret never goes over plain http to an entry without allow_private (at the call, by address, with it)', () => {
    const hosts: AllowedHost[] = [
      { host: 'crm.example.com', ports: [80, 443], secrets: ['crm_token'] },
      { host: 'all.example.com', secrets: ['*'] },
      { host: 'intranet.example', allow_private: true, secrets: ['crm_token'] },
    ];
    expect(unbound(post('http://crm.example.com/orders'), hosts)).toEqual([
      'params.headers.authorization → crm_token @ crm.example.com:80',
    ]);
    // The port a TLS server listens on, asked in cleartext: the secret is on the wire before any answer.
    expect(unbound(post('http://crm.example.com:443/orders'), hosts)).toEqual([
      'params.headers.authorization → crm_token @ crm.example.com:443',
    ]);
    expect(unbound(post('http://all.example.com/x'), hosts)).toEqual([
      'params.headers.authorization → crm_token @ all.example.com:80',
    ]);
    expect(httpSecretBindingProblems(post('http://crm.example.com/orders'), hosts)[0].message).toMatch(
      /^secret "crm_token" may not be sent to crm\.example\.com:80 over plain http:\/\//,
    );
    expect(
      unbound(
        {
          ...post('https://crm.example.com/x'),
          read_back: { url: 'http://crm.example.com/x/{{ref}}', headers: TOKEN },
        },
        hosts,
      ),
    ).toEqual(['params.read_back.headers.authorization → crm_token @ crm.example.com:80']);
    // Over https, or with no secret in it, or to an entry that allows private addresses (judged by address at the call).
    expect(unbound(post('https://crm.example.com/orders'), hosts)).toEqual([]);
    expect(unbound(post('http://crm.example.com/orders', { 'x-op': '{{operation_id}}' }), hosts)).toEqual([]);
    expect(unbound(post('http://intranet.example/x'), hosts)).toEqual([]);
  });

  it('judges the read-back’s and the context read’s headers by their own URLs, templates and all', () => {
    const params = {
      method: 'POST',
      url: 'https://crm.example.com/orders/{{operation_id}}',
      headers: TOKEN,
      read_back: { url: 'https://echo.example.com/orders/{{ref}}?k={{idempotency_key}}', headers: TOKEN },
      context: { url: 'https://hooks.example.com/state/{{operation_id}}', headers: { 'x-t': '{{secret:crm_token}}' } },
    };
    expect(unbound(params, allowHosts)).toEqual([
      'params.read_back.headers.authorization → crm_token @ echo.example.com:443',
      'params.context.headers.x-t → crm_token @ hooks.example.com:443',
    ]);
    // Bound where they go: nothing to refuse.
    expect(
      unbound(
        {
          ...params,
          read_back: { url: 'https://crm.example.com/orders/{{ref}}', headers: TOKEN },
          context: { url: 'https://crm.example.com/state', headers: TOKEN },
        },
        allowHosts,
      ),
    ).toEqual([]);
  });

  it('names the secret, the header and the host in words, never a value; without an allowlist there is nothing to bind', () => {
    expect(httpSecretBindingProblems(post('https://echo.example.com/x'), allowHosts)).toEqual([
      {
        field: 'params.headers.authorization',
        secret: 'crm_token',
        target: 'echo.example.com:443',
        message:
          'secret "crm_token" may not be sent to echo.example.com:443: the tenant\'s allowlist entry for it does not bind it (allow_hosts[].secrets)',
      },
    ]);
    // No entry for the host: the egress check refuses the call itself, so no secret can leave with it.
    expect(unbound(post('https://crm.example.com/x'), undefined)).toEqual([]);
    expect(unbound(post('https://crm.example.com/x'), [])).toEqual([]);
    // IPv6 targets are written so the port reads apart from the address.
    expect(unbound(post('http://[::1]:8080/x'), [{ host: '::1' }])).toEqual([
      'params.headers.authorization → crm_token @ [::1]:8080',
    ]);
  });

  it('judges by the very entry the egress check matches', () => {
    for (const url of ['https://api.example.net/x', 'https://api.example.net:8443/x', 'https://a.tenant.example/']) {
      const checked = checkTarget(url, allowHosts);
      const found = allowlistEntryOf(new URL(url), allowHosts);
      expect('entry' in checked && 'entry' in found && checked.entry === found.entry).toBe(true);
    }
    expect(checkTarget('https://api.example.net:9000/x', allowHosts)).toEqual({
      code: 'EGRESS_BLOCKED',
      message: 'port 9000 is not allowed for host api.example.net',
    });
  });

  it('is the http connector’s rule (Connector.secretBindingProblems), and fails closed on params it cannot judge', () => {
    const connector = new HttpConnector();
    expect(
      secretBindingProblems(connector, 'request', post('https://echo.example.com/x'), allowHosts).map((p) => p.field),
    ).toEqual(['params.headers.authorization']);
    expect(secretBindingProblems(connector, 'nope', post('https://echo.example.com/x'), allowHosts)).toEqual([]);
    expect(secretBindingProblems(connector, 'request', null as never, allowHosts)).toEqual([
      expect.objectContaining({ field: 'params', message: expect.stringMatching(/could not be judged/) }),
    ]);
  });
});

describe('allow_hosts[].secrets (admin input)', () => {
  const issues = (secrets: unknown) => {
    const parsed = AllowedHostSchema.safeParse({ host: 'crm.example.com', secrets });
    return parsed.success ? [] : parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
  };

  it('takes secret names, "*", or nothing; a name not set yet is fine', () => {
    expect(AllowedHostSchema.parse({ host: 'crm.example.com', secrets: ['crm_token', 'a.b-c_9'] })).toEqual({
      host: 'crm.example.com',
      secrets: ['crm_token', 'a.b-c_9'],
    });
    expect(issues(['*'])).toEqual([]);
    expect(issues([])).toEqual([]);
    // Nothing given: none, written out as [] (so a stored entry without the key can only be older than the binding).
    expect(AllowedHostSchema.parse({ host: 'crm.example.com' })).toEqual({ host: 'crm.example.com', secrets: [] });
  });

  it('refuses what is not a secret name, a name given twice, and more than 50', () => {
    expect(issues(['crm token'])).toEqual([expect.stringMatching(/^secrets\.0: a secret's name .* or "\*"/)]);
    expect(issues(['*.example'])).toHaveLength(1);
    expect(issues(['x'.repeat(65)])).toHaveLength(1);
    expect(issues([''])).toHaveLength(1);
    expect(issues('*')).toHaveLength(1);
    expect(issues(['a', 'a'])).toEqual(['secrets: a secret is named twice']);
    expect(issues(Array.from({ length: 51 }, (_, i) => `s${i}`))).toEqual([
      'secrets: at most 50 secret names per host',
    ]);
    expect(issues(Array.from({ length: 50 }, (_, i) => `s${i}`))).toEqual([]);
  });
});
