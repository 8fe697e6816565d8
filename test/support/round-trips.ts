/**
 * A `heard` (TenantSecretsCache.setLive's round trip on the LISTEN connection) whose round trips the test answers or
 * fails one by one, in the order sent, or leaves under way; it counts those sent and those under way.
 */
export function roundTrips() {
  const pending: { answer: () => void; fail: () => void }[] = [];
  let sent = 0;
  /** Lets what waited on the round trip just settled run before the test goes on. */
  const settled = () => new Promise<void>((resolve) => setImmediate(resolve));
  return {
    get sent() {
      return sent;
    },
    get underWay() {
      return pending.length;
    },
    heard: () =>
      new Promise<void>((resolve, reject) => {
        sent += 1;
        pending.push({ answer: resolve, fail: () => reject(new Error('Connection terminated unexpectedly')) });
      }),
    /** Answers the oldest round trip under way. */
    answer: async () => {
      pending.shift()!.answer();
      await settled();
    },
    /** Fails the oldest round trip under way, as a connection lost under it does. */
    fail: async () => {
      pending.shift()!.fail();
      await settled();
    },
  };
}
