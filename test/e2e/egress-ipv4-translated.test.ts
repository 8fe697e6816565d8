import { DEMO, Stack } from '../support/stack';
import { http } from '../support/http';
import type { FieldError } from '@verity/sdk';

/**
 * IPv6 prefixes that a translator maps onto IPv4 reach the IPv4 address they carry (169.254.169.254, the cloud's
 * metadata service, below). The well-known NAT64 prefix 64:ff9b::/96 was judged so (`ipv4_translated`: private unless
 * the entry says allow_private); its local-use sibling 64:ff9b:1::/48 (RFC 8215) and the SIIT form ::ffff:0:a.b.c.d
 * (RFC 2765) were judged public, so an allowlisted address (or a name resolving to one) written in them passed.
 */
describe('IPv6 addresses that carry an IPv4 address through a translator', () => {
  let stack: Stack;
  const carriers = ['64:ff9b::a9fe:a9fe', '64:ff9b:1::a9fe:a9fe', '::ffff:0:a9fe:a9fe'];

  beforeAll(async () => {
    stack = await Stack.start({ label: 'egress-v4-translated', dispatchers: 0, reconcilers: 0 });
    const put = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { allow_hosts: carriers.map((host) => ({ host })) },
    });
    expect(put.status).toBe(200);
  });
  afterAll(async () => stack?.stop());

  it.each(carriers)(
    'a webhook endpoint at http://[%s]/ is refused (400 egress_blocked), nothing written',
    async (host) => {
      const created = await http<{ errors: FieldError[] }>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
        key: DEMO.admin,
        body: { url: `http://[${host}]/hook`, events: ['execution.finished'] },
      });
      expect(created.status).toBe(400);
      expect(created.body.errors).toEqual([
        expect.objectContaining({
          field: 'url',
          rule: 'egress_blocked',
          message: expect.stringContaining('ipv4-translated'),
        }),
      ]);
      const list = await http<{ data: unknown[] }>(stack.apiUrl, 'GET', '/v1/admin/webhooks', { key: DEMO.admin });
      expect(list.body.data).toEqual([]);
    },
  );
});
