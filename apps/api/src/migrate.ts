import 'reflect-metadata';
import {
  MigrationLockAbandonedError,
  NEWER_SCHEMA,
  openDataSource,
  runMigrationsLocked,
  seedDemo,
} from '@verity/persistence';
import { createLogger, loadConfig, lookalikeVariableWarnings, runMain } from '@verity/platform';

/**
 * The exit code when a signal (SIGTERM, SIGINT) stopped the step before it took the migration lock: nothing was
 * migrated, so a deployment must not go on as if it had (docs/operations.md). 75 is EX_TEMPFAIL: run it again.
 */
const ABANDONED_EXIT_CODE = 75;

/**
 * Runs migrations under the advisory lock and, for the local demo (SEED_DEMO), seeds the demo tenant. Then exits.
 * SIGTERM or SIGINT while it waits for the lock another process holds: it stops waiting, closes its sessions and exits
 * ABANDONED_EXIT_CODE. Once it holds the lock, the pending migrations run to their end first (docs/decisions.md).
 */
async function main(): Promise<void> {
  const config = loadConfig();
  const logger = createLogger('migrate', config.LOG_LEVEL);
  for (const warning of lookalikeVariableWarnings()) logger.warn(warning);
  const stop = new AbortController();
  const stopOn = (signal: NodeJS.Signals) => () => stop.abort(signal);
  process.on('SIGTERM', stopOn('SIGTERM'));
  process.on('SIGINT', stopOn('SIGINT'));
  const ds = await openDataSource(config.DATABASE_URL, 2);
  try {
    const { applied, unknown } = await runMigrationsLocked(ds, {
      log: logger,
      timeoutMs: config.MIGRATION_LOCK_TIMEOUT_MS,
      signal: stop.signal,
    });
    if (unknown.length > 0) logger.warn({ applied, unknown }, NEWER_SCHEMA);
    else logger.info({ applied }, applied.length ? 'migrations applied' : 'schema up to date');
    if (config.SEED_DEMO) {
      await seedDemo(ds.manager);
      logger.warn('demo tenant seeded with the published demo keys (README): for a local demo only');
    }
  } catch (error) {
    if (!(error instanceof MigrationLockAbandonedError)) throw error;
    const { reason, waitedMs, holderPid } = error;
    logger.warn({ signal: reason, waitedMs, holderPid, exitCode: ABANDONED_EXIT_CODE }, error.message);
    process.exitCode = ABANDONED_EXIT_CODE;
  } finally {
    await ds.destroy();
  }
}

runMain('migrate', main);
