import type { DataSource } from 'typeorm';
import type { RedisClient, VerityConfig } from '@verity/platform';
import { ApiKeyService } from './api-key.service';

/**
 * A key revoked while a lookup of it is on its way to the database: the revocation's notice (invalidateAll) empties
 * the cache, then the lookup comes back with the row as it was read before the revocation. Nothing from that read may
 * be kept, or the revoked key would be trusted for the cache's lifetime.
 */
describe('ApiKeyService: a revocation during a lookup', () => {
  function serviceWithRows() {
    const answers: ((row: unknown) => void)[] = [];
    const db = {
      manager: {
        getRepository: () => ({
          findOneBy: () => new Promise((resolve) => answers.push(resolve)),
        }),
      },
    } as unknown as DataSource;
    const redis = { defineCommand: () => undefined } as unknown as RedisClient;
    const config = { QUEUE_PREFIX: 'spec', AUTH_FAILURES_PER_MINUTE: 30 } as unknown as VerityConfig;
    const keys = new ApiKeyService(db, config, redis);
    keys.setRevocationsLive(true);
    return { keys, answers };
  }
  const activeRow = { id: 'key_1', tenantId: 'demo', role: 'agent', revokedAt: null };

  it('keeps nothing a lookup read before the revocation was announced', async () => {
    const { keys, answers } = serviceWithRows();
    const before = keys.authenticate('a-key');
    await new Promise((r) => setImmediate(r));
    expect(answers).toHaveLength(1);
    // The key is revoked and every process is told; then the read made before it answers "active".
    keys.invalidateAll();
    answers[0](activeRow);
    expect(await before).toMatchObject({ keyId: 'key_1' });
    // The next request asks the database again, which now answers "revoked".
    const after = keys.authenticate('a-key');
    await new Promise((r) => setImmediate(r));
    expect(answers).toHaveLength(2);
    answers[1]({ ...activeRow, revokedAt: new Date() });
    expect(await after).toBeNull();
  });

  it('keeps what a lookup read when no revocation came meanwhile', async () => {
    const { keys, answers } = serviceWithRows();
    const first = keys.authenticate('a-key');
    await new Promise((r) => setImmediate(r));
    answers[0](activeRow);
    expect(await first).toMatchObject({ keyId: 'key_1' });
    expect(await keys.authenticate('a-key')).toMatchObject({ keyId: 'key_1' });
    expect(answers).toHaveLength(1);
  });
});
