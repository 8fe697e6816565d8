/**
 * One log line per outage, not one per request or per attempt. The first failure is logged; the failures after it are
 * only counted, and logged again (with their number) at most every `remindMs` while they go on. `succeeded()` ends the
 * outage, saying how many failures it had, when the caller can tell (a loop that runs again); a caller that cannot
 * (requests) leaves it to the time bound.
 */
export class OutageLog {
  private failures = 0;
  private unlogged = 0;
  private loggedAt: number | undefined;

  constructor(
    private readonly remindMs = 60_000,
    private readonly now: () => number = Date.now,
  ) {}

  /** A failure: whether to log it (with `unlogged`, the failures counted and not logged since the last line). */
  failed(): { unlogged: number } | undefined {
    this.failures += 1;
    const at = this.now();
    if (this.loggedAt !== undefined && at - this.loggedAt < this.remindMs) {
      this.unlogged += 1;
      return undefined;
    }
    const note = { unlogged: this.unlogged };
    this.loggedAt = at;
    this.unlogged = 0;
    return note;
  }

  /** A success: the number of failures of the outage it ends (to log once), or undefined when there was none. */
  succeeded(): number | undefined {
    if (this.failures === 0) return undefined;
    const failures = this.failures;
    this.failures = 0;
    this.unlogged = 0;
    this.loggedAt = undefined;
    return failures;
  }
}
