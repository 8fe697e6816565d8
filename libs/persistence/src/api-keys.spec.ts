import { Client } from 'pg';
import { waitFor } from '../../../test/support/stack';
import { useTestDatabase } from '../../../test/support/test-database';
import {
  KEY_REVOCATION_CHANNEL,
  createApiKey,
  generateApiKey,
  isKeyActive,
  keyPrefix,
  listenForKeyRevocations,
  revokeApiKey,
} from './api-keys';
import type { Queryable } from './sql';

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

describe('revokeApiKey (real Postgres)', () => {
  const db = useTestDatabase('apikeyrevoke', ['acme']);

  it('a revocation that commits is announced: a connection lost right after the revoke still leaves it announced', async () => {
    const listener = new Client({ connectionString: db.url });
    await listener.connect();
    const heard: string[] = [];
    listener.on('notification', (message) => {
      if (message.channel === KEY_REVOCATION_CHANNEL) heard.push(message.payload ?? '');
    });
    try {
      await listenForKeyRevocations(listener);
      const key = await createApiKey(db.dataSource.manager, { tenantId: 'acme', role: 'reviewer' });
      // The operator's CLI whose connection is lost once its first statement has been answered (Ctrl-C, a network cut):
      // whatever it sent after that never arrives.
      let answered = 0;
      const cut: Queryable = {
        query: async (sql: string, params?: unknown[]) => {
          if (answered > 0) throw new Error('Connection terminated unexpectedly');
          const result: unknown = await db.dataSource.query(sql, params);
          answered += 1;
          return result;
        },
      } as Queryable;
      await revokeApiKey(cut, key.id).catch(() => undefined);
      expect(await isKeyActive(db.dataSource.manager, key.id)).toBe(false);
      // Revoked, so every API process must hear of it (else each keeps serving the key from its cache, up to 10 s).
      await waitFor(
        async () => heard,
        (h) => h.includes(key.id),
        5_000,
        20,
      );
    } finally {
      await listener.end();
    }
  });
});
