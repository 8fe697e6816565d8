/**
 * Shared by the limits the API keeps in Redis (rate limit, open streams): Redis' clock for every process alike, and a
 * bounded wait — when Redis fails or is slow the caller decides with its own process-local count instead, so an
 * outage of Redis never becomes an outage of the API.
 */

/** Lua: `now`, in milliseconds, from Redis' clock. */
export const LUA_NOW_MS = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)`;

/** The answer of a Redis call as a number, or null when it fails or takes longer than `ms`. */
export async function redisAnswerWithin(call: Promise<unknown>, ms: number): Promise<number | null> {
  return redisRepliesWithin(
    call.then((reply) => [reply]),
    ms,
  ).then((replies) => (replies ? Number(replies[0]) : null));
}

/** The answer of a Redis call that replies with a list, as numbers, or null when it fails or takes too long. */
export async function redisRepliesWithin(call: Promise<unknown>, ms: number): Promise<number[] | null> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<null>((resolve) => {
    timer = setTimeout(() => resolve(null), ms);
  });
  const replies = call.then(
    (reply) => (Array.isArray(reply) ? reply.map(Number) : null),
    () => null,
  );
  try {
    return await Promise.race([replies, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
