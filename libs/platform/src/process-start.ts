import type { Logger } from 'pino';
import { VerityConfig, loadConfig, lookalikeVariableWarnings, tracingOn } from './config';
import { createLogger } from './logger';
import { collectProcessMetrics } from './metrics';
import { logCrashes } from './shutdown';

/**
 * Runs a process's main (the API, a worker, the migration). A failure to start is one fatal JSON line on stderr (its
 * logger may not exist yet: the config may be what failed) and exit code 1.
 */
export function runMain(app: string, main: () => Promise<void>): void {
  main().catch((error: unknown) => {
    process.stderr.write(
      `${JSON.stringify({ level: 'fatal', app, msg: String((error as Error)?.message ?? error) })}\n`,
    );
    process.exit(1);
  });
}

/**
 * The first steps of a long-running process (the API, the dispatcher, the reconciler): config validated first (a bad
 * value stops it, naming the variable; a name that looks like ours is a warning), its logger, crashes logged with their stack, Node's own metrics collected.
 */
export function startProcess(app: string): { config: VerityConfig; logger: Logger } {
  const config = loadConfig();
  const logger = createLogger(app, config.LOG_LEVEL, tracingOn(config));
  for (const warning of lookalikeVariableWarnings()) logger.warn(warning);
  logCrashes(logger);
  collectProcessMetrics();
  return { config, logger };
}
