/**
 * How many of `items`, from the first, a page holds when it ends before the one that would take the stored text past
 * `maxBytes`: one at least (an item alone larger than that is still shown), all of them when they fit.
 */
export function keptWithinBytes(items: readonly { bytes: number }[], maxBytes: number): number {
  let total = 0;
  let kept = 0;
  for (const item of items) {
    total += item.bytes;
    if (kept > 0 && total > maxBytes) break;
    kept += 1;
  }
  return kept;
}
