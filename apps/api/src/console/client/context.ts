import type { StatusModelDocument } from '@verity/sdk';

/** What every page gets from the shell. */
export interface AppContext {
  navigate(path: string): void;
  /** A polite screen-reader announcement (and the visible status line). */
  announce(message: string): void;
  meaning(operationStatus: string): string | undefined;
  refreshCounts(): Promise<void>;
  statusModel(): StatusModelDocument | null;
  /**
   * Whether the signed-in key may decide (approve, deny, resolve): the reviewer role, as the API's summary says. An
   * admin reads the queues but the API refuses its decisions, so the console offers it none. Null until known.
   */
  canDecide(): boolean | null;
}

/** A page renders into `main` and returns what stops its timers and streams when the reviewer leaves it. */
export type Page = (main: HTMLElement, ctx: AppContext) => () => void;

export const POLL_MS = 2_000;
