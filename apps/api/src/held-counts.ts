/**
 * Places held per owner (a key, a tenant) in one API process, for the in-process bounds on MCP requests and on open
 * streams: adds `by` (negative to give places back) and forgets an owner left with none, so the map holds only owners
 * that hold something.
 */
export function adjustHeld(counts: Map<string, number>, owner: string, by: number): void {
  const left = (counts.get(owner) ?? 0) + by;
  if (left > 0) counts.set(owner, left);
  else counts.delete(owner);
}
