import { ConfigError, loadConfig } from './config';

describe('loadConfig: test-only kill points', () => {
  it('are off by default', () => {
    const config = loadConfig({});
    expect(config.TEST_PAUSE_AFTER_SENT_MS).toBe(0);
    expect(config.TEST_PAUSE_AFTER_CALL_MS).toBe(0);
    expect(config.TEST_PAUSE_BEFORE_READ_MS).toBe(0);
  });

  it('may be armed outside production', () => {
    expect(loadConfig({ NODE_ENV: 'test', TEST_PAUSE_AFTER_SENT_MS: '1000' }).TEST_PAUSE_AFTER_SENT_MS).toBe(1000);
  });

  it.each(['TEST_PAUSE_AFTER_SENT_MS', 'TEST_PAUSE_AFTER_CALL_MS', 'TEST_PAUSE_BEFORE_READ_MS'])(
    'refuses %s in production, naming the variable',
    (name) => {
      expect(() => loadConfig({ NODE_ENV: 'production', [name]: '5' })).toThrow(ConfigError);
      expect(() => loadConfig({ NODE_ENV: 'production', [name]: '5' })).toThrow(name);
      expect(loadConfig({ NODE_ENV: 'production', [name]: '0' })[name as 'TEST_PAUSE_AFTER_SENT_MS']).toBe(0);
    },
  );
});

describe('SECRETS_KEY', () => {
  it('is optional, and when set must be 32 bytes in base64', () => {
    expect(loadConfig({}).SECRETS_KEY).toBeUndefined();
    expect(loadConfig({ SECRETS_KEY: '' }).SECRETS_KEY).toBeUndefined();
    const good = Buffer.alloc(32, 7).toString('base64');
    expect(loadConfig({ SECRETS_KEY: good }).SECRETS_KEY).toBe(good);
    expect(() => loadConfig({ SECRETS_KEY: Buffer.alloc(16, 7).toString('base64') })).toThrow(
      /SECRETS_KEY: must be 32 bytes/,
    );
    expect(() => loadConfig({ SECRETS_KEY: 'not base64 at all!' })).toThrow(/SECRETS_KEY/);
  });
});
