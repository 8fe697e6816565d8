import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { WIRE_FILES, generateWire, repositoryRoot } from './wire';

describe('the generated wire contract', () => {
  it('is what the API’s schemas give now (else: run npm run generate:wire and commit the result)', async () => {
    const root = repositoryRoot();
    const fresh = await generateWire(root);
    for (const [name, path] of Object.entries(WIRE_FILES) as [keyof typeof WIRE_FILES, string][]) {
      const checkedIn = readFileSync(join(root, path), 'utf8');
      if (checkedIn !== fresh[name]) {
        throw new Error(
          `${path} is out of date with the API's schemas: run npm run generate:wire and commit the result`,
        );
      }
    }
  });
});
