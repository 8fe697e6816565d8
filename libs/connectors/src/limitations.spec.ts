import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { LIMITATIONS_END, LIMITATIONS_START, limitationsMarkdown, withLimitations } from './limitations';
import { ConnectorRegistry } from './registry';

const DOC = join(__dirname, '..', '..', '..', 'docs', 'connectors.md');

/**
 * The limitations table in docs/connectors.md is generated from the declarations. To regenerate it after changing a
 * connector: UPDATE_LIMITATIONS=1 npx jest libs/connectors/src/limitations.spec.ts
 */
describe('the limitations table', () => {
  it('in docs/connectors.md matches the connector declarations', () => {
    const document = readFileSync(DOC, 'utf8');
    const current = withLimitations(document);
    if (process.env.UPDATE_LIMITATIONS === '1' && current !== document) writeFileSync(DOC, current);
    else expect(document).toBe(current);
  });

  it('says, per connector and per action, what GET /v1/connectors says', () => {
    const table = limitationsMarkdown();
    const registry = new ConnectorRegistry();
    for (const connector of registry.describe()) {
      const row = table
        .split('\n')
        .find((l) => l.startsWith(`| \`${connector.name}\` | `) && !l.startsWith(`| \`${connector.name}\` | \``));
      const declared = row!
        .split('|')
        .slice(3, 7)
        .map((c) => c.trim() === 'yes');
      expect(declared).toEqual([
        connector.can_reach_verified,
        connector.provider_idempotency,
        connector.reversible,
        connector.context_read,
      ]);
      for (const action of connector.actions) {
        const actionRow = table.split('\n').find((l) => l.startsWith(`| \`${connector.name}\` | \`${action.name}\` |`));
        const cells = actionRow!
          .split('|')
          .slice(3, 7)
          .map((c) => c.trim().startsWith('yes'));
        expect(cells).toEqual([
          action.can_reach_verified,
          action.provider_idempotency,
          action.reversible,
          action.context_read,
        ]);
      }
    }
    expect(table.startsWith(LIMITATIONS_START) && table.endsWith(LIMITATIONS_END)).toBe(true);
  });

  it('tells sandbox.sms apart: it can never reach VERIFIED and has no idempotency', () => {
    const sms = new ConnectorRegistry().describe().find((c) => c.name === 'sandbox.sms')!;
    expect(sms).toMatchObject({ can_reach_verified: false, provider_idempotency: false });
    expect(limitationsMarkdown()).toContain('| `sandbox.sms` | `send` | no | no | no | no |');
  });
});
