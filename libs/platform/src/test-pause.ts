/** The pauses in progress: SIGUSR2 ends them all. */
const releases = new Set<() => void>();
let listening = false;

/**
 * The sleep of a test-only kill point (TEST_PAUSE_*; refused in production by loadConfig): `ms`, or until the process
 * gets SIGUSR2, whichever comes first. A test that has done what it waited at the pause for ends it at once instead of
 * sitting out a pause sized for a loaded machine. The handler is installed by the first pause (its marker is logged
 * just before, so a test that signals on the marker finds it installed; before that, SIGUSR2 would end the process);
 * a SIGUSR2 while no pause runs does nothing.
 */
export function testPauseSleep(ms: number): Promise<void> {
  if (!listening) {
    listening = true;
    process.on('SIGUSR2', () => {
      for (const release of [...releases]) release();
    });
  }
  return new Promise((resolve) => {
    const release = () => {
      clearTimeout(timer);
      releases.delete(release);
      resolve();
    };
    const timer = setTimeout(release, ms);
    releases.add(release);
  });
}
