import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildConsole } from '../../scripts/build-console';

const ROOT = join(__dirname, '..', '..');

describe('the review console bundle (npm run build)', () => {
  const outdir = mkdtempSync(join(tmpdir(), 'verity-console-'));
  afterAll(() => rmSync(outdir, { recursive: true, force: true }));

  it("is the console on the SDK's client and stream, with nothing of the server and no eval", async () => {
    const built = await buildConsole(ROOT, outdir);
    expect(built.files.map((file) => file.slice(outdir.length + 1)).sort()).toEqual(['console.css', 'console.js']);
    // The SDK's transport and SSE stream, with its one parser: the console has no client or parser of its own.
    expect(built.inputs).toEqual(
      expect.arrayContaining(['libs/sdk/src/http.ts', 'libs/sdk/src/stream.ts', 'libs/sdk/src/review.ts']),
    );
    expect(built.inputs.some((input) => input.includes('node_modules/eventsource-parser/'))).toBe(true);
    const server = built.inputs.filter(
      (input) =>
        input.startsWith('apps/') &&
        !input.startsWith('apps/api/src/console/client/') &&
        input !== 'apps/api/src/console/mask.ts',
    );
    expect(server).toEqual([]);
    expect(built.inputs.filter((input) => input.startsWith('libs/sdk/src/mcp/'))).toEqual([]);
    const script = readFileSync(join(outdir, 'console.js'), 'utf8');
    expect(script).not.toMatch(/\beval\(|new Function\(/);
    // The stylesheet is the console's own file, not a string in the server.
    expect(readFileSync(join(outdir, 'console.css'), 'utf8')).toContain('.badge-effect');
  });
});
