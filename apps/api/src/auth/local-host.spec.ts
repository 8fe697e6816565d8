import { addressedLocally } from './local-host';

describe('addressedLocally (who may use a published demo key)', () => {
  it.each([
    '127.0.0.1:3000',
    '127.0.0.1',
    '10.0.0.7:3000',
    '[::1]:3000',
    '[::1]',
    'localhost:3000',
    'LocalHost',
    'app.localhost:5173',
  ])('takes %s: an address or a loopback name', (host) => {
    expect(addressedLocally(host)).toBe(true);
  });

  it.each([
    [undefined],
    [''],
    ['rebound.example:3000'],
    ['localhost.rebound.example'],
    ['localhostx:3000'],
    ['127.0.0.1.nip.io:3000'],
    ['2130706433:3000'],
    ['0x7f.1'],
    ['::1'],
    ['[not-an-address]:3000'],
    ['localhost:3000:1'],
  ])('refuses %s: a host name a page of another site can have', (host) => {
    expect(addressedLocally(host)).toBe(false);
  });
});
