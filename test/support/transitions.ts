import { IllegalTransitionError } from '@verity/status-model';

/** A move as a set member: tables of allowed moves are compared as sets of these. */
export const moveKey = (from: string, to: string): string => `${from}>${to}`;

/** Every ordered pair of `statuses`, self-loops included, that `allowed` (a set of moveKey) does not hold. */
export function movesOutside<S extends string>(statuses: readonly S[], allowed: ReadonlySet<string>): [S, S][] {
  return statuses.flatMap((from) =>
    statuses.filter((to) => !allowed.has(moveKey(from, to))).map((to): [S, S] => [from, to]),
  );
}

/** The refusal that `attempt` throws; anything else it throws propagates, and throwing nothing fails the test. */
export function refusalOf(attempt: () => unknown): IllegalTransitionError {
  try {
    attempt();
  } catch (error) {
    if (error instanceof IllegalTransitionError) return error;
    throw error;
  }
  throw new Error('expected the status model to refuse the move');
}
