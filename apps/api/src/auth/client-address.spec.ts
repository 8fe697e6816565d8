import type { Request } from 'express';
import { clientAddress } from './auth.guard';
import { internalCallHeaders } from './internal-caller';

/** The address failed authentications are counted against (and a Redis key is made of). */
describe('clientAddress', () => {
  const req = (ip: string | undefined, peer = '127.0.0.1', headers: Record<string, string> = {}) =>
    ({ ip, socket: { remoteAddress: peer }, headers }) as unknown as Pick<Request, 'socket' | 'ip' | 'headers'>;

  it('is what Express reports (a trusted proxy’s client, or the peer) when it is an IP address', () => {
    expect(clientAddress(req('203.0.113.7'))).toBe('203.0.113.7');
    expect(clientAddress(req('2001:db8::1'))).toBe('2001:db8::1');
  });

  it('is the socket’s peer when the reported client is not an address (text from the wire, hostile or empty)', () => {
    for (const hostile of ['not-an-ip', '203.0.113.7\u0000x', '%00', '__proto__', '\ud800', '', undefined]) {
      expect(clientAddress(req(hostile, '10.0.0.9'))).toBe('10.0.0.9');
    }
  });

  it('is the client a call of this process to itself was made for, only with this process’s token', () => {
    const ours = internalCallHeaders('198.51.100.4');
    expect(clientAddress(req('127.0.0.1', '127.0.0.1', ours))).toBe('198.51.100.4');
    const tokenHeader = Object.keys(ours).find((name) => ours[name] !== '198.51.100.4')!;
    const clientHeader = Object.keys(ours).find((name) => name !== tokenHeader)!;
    for (const forged of [
      { [clientHeader]: '198.51.100.4' },
      { [clientHeader]: '198.51.100.4', [tokenHeader]: 'guess' },
      { [clientHeader]: '198.51.100.4', [tokenHeader]: `${ours[tokenHeader]}x` },
      { ...ours, [clientHeader]: 'not-an-ip' },
    ]) {
      expect(clientAddress(req('203.0.113.7', '127.0.0.1', forged))).toBe('203.0.113.7');
    }
  });
});
