import { join } from 'node:path';
import { Browser, chromium } from 'playwright-core';

/** Debian's Chromium (`apt-get install -y chromium`; `.ci/run` installs it). */
export const CHROMIUM = '/usr/bin/chromium';

/** Where the browser specs leave their screenshots (kept by CI as artifacts). */
export const SHOTS = join(__dirname, '..', '..', 'test-artifacts', 'screenshots');

/**
 * Headless Chromium as the browser specs drive it: no sandbox (CI runs as root in a container), no GPU, and none of
 * the browser's own background traffic in the way of what a spec counts.
 */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'],
  });
}
