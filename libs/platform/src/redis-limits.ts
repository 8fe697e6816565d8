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
export function redisAnswerWithin(call: Promise<unknown>, ms: number): Promise<number | null> {
  return answerWithin(call.then(Number), ms);
}

/** The answer of a Redis call that replies with a list, as numbers, or null when it fails or takes too long. */
export function redisRepliesWithin(call: Promise<unknown>, ms: number): Promise<number[] | null> {
  return answerWithin(
    call.then((reply) => (Array.isArray(reply) ? reply.map(Number) : null)),
    ms,
  );
}

async function answerWithin<T>(call: Promise<T>, ms: number): Promise<T | null> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<null>((resolve) => {
    timer = setTimeout(() => resolve(null), ms);
  });
  try {
    return await Promise.race([call.catch(() => null), timeout]);
  } finally {
    clearTimeout(timer);
  }
}
