import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PrivateService, freePort, startPrivatePostgres } from '../../scripts/local-services';

/** A process and every process it forked, from `ps`. */
function processTree(root: number): number[] {
  const rows = execFileSync('ps', ['-e', '-o', 'pid=,ppid='])
    .toString()
    .trim()
    .split('\n')
    .map((line) => line.trim().split(/\s+/).map(Number));
  const tree = [root];
  for (let i = 0; i < tree.length; i += 1) for (const [pid, ppid] of rows) if (ppid === tree[i]) tree.push(pid);
  return tree;
}

/**
 * A private Postgres a test can make stop answering (frozen, or cut off by the network) rather than refuse
 * connections: statements already sent on open sessions get no reply until it resumes.
 */
export class StallablePostgres {
  private constructor(
    readonly service: PrivateService,
    private readonly dir: string,
  ) {}

  static async start(label: string): Promise<StallablePostgres> {
    const dir = mkdtempSync(join(tmpdir(), `verity-${label}-`));
    return new StallablePostgres(await startPrivatePostgres({ dir, port: await freePort() }), dir);
  }

  get url(): string {
    return this.service.url;
  }

  get port(): number {
    return this.service.port;
  }

  /** The server and every backend it forked: SIGSTOP on the postmaster alone leaves the sessions answering. */
  stall(): void {
    this.signal('SIGSTOP');
  }

  resume(): void {
    this.signal('SIGCONT');
  }

  /** Bytes sent to the server that it has not read yet (the Recv-Q of its sessions' sockets): a statement stalled. */
  unreadBytes(): number {
    return execFileSync('ss', ['-tnH', 'state', 'established', `( sport = :${this.port} )`])
      .toString()
      .trim()
      .split('\n')
      .filter(Boolean)
      .reduce((sum, line) => sum + Number(line.trim().split(/\s+/)[0]), 0);
  }

  async stop(): Promise<void> {
    this.resume();
    await this.service.stop().catch(() => undefined);
    rmSync(this.dir, { recursive: true, force: true });
  }

  private signal(signal: NodeJS.Signals): void {
    if (!this.service.pid) return;
    for (const pid of processTree(this.service.pid)) {
      try {
        process.kill(pid, signal);
      } catch {
        // Gone meanwhile.
      }
    }
  }
}
