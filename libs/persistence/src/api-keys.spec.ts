import { Client } from 'pg';
import { waitForLockWaiter } from '../../../test/support/lock-waits';
import { waitFor } from '../../../test/support/stack';
import { useTestDatabase } from '../../../test/support/test-database';
import {
  KEY_REVOCATION_CHANNEL,
  createApiKey,
  generateApiKey,
  isKeyActive,
  keyPrefix,
  listenForKeyRevocations,
  lockActiveKey,
  revokeApiKey,
  revokeApiKeyById,
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
      );
    } finally {
      await listener.end();
    }
  });

  it.each([
    ['revokeApiKey', (db: Queryable, id: string) => revokeApiKey(db, id)],
    ['revokeApiKeyById', (db: Queryable, id: string) => revokeApiKeyById(db, id)],
  ] as const)(
    '%s: a revocation that waited for a change made with the key is stamped after that change committed',
    async (_name, revoke) => {
      const key = await createApiKey(db.dataSource.manager, { tenantId: 'acme', role: 'admin' });
      // An admin's change made with the key holds it FOR SHARE until it commits; the revocation waits for it.
      const change = db.dataSource.createQueryRunner();
      await change.connect();
      try {
        await change.startTransaction();
        expect(await lockActiveKey(change.manager, key.id)).toBe(true);
        const revoking = revoke(db.dataSource.manager, key.id);
        // This database's waiter only: the server is shared with test files running beside this one, whose own
        // revocations waiting on a lock would otherwise let the change commit before this revocation waits for it.
        await waitForLockWaiter(db.dataSource, { statementLike: '%UPDATE api_keys%' });
        const [{ committed }] = (await change.query(`SELECT clock_timestamp() AS committed`)) as { committed: Date }[];
        await change.commitTransaction();
        await revoking;
        const [{ revoked_at }] = (await db.dataSource.query(`SELECT revoked_at FROM api_keys WHERE id = $1`, [
          key.id,
        ])) as { revoked_at: Date }[];
        // now() is the statement's start, before the wait: the audit would show a revoked key making a change.
        expect(revoked_at.getTime()).toBeGreaterThanOrEqual(committed.getTime());
      } finally {
        await change.release();
      }
    },
  );
});
