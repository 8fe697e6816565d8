/**
 * This process's webhook delivery slots, shared out among tenants: one tenant may hold at most `share` of them at
 * once, so a tenant whose receiver hangs until the timeout leaves the rest to the others instead of taking every slot
 * (another tenant's delivery would then wait up to WEBHOOK_TIMEOUT_MS for one to free).
 *
 * A delivery that finds its tenant at its share is put back to wait (the caller delays its job, spending no attempt)
 * and asks to be woken: each slot its tenant frees wakes one waiting delivery, so the tenant's own line keeps its pace;
 * `wakeAt` is the latest it waits should nothing wake it (this process stopped, or the wake lost).
 */
export class TenantSlots {
  /** When each of a tenant's slots was taken, oldest first. */
  private readonly taken = new Map<string, number[]>();
  /**
   * Each tenant's deliveries waiting to be woken, by delivery, in the order they first asked. One wake per delivery: a
   * delivery put back again (it came back by its `wakeAt` and found its tenant at its share once more) replaces its
   * earlier wake in its place, so a slow receiver's line does not add a wake per delivery on every round.
   */
  private readonly waiting = new Map<string, Map<string, () => Promise<unknown>>>();

  constructor(
    readonly share: number,
    /** The longest one delivery holds a slot (its timeout, and a margin). */
    private readonly holdMs: number,
  ) {}

  /** The share of `slots` one tenant may hold: half, and at least one (a single slot is everyone's in turn). */
  static shareOf(slots: number): number {
    return Math.max(1, Math.floor(slots / 2));
  }

  /** Takes a slot for `tenantId`, or answers when to try again at the latest (null: taken). */
  take(tenantId: string, now = Date.now()): { wakeAt: number } | null {
    const taken = this.taken.get(tenantId) ?? [];
    if (taken.length >= this.share) return { wakeAt: taken[0] + this.holdMs };
    taken.push(now);
    this.taken.set(tenantId, taken);
    return null;
  }

  /** Frees one of `tenantId`'s slots and wakes one delivery of that tenant waiting for it. */
  release(tenantId: string): void {
    const taken = this.taken.get(tenantId);
    if (!taken) return;
    taken.shift();
    if (taken.length === 0) this.taken.delete(tenantId);
    void this.wakeOne(tenantId);
  }

  /**
   * `wake` is called when one of the tenant's slots frees (a wake that fails — job gone, already back — tries the next),
   * or at once when one is free already: the caller registers only after it has put its delivery back (an await), and
   * a slot freed in between found no one to wake — the delivery would wait for `wakeAt` instead. `delivery` names the
   * job: asked again for the same one, the newer wake replaces the older (see `waiting`).
   */
  wakeWhenFree(tenantId: string, delivery: string, wake: () => Promise<unknown>): void {
    if ((this.taken.get(tenantId)?.length ?? 0) < this.share) {
      void wake().catch(() => undefined);
      return;
    }
    const waiting = this.waiting.get(tenantId) ?? new Map<string, () => Promise<unknown>>();
    waiting.set(delivery, wake);
    this.waiting.set(tenantId, waiting);
  }

  /** Slots held, and deliveries waiting to be woken, by tenant. */
  held(tenantId: string): { taken: number; waiting: number } {
    return { taken: this.taken.get(tenantId)?.length ?? 0, waiting: this.waiting.get(tenantId)?.size ?? 0 };
  }

  private async wakeOne(tenantId: string): Promise<void> {
    const waiting = this.waiting.get(tenantId);
    while (waiting?.size) {
      const [delivery, wake] = waiting.entries().next().value!;
      waiting.delete(delivery);
      if (waiting.size === 0) this.waiting.delete(tenantId);
      const woken = await wake().then(
        () => true,
        () => false,
      );
      if (woken) return;
    }
  }
}
