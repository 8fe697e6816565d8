import type { Execution, ExecutionEvent } from '@verity/sdk';
import { Timeline, timeline } from './timeline';

/** What a page of one execution (or one of its operations) loads, shows, and leaves alone. */
export interface LivePageSource {
  /** The page's rows: the execution they belong to (its events drive the refresh) and how to show them. */
  load(): Promise<{ execution: Execution; render(): void; focusOperationId?: string; reloadAt?: number }>;
  /** A load that failed (not after the page was left). */
  failed(error: unknown): void;
  /** An event that changes nothing the page shows: no reload. `known`: an operation already on the page. */
  quiet?(event: ExecutionEvent, known: (operationId: string) => boolean): boolean;
  /** Where the timeline goes, once the first load succeeded. */
  side: HTMLElement;
}

export interface LivePage {
  load(): Promise<void>;
  /** After an action: the timeline's stream picks up again at once. */
  resumeTimeline(): void;
  dispose(): void;
}

/**
 * Keeps a page current while it is open: every event of the execution reloads it after a short pause, overlapping
 * loads leave only the latest one to render, and leaving the page stops the timeline and any pending reload.
 */
export function livePage(source: LivePageSource): LivePage {
  let disposed = false;
  let tl: Timeline | null = null;
  let refreshTimer: ReturnType<typeof setTimeout> | null = null;
  // A reload the last load asked for at a given time (something becomes available that no event will announce).
  let timedReload: ReturnType<typeof setTimeout> | null = null;
  const keys = new Map<string, string>();

  let loads = 0;
  const load = async () => {
    // Loads overlap (an action's reload, a burst of events); only the latest one may render.
    const mine = ++loads;
    try {
      const loaded = await source.load();
      if (disposed || mine !== loads) return;
      for (const op of loaded.execution.operations) keys.set(op.id, op.key);
      loaded.render();
      if (timedReload) clearTimeout(timedReload);
      timedReload =
        loaded.reloadAt === undefined
          ? null
          : setTimeout(() => void load(), Math.max(0, loaded.reloadAt - Date.now()) + 250);
      if (!tl) {
        tl = timeline(loaded.execution.id, {
          focusOperationId: loaded.focusOperationId,
          keyOf: (oid) => keys.get(oid),
          onEvent: schedule,
        });
        source.side.append(tl.element);
      }
    } catch (error) {
      // A load overtaken by a later one says nothing about the page, failed or not: the later one's answer stands (an
      // earlier answer that came late without its ETag took the decisions off a page showing a version).
      if (disposed || mine !== loads) return;
      source.failed(error);
    }
  };

  const schedule = (event: ExecutionEvent) => {
    if (source.quiet?.(event, (oid) => keys.has(oid))) return;
    if (refreshTimer) clearTimeout(refreshTimer);
    refreshTimer = setTimeout(() => void load(), 150);
  };

  return {
    load,
    resumeTimeline: () => tl?.resume(),
    dispose: () => {
      disposed = true;
      tl?.dispose();
      if (refreshTimer) clearTimeout(refreshTimer);
      if (timedReload) clearTimeout(timedReload);
    },
  };
}
