import { isRedisCommandTimeout, isRedisUnreachable } from './redis';

const GAVE_UP = 'Too many Cluster redirections. Last error: ';

/**
 * isRedisUnreachable and isRedisCommandTimeout decide Bull Board's 503 queue-unavailable (logged once an outage)
 * against 500 internal (an error line each), and whether a worker's error is logged as an outage once a minute. An
 * error that is Redis (or BullMQ) telling what went wrong in it, not that it is away, must stay neither — whatever words
 * of an outage it holds after its start.
 */
describe('Redis errors that are no outage', () => {
  it.each([
    // Redirections answered once are ioredis' to follow, not a failure: only one it gave up on is.
    'MOVED 5168 127.0.0.1:7001',
    'ASK 5168 127.0.0.1:7001',
    'TRYAGAIN Multiple keys request during rehashing of slot',
    // Redis refusing the command, with or without the cluster client having given up on it.
    `${GAVE_UP}ReplyError: ERR wrong number of arguments for 'zrange'`,
    `${GAVE_UP}ReplyError: NOSCRIPT No matching script. Please use EVAL.`,
    `${GAVE_UP}ReplyError: WRONGTYPE Operation against a key holding the wrong kind of value`,
    `${GAVE_UP}ReplyError: OOM command not allowed when used memory > 'maxmemory'.`,
    `${GAVE_UP}ReplyError: CROSSSLOT Keys in request don't hash to the same slot`,
    // A script's error that names an outage's words, and messages that echo them after their start (a job or queue
    // name in a message is never at its start).
    'ERR user_script:1: CLUSTERDOWN The cluster is down script: 1a2b, on @user_script:1.',
    `${GAVE_UP}ReplyError: ERR user_script:1: CLUSTERDOWN, on @user_script:1.`,
    'Missing key for job CLUSTERDOWN. moveToFinished',
    'Job Connection is closed. not found',
    `Queue "${GAVE_UP}Error: Connection is closed." does not exist`,
    'CLUSTERDOWNER',
    'Connection is closed. (by the job "x")',
    // A connection error in words whose code is not one of an outage's.
    `${GAVE_UP}Error: connect EACCES /tmp/redis.sock`,
  ])('%s is no outage', (message) => {
    const error = new Error(message);
    expect(isRedisUnreachable(error)).toBe(false);
    expect(isRedisCommandTimeout(error)).toBe(false);
  });

  it.each(['Command timed out', `${GAVE_UP}Error: Command timed out`])(
    '%s is a command timed out, not Redis unreachable',
    (message) => {
      expect(isRedisCommandTimeout(new Error(message))).toBe(true);
      expect(isRedisUnreachable(new Error(message))).toBe(false);
    },
  );

  it.each([undefined, null, 42, 'Connection is closed.', { message: 42 }, { code: 42 }])(
    'what is not an error (%p) is neither',
    (value) => {
      expect(isRedisUnreachable(value)).toBe(false);
      expect(isRedisCommandTimeout(value)).toBe(false);
    },
  );
});
