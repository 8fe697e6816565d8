import type { Request } from 'express';
import { clientAddress } from './auth.guard';

/** The address failed authentications are counted against (and a Redis key is made of). */
describe('clientAddress', () => {
  const req = (ip: string | undefined, peer = '127.0.0.1') =>
    ({ ip, socket: { remoteAddress: peer } }) as unknown as Pick<Request, 'socket' | 'ip'>;

  it('is what Express reports (a trusted proxy’s client, or the peer) when it is an IP address', () => {
    expect(clientAddress(req('203.0.113.7'))).toBe('203.0.113.7');
    expect(clientAddress(req('2001:db8::1'))).toBe('2001:db8::1');
  });

  it('is the socket’s peer when the reported client is not an address (text from the wire, hostile or empty)', () => {
    for (const hostile of ['not-an-ip', '203.0.113.7\u0000x', '%00', '__proto__', '\ud800', '', undefined]) {
      expect(clientAddress(req(hostile, '10.0.0.9'))).toBe('10.0.0.9');
    }
  });
});
