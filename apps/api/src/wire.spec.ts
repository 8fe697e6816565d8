import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { WIRE_FILES, generateWire, repositoryRoot } from './wire';

/**
 * The drift check, and the generator: `npm run generate:wire` runs this file with WIRE_WRITE=1, which writes the files
 * instead of comparing them (as `jest -u` does for snapshots). Through jest, because it compiles without type-checking:
 * the generator must run while the code that will use a new schema's types does not compile yet.
 */
describe('the generated wire contract', () => {
  it('is what the API’s schemas give now (else: run npm run generate:wire and commit the result)', async () => {
    const root = repositoryRoot();
    const fresh = await generateWire(root);
    for (const [name, path] of Object.entries(WIRE_FILES) as [keyof typeof WIRE_FILES, string][]) {
      if (process.env.WIRE_WRITE === '1') {
        mkdirSync(dirname(join(root, path)), { recursive: true });
        writeFileSync(join(root, path), fresh[name]);
        continue;
      }
      const checkedIn = readFileSync(join(root, path), 'utf8');
      if (checkedIn !== fresh[name]) {
        throw new Error(
          `${path} is out of date with the API's schemas: run npm run generate:wire and commit the result`,
        );
      }
    }
  });
});
