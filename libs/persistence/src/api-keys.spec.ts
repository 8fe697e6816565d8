import { generateApiKey, keyPrefix } from './api-keys';

describe('keyPrefix: what is kept of a key in clear', () => {
  it.each(['agent', 'reviewer', 'admin', 'operator'] as const)(
    'tells two %s keys apart (the role part and 8 random characters)',
    (role) => {
      const [a, b] = [generateApiKey(role), generateApiKey(role)];
      expect(keyPrefix(a)).toBe(a.slice(0, `vk_${role}_`.length + 8));
      expect(keyPrefix(a)).not.toBe(keyPrefix(b));
    },
  );

  it('keeps the first 12 characters of a key of another shape', () => {
    expect(keyPrefix('demo-reviewer-key')).toBe('demo-reviewe');
  });
});
