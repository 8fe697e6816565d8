import 'reflect-metadata';
import { NEWER_SCHEMA, openDataSource, runMigrationsLocked, seedDemo } from '@verity/persistence';
import { createLogger, loadConfig, lookalikeVariableWarnings, runMain } from '@verity/platform';

/** Runs migrations under the advisory lock and, for the local demo (SEED_DEMO), seeds the demo tenant. Then exits. */
async function main(): Promise<void> {
  const config = loadConfig();
  const logger = createLogger('migrate', config.LOG_LEVEL);
  for (const warning of lookalikeVariableWarnings()) logger.warn(warning);
  const ds = await openDataSource(config.DATABASE_URL, 2);
  try {
    const { applied, unknown } = await runMigrationsLocked(ds, {
      log: logger,
      timeoutMs: config.MIGRATION_LOCK_TIMEOUT_MS,
    });
    if (unknown.length > 0) logger.warn({ applied, unknown }, NEWER_SCHEMA);
    else logger.info({ applied }, applied.length ? 'migrations applied' : 'schema up to date');
    if (config.SEED_DEMO) {
      await seedDemo(ds.manager);
      logger.warn('demo tenant seeded with the published demo keys (README): for a local demo only');
    }
  } finally {
    await ds.destroy();
  }
}

runMain('migrate', main);
