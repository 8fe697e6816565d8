import { ensureTenant } from '../../libs/persistence/src/api-keys';
import { createTestDatabase, TestDatabase } from './services';

/**
 * The database of a describe block (see createTestDatabase): created before its first test, with `tenants` in place,
 * and dropped after its last. Read it only inside hooks and tests, once it exists.
 */
export function useTestDatabase(label: string, tenants: readonly string[] = []): TestDatabase {
  let db: TestDatabase | undefined;
  beforeAll(async () => {
    db = await createTestDatabase(label);
    for (const tenantId of tenants) await ensureTenant(db.dataSource.manager, tenantId);
  });
  afterAll(async () => db?.drop());
  const created = (): TestDatabase => {
    if (!db) throw new Error(`the test database '${label}' is used before its beforeAll ran`);
    return db;
  };
  return {
    get url() {
      return created().url;
    },
    get name() {
      return created().name;
    },
    get dataSource() {
      return created().dataSource;
    },
    drop: () => created().drop(),
  };
}
