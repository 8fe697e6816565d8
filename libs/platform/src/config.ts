import { z } from 'zod';

const bool = z
  .enum(['true', 'false', '1', '0'])
  .transform((v) => v === 'true' || v === '1')
  .optional();
const ms = (fallback: number) => z.coerce.number().int().nonnegative().default(fallback);

/**
 * The one place that reads process.env. Validated once at boot: a bad value stops the process with a
 * message naming the variable, instead of failing later in a hot path.
 */
const ConfigSchema = z.object({
  NODE_ENV: z.enum(['development', 'test', 'production']).default('development'),
  PORT: z.coerce.number().int().min(0).max(65535).default(3000),
  HOST: z.string().default('0.0.0.0'),
  DATABASE_URL: z.string().url().default('postgres://postgres@127.0.0.1:5432/verity'),
  DATABASE_POOL_SIZE: z.coerce.number().int().min(1).max(200).default(10),
  REDIS_URL: z.string().url().default('redis://127.0.0.1:6379'),
  QUEUE_PREFIX: z.string().min(1).default('{verity}'),
  SANDBOX_URL: z.string().url().default('http://127.0.0.1:4010'),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  RUN_MIGRATIONS: bool,
  SEED_DEMO: bool,
  /** How long a dispatch job's lock lives; a SENT operation older than this with no live job is orphaned. */
  DISPATCH_LOCK_MS: ms(30_000),
  /** A worker that wakes up this long after committing SENT does not call the connector any more. */
  SEND_GRACE_MS: ms(5_000),
  CONNECTOR_TIMEOUT_MS: ms(5_000),
  /** Read-back may not conclude "absent" before this much time has passed since the send. */
  SETTLE_WINDOW_MS: ms(2_000),
  VERIFY_FIRST_DELAY_MS: ms(0),
  READ_BACKOFF_MS: ms(250),
  READ_BACKOFF_MAX_MS: ms(5_000),
  RECONCILE_BUDGET: z.coerce.number().int().min(1).default(8),
  RECONCILE_DEADLINE_MS: ms(600_000),
  SWEEP_INTERVAL_MS: ms(2_000),
  STALE_EXECUTION_MS: ms(5_000),
  APPROVAL_TTL_MS: ms(15 * 60_000),
  OBLIGATION_DUE_MS: ms(4 * 3600_000),
  IDEMPOTENCY_TTL_MS: ms(24 * 3600_000),
  WORKER_CONCURRENCY: z.coerce.number().int().min(1).max(500).default(16),
  RATE_LIMIT_PER_MINUTE: z.coerce.number().int().min(1).default(6000),
  MAX_STREAMS_PER_KEY: z.coerce.number().int().min(1).default(20),
  SSE_HEARTBEAT_MS: ms(15_000),
  BULL_BOARD_READ_ONLY: bool,
});

export type VerityConfig = z.infer<typeof ConfigSchema>;

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): VerityConfig {
  const parsed = ConfigSchema.safeParse(env);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');
    throw new ConfigError(`invalid configuration: ${problems}`);
  }
  return parsed.data;
}

export const VERITY_CONFIG = Symbol('VERITY_CONFIG');
