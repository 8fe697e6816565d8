/** The pauses in progress: SIGUSR2 ends them all. */
const releases = new Set<() => void>();
let listening = false;

/** Installs SIGUSR2's handler (once): it ends the pauses in progress, and does nothing while none runs. */
function listen(): void {
  if (listening) return;
  listening = true;
  process.on('SIGUSR2', () => {
    for (const release of [...releases]) release();
  });
}

/** Whether `env` enables a test-only pause: a TEST_PAUSE_* variable set to a time other than 0. */
function pausesEnabled(env: NodeJS.ProcessEnv): boolean {
  return Object.entries(env).some(([name, value]) => name.startsWith('TEST_PAUSE_') && /[1-9]/.test(value ?? ''));
}

// A process started with a pause enabled listens from its start (this module is loaded with @verity/platform, before
// the app is made): a SIGUSR2 sent before its first pause — an early wake, or one sent to every worker — finds the
// handler installed and does nothing, instead of ending the process by SIGUSR2's default action.
if (pausesEnabled(process.env)) listen();

/**
 * A test-only kill point (TEST_PAUSE_*; refused in production by loadConfig): logs `marker` (with `fields` and
 * `pauseMs`) for a test to wait for, then sleeps `ms`, or until the process gets SIGUSR2, whichever comes first. A test
 * that has done what it waited at the pause for ends it at once instead of sitting out a pause sized for a loaded
 * machine. Nothing when `ms` is 0.
 *
 * The pause is armed before its marker is written: SIGUSR2's handler installed (at the process's start when its
 * environment enables a pause, else by its first pause) and this pause among those it ends. A test that signals on the marker — SIGUSR2 at
 * once, or SIGSTOP, then SIGCONT and SIGUSR2 — finds it armed whenever it sees the marker. (Written first, a process
 * stopped between its marker and the handler's installation died of the SIGUSR2 that followed its SIGCONT.) A SIGUSR2
 * while no pause runs does nothing.
 */
export function testPause(
  logger: { warn(fields: Record<string, unknown>, marker: string): void },
  ms: number,
  marker: string,
  fields: Record<string, unknown> = {},
): Promise<void> {
  if (ms <= 0) return Promise.resolve();
  // (Installed at the start already when the process's environment enables a pause; this covers one enabled otherwise.)
  listen();
  const paused = new Promise<void>((resolve) => {
    const release = () => {
      clearTimeout(timer);
      releases.delete(release);
      resolve();
    };
    const timer = setTimeout(release, ms);
    releases.add(release);
  });
  logger.warn({ ...fields, pauseMs: ms }, marker);
  return paused;
}
