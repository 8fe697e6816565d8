import { TestEnvironment } from 'jest-environment-node';

/**
 * How long a handle a test file closed may take to be gone after its last hook: a socket, a server or a child's pipes
 * go a few milliseconds after the call that closed them returned. One still there after this was left open.
 */
const SETTLE_MS = 2_000;

type Counts = Map<string, number>;

function openResources(): Counts {
  const counts: Counts = new Map();
  for (const type of process.getActiveResourcesInfo()) counts.set(type, (counts.get(type) ?? 0) + 1);
  return counts;
}

/** What is open now and was not when the file began: its types with how many more there are ('TCPSocketWrap ×2'). */
function openedSince(before: Counts): string[] {
  const opened: string[] = [];
  for (const [type, count] of openResources()) {
    const more = count - (before.get(type) ?? 0);
    if (more > 0) opened.push(more > 1 ? `${type} ×${more}` : type);
  }
  return opened;
}

interface HandleLike {
  constructor?: { name?: string };
  remoteAddress?: string;
  remotePort?: number;
  pid?: number;
  spawnargs?: string[];
  listening?: boolean;
  address?: () => unknown;
}

function activeHandles(): HandleLike[] {
  return (process as unknown as { _getActiveHandles(): HandleLike[] })._getActiveHandles();
}

/** The sockets, servers and child processes open now that were not in `before`, described (timers are not listed). */
function describeHandles(before: ReadonlySet<HandleLike>): string[] {
  return activeHandles()
    .filter((handle) => !before.has(handle))
    .map((handle) => {
      const kind = handle.constructor?.name ?? 'handle';
      if (handle.pid !== undefined) return `${kind} pid ${handle.pid}: ${(handle.spawnargs ?? []).join(' ')}`;
      if (handle.listening && typeof handle.address === 'function')
        return `${kind} listening on ${JSON.stringify(handle.address())}`;
      if (handle.remoteAddress) return `${kind} to ${handle.remoteAddress}:${handle.remotePort}`;
      return kind;
    });
}

/**
 * Jest's node environment, and at the end of every test file (after its last hook) a check that whatever it opened —
 * sockets (pg pools, Redis clients, HTTP keep-alive), servers, child processes and their pipes, referenced timers —
 * is closed again; the file fails otherwise, naming what is still open. A handle a file leaves open keeps jest's
 * worker alive after the run ("A worker process has failed to exit gracefully"), where it is no longer known which
 * file left it.
 *
 * It compares the kinds and numbers of the process's open resources (process.getActiveResourcesInfo) with those when
 * the file began, so it costs nothing while the file runs (no async hooks) and sees what jest itself holds as already
 * there.
 */
export default class ClosingTestEnvironment extends TestEnvironment {
  private before: Counts = new Map();
  private handlesBefore: ReadonlySet<HandleLike> = new Set();

  override async setup(): Promise<void> {
    await super.setup();
    this.before = openResources();
    this.handlesBefore = new Set(activeHandles());
  }

  override async teardown(): Promise<void> {
    try {
      const deadline = Date.now() + SETTLE_MS;
      let opened = openedSince(this.before);
      while (opened.length > 0 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 10));
        opened = openedSince(this.before);
      }
      if (opened.length > 0) {
        const error = new Error(
          `the test file left open ${opened.join(', ')} (${SETTLE_MS} ms after its last hook); ` +
            `close it in the hook that ends its use. Handles it opened: ${describeHandles(this.handlesBefore).join('; ') || 'none (timers only)'}`,
        );
        // The stack would point here, not at what opened the handle.
        error.stack = error.message;
        throw error;
      }
    } finally {
      await super.teardown();
    }
  }
}
