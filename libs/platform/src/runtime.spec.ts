import { spawnSync } from 'node:child_process';
import { APP_HEAP_LIMIT_MB, APP_NODE_ARGS } from './runtime';

const MIB = 2 ** 20;

describe('APP_NODE_ARGS', () => {
  // V8 scavenges the young generation only while the old space could take in a whole semi-space of survivors; when it
  // could not, each collection is a full mark-compact. The apps keep ~60 MB of the old space in use, so a semi-space
  // larger than an eighth of the old space's limit leaves them at that edge under load (Node 24 picks 64 MB on a
  // machine of 16 GB or more: the API then ran 40–56 mark-compacts per 1,000 intake requests).
  it('holds the young generation to an eighth of the old space, whatever memory the machine has', () => {
    const run = spawnSync(
      process.execPath,
      [...APP_NODE_ARGS, '-p', 'require("v8").getHeapStatistics().heap_size_limit'],
      {
        encoding: 'utf8',
      },
    );
    expect(run.status).toBe(0);
    // heap_size_limit is the old space's limit and the young generation's reservation: three semi-spaces.
    const semiSpaceMiB = (Number(run.stdout.trim()) - APP_HEAP_LIMIT_MB * MIB) / 3 / MIB;
    expect(semiSpaceMiB).toBeGreaterThan(0);
    expect(semiSpaceMiB).toBeLessThanOrEqual(APP_HEAP_LIMIT_MB / 8);
  });
});
