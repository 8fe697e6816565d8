import { isIP } from 'node:net';
import { z } from 'zod';
import { redisHashTag } from './redis';

const FLAG_VALUES = ['true', 'false', '1', '0'] as const;
const isOn = (v: (typeof FLAG_VALUES)[number]) => v === 'true' || v === '1';
const bool = z.enum(FLAG_VALUES).transform(isOn).optional();
/** A flag that is on unless set to `false` or `0`. */
const boolOnByDefault = z.enum(FLAG_VALUES).default('true').transform(isOn);
/** TRUST_PROXY: a hop count (1–10), or a comma-separated list of addresses, CIDRs and Express' named ranges. */
const trustProxy = z.string().transform((value, ctx): number | string[] => {
  if (/^\d+$/.test(value)) {
    const hops = Number(value);
    if (hops >= 1 && hops <= 10) return hops;
  }
  const entries = value.split(',').map((entry) => entry.trim());
  const valid = (entry: string) => {
    if (['loopback', 'linklocal', 'uniquelocal'].includes(entry)) return true;
    const [address, prefix, ...rest] = entry.split('/');
    const family = isIP(address);
    if (family === 0 || rest.length > 0) return false;
    if (prefix === undefined) return true;
    return /^\d{1,3}$/.test(prefix) && Number(prefix) <= (family === 4 ? 32 : 128);
  };
  if (entries.length > 0 && entries.every(valid)) return entries;
  ctx.addIssue({
    code: 'custom',
    message: 'a hop count 1–10, or addresses, CIDRs, loopback, linklocal or uniquelocal, comma separated (never true)',
  });
  return z.NEVER;
});
/** The longest delay Node's timers take: setTimeout/setInterval turn a longer one into 1 ms (TimeoutOverflowWarning). */
export const TIMER_MAX_MS = 2_147_483_647;
const SECOND = 1_000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

/** `90000` → `1.5 min`: the range of a duration, as an operator reads it. */
function humanDuration(ms: number): string {
  const units: [number, string][] = [
    [DAY, 'days'],
    [HOUR, 'h'],
    [MINUTE, 'min'],
    [SECOND, 's'],
  ];
  for (const [size, unit] of units) {
    if (ms < size) continue;
    const count = Math.floor((ms / size) * 10) / 10; // never above the true value
    return `${count} ${unit === 'days' && count === 1 ? 'day' : unit}`;
  }
  return `${ms} ms`;
}

/**
 * Plain decimal digits: what Number() reads besides (`0x10`, `1e3`, `+5`, ` 3000`, `3000.0`) would be taken for a
 * value its writer may not have meant (16, not 10).
 */
const DECIMAL_DIGITS = /^[0-9]+$/;

/**
 * A whole number from `min` to `max`, in plain decimal digits; `default` when unset or empty (an empty value, as
 * `${NAME:-}` in a compose file gives, is unset — never 0). Anything else refuses start with one message naming the
 * range.
 */
function bounded({ min, max, default: fallback }: { min: number; max: number; default: number }, unit: 'ms' | 'count') {
  const range =
    unit === 'ms'
      ? `must be a whole number of milliseconds from ${min} to ${max} (${humanDuration(min)} to ${humanDuration(max)})`
      : `must be a whole number from ${min} to ${max}`;
  const form = `${range}, in decimal digits only (no sign, exponent, fraction, hex or spaces)`;
  return z.preprocess(
    (v) => (typeof v === 'string' && v.trim() === '' ? undefined : v),
    z
      .string({ error: form })
      .regex(DECIMAL_DIGITS, { error: form, abort: true })
      .transform(Number)
      .pipe(
        z
          .number()
          .int({ error: range, abort: true })
          .min(min, { error: range, abort: true })
          .max(max, { error: range, abort: true }),
      )
      .default(fallback),
  );
}
/** A duration in milliseconds from `min` to `max` (a timer's at most TIMER_MAX_MS); `default` when unset. */
const ms = (fallback: number, { min, max }: { min: number; max: number }) =>
  bounded({ min, max, default: fallback }, 'ms');
/** A whole number from `min` to `max`; `default` when unset. */
const integer = (bounds: { min: number; max: number; default: number }) => bounded(bounds, 'count');

/**
 * The whole-number rule of every count above, for a process that reads variables of its own (the sandbox provider):
 * plain decimal digits from `min` to `max`, `default` when unset or empty. Read with readVariables.
 */
export const wholeNumberVariable = integer;

/**
 * MCP_ALLOWED_ORIGINS: web origins (`https://agent.example.com`, comma separated) whose pages may call /mcp, beside the
 * API's own. Each is a scheme (http or https), a host and an optional port — no path, query or credentials — and is
 * kept in its normalized form (`URL.origin`: lower-case host, default port dropped), the form a browser sends.
 */
const webOrigins = z.string().transform((value, ctx): string[] => {
  const origins: string[] = [];
  for (const entry of value.split(',').map((e) => e.trim())) {
    let url: URL | undefined;
    try {
      url = new URL(entry);
    } catch {
      url = undefined;
    }
    const bare =
      (url?.protocol === 'http:' || url?.protocol === 'https:') &&
      url.username === '' &&
      url.password === '' &&
      url.pathname === '/' && // the root a bare origin parses to (a trailing slash alone is allowed)
      url.search === '' &&
      url.hash === '';
    if (!bare || url === undefined) {
      ctx.addIssue({ code: 'custom', message: `"${entry}" is not an origin: http(s)://host[:port], nothing after it` });
      return z.NEVER;
    }
    origins.push(url.origin);
  }
  return origins;
});

const optionalText = z.preprocess((v) => (v === '' ? undefined : v), z.string().optional());

const TRACING_VARIABLES = {
  OTEL_SDK_DISABLED: optionalText,
  OTEL_EXPORTER_OTLP_ENDPOINT: optionalText,
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: optionalText,
  OTEL_TRACES_EXPORTER: optionalText,
  OTEL_SERVICE_NAME: optionalText,
};

export type TracingVariables = { [K in keyof typeof TRACING_VARIABLES]?: string | undefined };

/**
 * Traces are on when an OTLP endpoint or a traces exporter (other than `none`) is set, and OTEL_SDK_DISABLED is not
 * `true`. Off, nothing is started: no SDK, no instrumentation, no propagation.
 */
export function tracingOn(variables: TracingVariables): boolean {
  const blank = (v: string | undefined) => v === undefined || v.trim() === '';
  if (variables.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false;
  const exporters = (variables.OTEL_TRACES_EXPORTER ?? '')
    .split(',')
    .map((e) => e.trim().toLowerCase())
    .filter((e) => e !== '');
  if (exporters[0] === 'none') return false;
  return (
    exporters.length > 0 ||
    !blank(variables.OTEL_EXPORTER_OTLP_ENDPOINT) ||
    !blank(variables.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
  );
}

/**
 * The tracing variables of the environment, for the tracing bootstrap, which runs before the configuration is loaded
 * (it must start before Postgres, Redis and HTTP are first required).
 */
export function tracingVariables(env: NodeJS.ProcessEnv = process.env): TracingVariables {
  return Object.fromEntries(Object.keys(TRACING_VARIABLES).map((name) => [name, env[name]])) as TracingVariables;
}

/**
 * The one place that reads process.env. Validated once at boot: a bad value stops the process with a
 * message naming the variable, instead of failing later in a hot path.
 *
 * Every number has a range (docs/operations.md lists them). A duration that feeds a timer is at most TIMER_MAX_MS
 * (less where it is multiplied first: the sweep's fallback timer runs at 5 × SWEEP_INTERVAL_MS); one used only in SQL
 * or in date arithmetic may be longer, but finite. A minimum keeps a timer from spinning (an interval of 0) and a
 * guarantee from vanishing (a dispatch lock, a connector timeout of 0).
 */
const ConfigSchema = z
  .object({
    NODE_ENV: z.enum(['development', 'test', 'production']).default('development'),
    PORT: integer({ min: 0, max: 65535, default: 3000 }),
    /** Loopback unless set: exposing the API is a decision (docker-compose sets 0.0.0.0 inside its network). */
    HOST: z.string().min(1).default('127.0.0.1'),
    /** A Unix socket when Postgres is local: `postgres://user@localhost/verity?host=/var/run/postgresql` (operations.md). */
    DATABASE_URL: z
      .string()
      .url()
      .refine((url) => /^postgres(ql)?:\/\//i.test(url), 'must be a postgres:// URL')
      .default('postgres://postgres@127.0.0.1:5432/verity'),
    DATABASE_POOL_SIZE: integer({ min: 1, max: 200, default: 10 }),
    /**
     * A statement with no reply after this is given up and its connection dropped (the server rolls its transaction
     * back): a Postgres that stops answering (frozen, cut off) otherwise held requests, jobs and shutdown forever.
     */
    /** A statement under way at SIGTERM is waited for: at most SHUTDOWN_GRACE_MS − SHUTDOWN_MARGIN_MS (checked below). */
    DATABASE_QUERY_TIMEOUT_MS: ms(10_000, { min: 100, max: HOUR }),
    /** `redis://`, `rediss://`, or a local Unix socket: `unix:///run/redis/redis.sock?db=0` (operations.md). */
    REDIS_URL: z
      .string()
      .url()
      .refine((url) => /^(rediss?:\/\/|unix:\/\/\/)/.test(url), 'must be redis://, rediss:// or unix:///<socket path>')
      .default('redis://127.0.0.1:6379'),
    QUEUE_PREFIX: z.string().min(1).default('{verity}'),
    /**
     * Redis Cluster: its nodes (`host:port` or `redis[s]://[user:password@]host:port`, comma-separated; a few are enough,
     * the rest are discovered). Set, every Redis connection is a cluster client and REDIS_URL is not used.
     */
    REDIS_CLUSTER_NODES: z.preprocess(
      (v) => (v === '' ? undefined : v),
      z
        .string()
        .transform((v) =>
          v
            .split(',')
            .map((n) => n.trim())
            .filter((n) => n !== ''),
        )
        .pipe(z.array(z.string().regex(/^(rediss?:\/\/[^\s,]+|[^\s:/,]+:\d+)$/, 'host:port or a redis:// URL')).min(1))
        .optional(),
    ),
    /**
     * Queue shards (docs/operations.md): each has its own hash tag (`{verity:0}`, `{verity:1}`, …), so on a Redis Cluster
     * the queues spread over the nodes. An execution's jobs all go to its shard. 1 keeps the prefix exactly QUEUE_PREFIX.
     */
    QUEUE_SHARDS: integer({ min: 1, max: 1024, default: 1 }),
    /** The shards this worker consumes (comma-separated numbers); all of them when unset. */
    QUEUE_SHARDS_CONSUMED: z.preprocess(
      (v) => (v === '' ? undefined : v),
      z
        .string()
        .transform((v, ctx): number[] => {
          const shards = v.split(',').map((n) => n.trim());
          if (shards.every((n) => DECIMAL_DIGITS.test(n))) return shards.map(Number);
          ctx.addIssue({ code: 'custom', message: 'shard numbers in decimal digits only, comma separated (0,2)' });
          return z.NEVER;
        })
        .optional(),
    ),
    SANDBOX_URL: z.string().url().default('http://127.0.0.1:4010'),
    LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
    RUN_MIGRATIONS: bool,
    /**
     * How long the migration step (and the API with RUN_MIGRATIONS) waits for the migration lock another process holds
     * before it gives up and exits 1, nothing migrated. 0: as long as it takes.
     */
    MIGRATION_LOCK_TIMEOUT_MS: ms(0, { min: 0, max: 30 * DAY }),
    /** The demo tenant and its published keys: only the local demo (`npm start`) sets this; refused in production. */
    SEED_DEMO: bool,
    /** How long a dispatch job's lock lives; a SENT operation older than this with no live job is orphaned. */
    DISPATCH_LOCK_MS: ms(30_000, { min: SECOND, max: TIMER_MAX_MS }),
    /**
     * A worker that wakes up this long after starting the SENT commit calls the connector only if it still holds the
     * dispatch job's lock (docs/operations.md).
     */
    SEND_GRACE_MS: ms(5_000, { min: 0, max: TIMER_MAX_MS }),
    /**
     * How long the dispatcher keeps trying to write a provider's answer (ACKNOWLEDGED and its reference, a rejection, an
     * UNKNOWN) while Postgres cannot take it (unreachable, restarting, a statement timed out): the send's job holds its
     * lock meanwhile, so the sweeper leaves the operation SENT. Past it, or on SIGTERM, the answer is logged and the
     * operation is left for the sweeper to hold as UNKNOWN. 0 = one try.
     */
    ANSWER_WRITE_RETRY_MS: ms(60_000, { min: 0, max: TIMER_MAX_MS }),
    CONNECTOR_TIMEOUT_MS: ms(5_000, { min: 100, max: HOUR }),
    /**
     * How long a committed write may take to show on the provider's read side (replica lag budget). "Absent" is
     * concluded only SEND_GRACE_MS + CONNECTOR_TIMEOUT_MS + SETTLE_WINDOW_MS after the send could last have started.
     */
    SETTLE_WINDOW_MS: ms(2_000, { min: 0, max: TIMER_MAX_MS }),
    VERIFY_FIRST_DELAY_MS: ms(0, { min: 0, max: TIMER_MAX_MS }),
    /**
     * The dispatcher reads an acknowledged effect back at once, in the send's own job, and settles it VERIFIED when the
     * read finds it (the happy path in one job); any other read is left to the verify job. Needs VERIFY_FIRST_DELAY_MS 0.
     */
    VERIFY_AT_SEND: boolOnByDefault,
    /**
     * The advance job that makes operations ready sends them itself, side by side (under its own job lock, which the
     * sweeper's orphan check accepts as it accepts a dispatch job's), instead of handing them to dispatch jobs: one
     * BullMQ job per operation on the happy path. Dispatch jobs remain for a reviewer's release.
     */
    SEND_IN_ADVANCE: boolOnByDefault,
    READ_BACKOFF_MS: ms(250, { min: 10, max: TIMER_MAX_MS }),
    READ_BACKOFF_MAX_MS: ms(5_000, { min: 10, max: TIMER_MAX_MS }),
    RECONCILE_BUDGET: integer({ min: 1, max: 1_000_000, default: 8 }),
    /**
     * I15, no blind send: an irreversible operation whose precondition (expected_state, or an approval's baseline) cannot
     * be read waits in PREPARED and is read again with this backoff; after this many failed reads (or when the next one
     * could only come after the execution's deadline) it is held in MANUAL_REVIEW with SOURCE_UNREACHABLE.
     */
    PRECONDITION_READ_BUDGET: integer({ min: 1, max: 1_000_000, default: 8 }),
    PRECONDITION_READ_BACKOFF_MS: ms(1_000, { min: 10, max: TIMER_MAX_MS }),
    PRECONDITION_READ_BACKOFF_MAX_MS: ms(30_000, { min: 10, max: TIMER_MAX_MS }),
    RECONCILE_DEADLINE_MS: ms(600_000, { min: SECOND, max: 30 * DAY }),
    SWEEP_INTERVAL_MS: ms(2_000, { min: 100, max: HOUR }),
    STALE_EXECUTION_MS: ms(5_000, { min: 100, max: DAY }),
    /** The most rows each pass of a sweep reads (owed checks, stale executions, escalations, prunes...) per sweep. */
    SWEEP_BATCH: integer({ min: 1, max: 10_000, default: 500 }),
    APPROVAL_TTL_MS: ms(15 * MINUTE, { min: 1, max: 30 * DAY }),
    OBLIGATION_DUE_MS: ms(4 * HOUR, { min: SECOND, max: 30 * DAY }),
    /**
     * A hold for an unreachable or lagging source is read again after RECHECK_BACKOFF_MS, doubling up to
     * RECHECK_BACKOFF_MAX_MS, until its obligation is due.
     */
    RECHECK_BACKOFF_MS: ms(30_000, { min: SECOND, max: 30 * DAY }),
    RECHECK_BACKOFF_MAX_MS: ms(600_000, { min: SECOND, max: 30 * DAY }),
    IDEMPOTENCY_TTL_MS: ms(24 * HOUR, { min: SECOND, max: 30 * DAY }),
    WORKER_CONCURRENCY: integer({ min: 1, max: 500, default: 16 }),
    RATE_LIMIT_PER_MINUTE: integer({ min: 1, max: 1_000_000_000, default: 6000 }),
    MAX_STREAMS_PER_KEY: integer({ min: 1, max: 100_000, default: 20 }),
    /**
     * SSE streams all keys together may hold open at once in one API process (one tenant, all its keys, at most half
     * of them).
     */
    MAX_STREAMS_PER_PROCESS: integer({ min: 1, max: 100_000, default: 1000 }),
    /**
     * /v1 requests one key may have in flight at once in one API process (an open stream and the calls the MCP
     * endpoint makes for a client are not counted: they have bounds of their own).
     */
    MAX_V1_REQUESTS_PER_KEY: integer({ min: 1, max: 10_000, default: 64 }),
    /**
     * /v1 requests all keys together may have in flight at once in one API process (one tenant, all its keys, at most
     * half of them).
     */
    MAX_V1_REQUESTS_PER_PROCESS: integer({ min: 1, max: 100_000, default: 256 }),
    /**
     * The stored text (bytes) the answers of executions, pages of executions and pages of the review queue under way
     * in one API process may hold together; past it an answer waits its turn (ANSWER_BYTES_IN_FLIGHT_WAIT_MS), then
     * 503 answers-busy. Sized to the API's 128 MB heap: one answer of an execution at its largest (~19 MB stored)
     * takes several times that in the heap while it is read, presented and written out.
     */
    ANSWER_BYTES_IN_FLIGHT: integer({ min: 1024, max: 64 * 1024 * 1024 * 1024, default: 32 * 1024 * 1024 }),
    /** How long an answer waits for its bytes (ANSWER_BYTES_IN_FLIGHT) before it is refused 503 answers-busy. */
    ANSWER_BYTES_IN_FLIGHT_WAIT_MS: ms(2_000, { min: 0, max: 60_000 }),
    /** MCP requests (each message with an id) one key may have in flight at once in one API process. */
    MAX_MCP_REQUESTS_PER_KEY: integer({ min: 1, max: 10_000, default: 100 }),
    /**
     * MCP requests all keys together may have in flight at once in one API process (one tenant, all its keys, at most
     * half of them).
     */
    MAX_MCP_REQUESTS_PER_PROCESS: integer({ min: 1, max: 100_000, default: 200 }),
    SSE_HEARTBEAT_MS: ms(15_000, { min: 100, max: HOUR }),
    /**
     * How long a stream waits for a client that stopped reading to take what was written, before it closes the
     * connection (the client resumes from Last-Event-ID): nothing of a long history piles up in the API's memory.
     */
    SSE_DRAIN_TIMEOUT_MS: ms(30_000, { min: 100, max: TIMER_MAX_MS }),
    /** Bull Board is read-only in every mode; only this, set explicitly, lets an operator retry or pause jobs there. */
    BULL_BOARD_WRITABLE: bool,
    /**
     * Whether a tenant's admin may allow private addresses (loopback, RFC 1918, link-local such as 169.254.169.254…)
     * for a host of the http connector and webhooks (`allow_private`): those are the platform's own network, so an
     * operator grants it. Unset: allowed except in production.
     */
    TENANT_PRIVATE_EGRESS: bool,
    /** /metrics answers only to an operator key or this bearer token (Prometheus `bearer_token`)... */
    METRICS_TOKEN: z.preprocess((v) => (v === '' ? undefined : v), z.string().min(16).optional()),
    /** ...unless this is set: then /metrics is open to anyone who can reach the port. */
    METRICS_PUBLIC: bool,
    /**
     * The workers serve /metrics and /health/live, /health/ready on a port of their own (on HOST, like the API), each
     * with its own default so both can run on one machine. 0 = no HTTP at all.
     */
    DISPATCHER_METRICS_PORT: integer({ min: 0, max: 65535, default: 9101 }),
    RECONCILER_METRICS_PORT: integer({ min: 0, max: 65535, default: 9102 }),
    /** A request body must arrive within this long; a slower one gets 408 and the connection is closed. */
    BODY_TIMEOUT_MS: ms(30_000, { min: 100, max: HOUR }),
    /** Failed authentications (unknown or revoked key) allowed per client address per minute before 429. */
    AUTH_FAILURES_PER_MINUTE: integer({ min: 1, max: 1_000_000_000, default: 30 }),
    /**
     * The reverse proxies in front of the API whose `X-Forwarded-For` names the client (for the count of failed
     * authentications): a number of hops, or addresses / CIDRs / `loopback`, `linklocal`, `uniquelocal`, comma
     * separated. Unset: no proxy header is believed, and the client is the socket's peer — behind a proxy, that is the
     * proxy, and every client shares one count. Never `true`: anyone could then choose their own address.
     */
    TRUST_PROXY: z.preprocess((v) => (v === '' ? undefined : v), trustProxy.optional()),
    /**
     * The MCP endpoint refuses a request whose Origin header is present and neither the API's own origin nor one of
     * these (DNS rebinding, docs/api.md "MCP"); a client that is no browser sends no Origin and is not judged.
     */
    MCP_ALLOWED_ORIGINS: z.preprocess((v) => (v === '' ? undefined : v), webOrigins.default([])),
    /** 32 random bytes, base64 (`openssl rand -base64 32`): connector secrets are then stored sealed (AES-256-GCM). */
    SECRETS_KEY: z
      .preprocess((v) => (v === '' ? undefined : v), z.string().optional())
      .pipe(
        z
          .string()
          .refine((v) => Buffer.from(v, 'base64').length === 32 && /^[A-Za-z0-9+/]+=*$/.test(v), {
            message: 'must be 32 bytes, base64-encoded (openssl rand -base64 32)',
          })
          .optional(),
      ),
    /**
     * Observation after VERIFIED: how often one operation is read again, for how long after it was created, and how
     * many the sweeper hands out per sweep (0 = off).
     */
    OBSERVE_INTERVAL_MS: ms(60_000, { min: 100, max: 30 * DAY }),
    OBSERVE_WINDOW_MS: ms(HOUR, { min: SECOND, max: 365 * DAY }),
    OBSERVE_BATCH: integer({ min: 0, max: 10_000, default: 100 }),
    /**
     * Webhooks: a delivery is tried up to WEBHOOK_MAX_ATTEMPTS times, WEBHOOK_BACKOFF_MS apart doubling each time; an
     * endpoint whose last WEBHOOK_DISABLE_AFTER deliveries all failed (every attempt) is disabled. The reconciler looks
     * for new events to announce every WEBHOOK_SCAN_INTERVAL_MS; each call to a receiver has WEBHOOK_TIMEOUT_MS. The
     * last retry's delay is at most WEBHOOK_LAST_RETRY_MAX_MS (checked below): 24 attempts is the most that any
     * WEBHOOK_BACKOFF_MS can have (100 ms × 2^22 is under 5 days).
     */
    WEBHOOK_MAX_ATTEMPTS: integer({ min: 1, max: 24, default: 8 }),
    WEBHOOK_BACKOFF_MS: ms(5_000, { min: 100, max: HOUR }),
    WEBHOOK_DISABLE_AFTER: integer({ min: 1, max: 10_000, default: 5 }),
    WEBHOOK_SCAN_INTERVAL_MS: ms(1_000, { min: 50, max: HOUR }),
    WEBHOOK_TIMEOUT_MS: ms(10_000, { min: 100, max: HOUR }),
    /**
     * Settled webhook deliveries (delivered, failed, skipped) older than this are deleted by the sweeper, a batch at a
     * time; a pending one never is. At least a day, so the log still shows (and redelivers) what happened yesterday.
     */
    WEBHOOK_DELIVERY_RETENTION_MS: ms(30 * DAY, { min: DAY, max: 365 * DAY }),
    /**
     * How long a process may take to stop after SIGTERM (its jobs under way finish, connections close) before it
     * exits 1 anyway. An orchestrator's own grace (Kubernetes' terminationGracePeriodSeconds, compose's
     * stop_grace_period) must be longer. A webhook call under way is waited for: WEBHOOK_TIMEOUT_MS must leave
     * SHUTDOWN_MARGIN_MS of it (checked below).
     */
    SHUTDOWN_GRACE_MS: ms(25_000, { min: 10 * SECOND, max: 2 * HOUR }),
    /**
     * Test-only kill points (docs/operations.md): the dispatcher logs a marker and sleeps before the SENT statement,
     * after committing SENT, or after the connector answered and before the outcome is written; the reconciler (and the
     * dispatcher at send) before a read-back. 0 = off. Refused in production, so they can never slow down or widen a
     * real crash window.
     */
    TEST_PAUSE_BEFORE_SENT_MS: ms(0, { min: 0, max: TIMER_MAX_MS }),
    TEST_PAUSE_AFTER_SENT_MS: ms(0, { min: 0, max: TIMER_MAX_MS }),
    TEST_PAUSE_AFTER_CALL_MS: ms(0, { min: 0, max: TIMER_MAX_MS }),
    TEST_PAUSE_BEFORE_READ_MS: ms(0, { min: 0, max: TIMER_MAX_MS }),
    /** The dispatcher, after a spending cap refused a send and before the statement that cancels it for the cap. */
    TEST_PAUSE_BEFORE_CAP_REFUSAL_MS: ms(0, { min: 0, max: TIMER_MAX_MS }),
    /** The reconciler, in a sweep holding its lock, after its first pass (the expiry) and before the next. */
    TEST_PAUSE_IN_SWEEP_MS: ms(0, { min: 0, max: TIMER_MAX_MS }),
    /**
     * Traces (OpenTelemetry): the standard variables, read here only to decide whether tracing is on (`tracingOn`);
     * the SDK reads the rest of `OTEL_*` itself (protocol, headers, sampler, batch delay...).
     */
    ...TRACING_VARIABLES,
  })
  .superRefine((config, ctx) => {
    // A backoff's cap below its first delay: every wait would be the cap, and the first delay set for nothing.
    for (const [first, cap] of BACKOFFS) {
      if (config[cap] < config[first]) {
        ctx.addIssue({
          code: 'custom',
          path: [cap],
          message: `must be at least ${first} (${config[cap]} is below ${config[first]}): the longest wait of a backoff is never shorter than its first`,
        });
      }
    }
    // A tenant policy states its due times in whole seconds, and GET /v1/admin/policy shows this default beside them
    // in seconds: a value between two seconds could only be shown rounded, longer or shorter than the due time in force.
    if (config.OBLIGATION_DUE_MS % SECOND !== 0) {
      ctx.addIssue({
        code: 'custom',
        path: ['OBLIGATION_DUE_MS'],
        message:
          `must be a whole number of seconds (a multiple of 1000): ${config.OBLIGATION_DUE_MS} is ` +
          `${config.OBLIGATION_DUE_MS / SECOND} s, and due times are stated and shown in whole seconds`,
      });
    }
    const lastRetryMs = webhookLastRetryMs(config);
    if (lastRetryMs > WEBHOOK_LAST_RETRY_MAX_MS) {
      ctx.addIssue({
        code: 'custom',
        path: ['WEBHOOK_MAX_ATTEMPTS'],
        message:
          `with WEBHOOK_BACKOFF_MS ${config.WEBHOOK_BACKOFF_MS}, the last retry of a webhook delivery would wait ` +
          `${lastRetryMs} ms (WEBHOOK_BACKOFF_MS × 2^(WEBHOOK_MAX_ATTEMPTS − 2)), more than ${WEBHOOK_LAST_RETRY_MAX_MS} ms ` +
          '(7 days): lower WEBHOOK_MAX_ATTEMPTS or WEBHOOK_BACKOFF_MS',
      });
    }
    // Work under way at SIGTERM is waited for before the process stops; a timeout the grace cannot hold ends in a
    // forced exit 1 with that work's record unwritten. A receiver that hangs: the reconciler waits for the call and
    // records its attempt. A send (or read): the dispatcher waits for it and records its outcome. A statement (a
    // request's, a job's, a sweep's): cutting it would leave what it wrote unknown, and with Postgres stalled it takes
    // the whole query timeout.
    const heldAtStop = [
      {
        name: 'WEBHOOK_TIMEOUT_MS',
        why: 'a webhook call under way at SIGTERM is waited for, and one the grace cannot hold ends in a forced exit with its attempt unrecorded',
      },
      {
        name: 'CONNECTOR_TIMEOUT_MS',
        why: 'a send under way at SIGTERM is waited for, and one the grace cannot hold ends in a forced exit with its outcome unrecorded',
      },
      {
        name: 'DATABASE_QUERY_TIMEOUT_MS',
        why: 'a statement under way at SIGTERM is waited for, and with Postgres stalled one the grace cannot hold ends in a forced exit',
      },
    ] as const;
    for (const { name, why } of heldAtStop) {
      if (config[name] + SHUTDOWN_MARGIN_MS > config.SHUTDOWN_GRACE_MS) {
        ctx.addIssue({
          code: 'custom',
          path: [name],
          message:
            `must be at most SHUTDOWN_GRACE_MS − ${SHUTDOWN_MARGIN_MS} ms (${config[name]} with ` +
            `SHUTDOWN_GRACE_MS ${config.SHUTDOWN_GRACE_MS}): ${why}; lower ${name} or raise SHUTDOWN_GRACE_MS`,
        });
      }
    }
    const sharded = config.QUEUE_SHARDS > 1 || config.REDIS_CLUSTER_NODES !== undefined;
    // A cluster runs a multi-key script only when all its keys hash to one slot: the prefix must be a hash tag.
    if (sharded && !redisHashTag(config.QUEUE_PREFIX)) {
      ctx.addIssue({
        code: 'custom',
        path: ['QUEUE_PREFIX'],
        message: 'must contain a hash tag such as {verity} with QUEUE_SHARDS > 1 or REDIS_CLUSTER_NODES',
      });
    }
    for (const shard of config.QUEUE_SHARDS_CONSUMED ?? []) {
      if (shard >= config.QUEUE_SHARDS) {
        ctx.addIssue({
          code: 'custom',
          path: ['QUEUE_SHARDS_CONSUMED'],
          message: `shard ${shard} does not exist (QUEUE_SHARDS is ${config.QUEUE_SHARDS}: shards 0 to ${config.QUEUE_SHARDS - 1})`,
        });
      }
    }
  });

/** Every variable loadConfig reads (docs/operations.md, "Environment variables", lists each with its default and range). */
export const CONFIG_VARIABLES = Object.keys(ConfigSchema.shape) as (keyof VerityConfig)[];

/** The backoffs whose first delay and cap are both configured: [first delay, cap]. */
const BACKOFFS = [
  ['READ_BACKOFF_MS', 'READ_BACKOFF_MAX_MS'],
  ['PRECONDITION_READ_BACKOFF_MS', 'PRECONDITION_READ_BACKOFF_MAX_MS'],
  ['RECHECK_BACKOFF_MS', 'RECHECK_BACKOFF_MAX_MS'],
] as const;

/**
 * What a stopping process needs beside a webhook call under way: the address lookup and connect, recording the
 * attempt, closing its connections.
 */
export const SHUTDOWN_MARGIN_MS = 5 * SECOND;

/** The longest a webhook delivery's last retry may wait (WEBHOOK_BACKOFF_MS × 2^(WEBHOOK_MAX_ATTEMPTS − 2)): 7 days. */
export const WEBHOOK_LAST_RETRY_MAX_MS = 7 * DAY;

/**
 * The delay before a webhook delivery's last retry: BullMQ's exponential backoff (webhookDeliveryJob) waits
 * WEBHOOK_BACKOFF_MS × 2^(n − 1) after the n-th failed attempt, and the last retry follows attempt
 * WEBHOOK_MAX_ATTEMPTS − 1. 0 with a single attempt (no retry).
 */
export function webhookLastRetryMs(config: { WEBHOOK_BACKOFF_MS: number; WEBHOOK_MAX_ATTEMPTS: number }): number {
  return config.WEBHOOK_MAX_ATTEMPTS < 2 ? 0 : config.WEBHOOK_BACKOFF_MS * 2 ** (config.WEBHOOK_MAX_ATTEMPTS - 2);
}

/**
 * How long a webhook send under way is waited for by the delete of its endpoint: the request's WEBHOOK_TIMEOUT_MS
 * (which covers the address lookup and the connect: the request is destroyed at its end) and a second for the
 * statement that marked it to return and the mark to be cleared. An attempt marks its send in flight until this long
 * after the database's clock when it reads its delivery for the last time.
 */
export function webhookSendInFlightMs(config: { WEBHOOK_TIMEOUT_MS: number }): number {
  return config.WEBHOOK_TIMEOUT_MS + SECOND;
}

const TEST_HOOKS = [
  'TEST_PAUSE_BEFORE_SENT_MS',
  'TEST_PAUSE_AFTER_SENT_MS',
  'TEST_PAUSE_AFTER_CALL_MS',
  'TEST_PAUSE_BEFORE_READ_MS',
  'TEST_PAUSE_BEFORE_CAP_REFUSAL_MS',
  'TEST_PAUSE_IN_SWEEP_MS',
] as const;

export type VerityConfig = z.infer<typeof ConfigSchema>;

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

/**
 * A variable in the environment that is not ours but looks like a misspelling of `meant`. `certain`: it can only be
 * ours — ours in another case (`redis_url`) or without its unit (`SWEEP_INTERVAL`) — and start is refused. Otherwise it
 * is within one or two keystrokes of ours (one for a short name, where two would reach common ones: HOME is two from
 * HOST), which another program's variable sharing the environment can be (a Django service's `SECRET_KEY` in a compose
 * env file, an image's `LOGLEVEL`): a warning at start, since refusing would stop a deployment that runs as configured.
 * The rest of the environment (the system's, a container's, Node's, other programs') is not judged.
 */
export interface LookalikeVariable {
  name: string;
  meant: string;
  certain: boolean;
}

export function misspelledVariables(env: NodeJS.ProcessEnv): LookalikeVariable[] {
  const known = new Set<string>(CONFIG_VARIABLES);
  const found: LookalikeVariable[] = [];
  for (const name of Object.keys(env)) {
    if (known.has(name)) continue;
    const upper = name.toUpperCase();
    const upperMs = `${upper}_MS`;
    const certain = CONFIG_VARIABLES.find((variable) => variable === upper || variable === upperMs);
    if (certain) {
      found.push({ name, meant: certain, certain: true });
      continue;
    }
    const near = CONFIG_VARIABLES.find((variable) => editDistance(upper, variable) <= (variable.length >= 8 ? 2 : 1));
    if (near) found.push({ name, meant: near, certain: false });
  }
  return found;
}

/** The lines a process logs at start (warn) for the variables that look like ours but may be another program's. */
export function lookalikeVariableWarnings(env: NodeJS.ProcessEnv = process.env): string[] {
  return misspelledVariables(env)
    .filter((variable) => !variable.certain)
    .map(({ name, meant }) => `${name}: not a variable Verity reads, ignored; did you mean ${meant}?`);
}

/**
 * Insertions, deletions, substitutions and swaps of two neighbours that turn `a` into `b` (optimal string alignment),
 * or Infinity once it is sure to be more than `most` (2: no caller asks about more). Every process measures each
 * variable of its environment against each of ours, twice at start: a full table per pair was ~80 ms of a start with
 * a CI job's environment. Three rows are kept, and a row that is all past `most` ends the count: a row's least value
 * never falls in the rows after it.
 */
function editDistance(a: string, b: string, most = 2): number {
  if (Math.abs(a.length - b.length) > most) return Infinity;
  let beforeLast = new Int32Array(b.length + 1);
  let last = new Int32Array(b.length + 1).map((_, j) => j);
  let row = new Int32Array(b.length + 1);
  for (let i = 1; i <= a.length; i++) {
    row[0] = i;
    let least = i;
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let d = Math.min(last[j] + 1, row[j - 1] + 1, last[j - 1] + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = Math.min(d, beforeLast[j - 2] + 1);
      row[j] = d;
      if (d < least) least = d;
    }
    if (least > most) return Infinity;
    [beforeLast, last, row] = [last, row, beforeLast];
  }
  return last[b.length] > most ? Infinity : last[b.length];
}

/** The message a refused configuration stops start with, one line: each issue as `NAME: what is wrong`. */
function configErrorMessage(issues: readonly string[]): string {
  return `invalid configuration: ${issues.join('; ')}`;
}

function issueLines(error: z.ZodError): string[] {
  return error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
}

/**
 * Variables of a process's own (`shape`: their schemas, wholeNumberVariable for a count), read from `env` by the rules
 * loadConfig reads Verity's with; a refused value throws a ConfigError with the same one-line message.
 */
export function readVariables<T extends z.ZodRawShape>(
  shape: T,
  env: NodeJS.ProcessEnv = process.env,
): z.infer<z.ZodObject<T>> {
  const parsed = z.object(shape).safeParse(env);
  if (!parsed.success) throw new ConfigError(configErrorMessage(issueLines(parsed.error)));
  return parsed.data;
}

/**
 * The text settings an empty value refuses (`HOST=` is a mistake, not a wish for the default; the numbers and flags
 * take empty as unset). Said in words, once: the schema's own ("Too small: expected string to have >=1 characters",
 * "Invalid URL; … must be a postgres:// URL") named the rule, not the mistake.
 */
const EMPTY_REFUSED = [
  'NODE_ENV',
  'HOST',
  'DATABASE_URL',
  'REDIS_URL',
  'QUEUE_PREFIX',
  'SANDBOX_URL',
  'LOG_LEVEL',
] as const satisfies readonly (keyof VerityConfig)[];

export function loadConfig(env: NodeJS.ProcessEnv = process.env): VerityConfig {
  const empty = EMPTY_REFUSED.filter((name) => env[name] === '');
  const rest = empty.length > 0 ? { ...env } : env;
  for (const name of empty) delete rest[name];
  const parsed = ConfigSchema.safeParse(rest);
  const emptyIssues = empty.map(
    (name) => `${name}: is empty; unset it for the default (${String(ConfigSchema.shape[name].parse(undefined))})`,
  );
  const misspelled = misspelledVariables(env)
    .filter((variable) => variable.certain)
    .map(({ name, meant }) => `${name}: not a variable Verity reads; did you mean ${meant}?`);
  if (!parsed.success || emptyIssues.length > 0 || misspelled.length > 0) {
    const issues = parsed.success ? [] : issueLines(parsed.error);
    throw new ConfigError(configErrorMessage([...emptyIssues, ...issues, ...misspelled]));
  }
  if (parsed.data.NODE_ENV === 'production') {
    if (parsed.data.SEED_DEMO) {
      throw new ConfigError('invalid configuration: SEED_DEMO: the published demo keys are never seeded in production');
    }
    const armed = TEST_HOOKS.filter((name) => parsed.data[name] > 0);
    if (armed.length > 0) throw new ConfigError(`invalid configuration: ${armed.join(', ')} must be 0 in production`);
  }
  return parsed.data;
}

/** Whether tenants' `allow_private` entries count (TENANT_PRIVATE_EGRESS, by default everywhere but production). */
export function tenantPrivateEgress(config: Pick<VerityConfig, 'TENANT_PRIVATE_EGRESS' | 'NODE_ENV'>): boolean {
  return config.TENANT_PRIVATE_EGRESS ?? config.NODE_ENV !== 'production';
}

/** The timings that bound when a call may still reach a provider (the status model's CallTimings). */
export function callTimings(config: VerityConfig): {
  sendGraceMs: number;
  connectorTimeoutMs: number;
  settleWindowMs: number;
} {
  return {
    sendGraceMs: config.SEND_GRACE_MS,
    connectorTimeoutMs: config.CONNECTOR_TIMEOUT_MS,
    settleWindowMs: config.SETTLE_WINDOW_MS,
  };
}

export const VERITY_CONFIG = Symbol('VERITY_CONFIG');
