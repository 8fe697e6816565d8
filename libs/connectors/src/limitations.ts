import { type CapabilityName, type ConnectorCapabilities, actionCapabilities } from './connector';
import { ConnectorRegistry } from './registry';

export const LIMITATIONS_START = '<!-- limitations:start (generated from the connector declarations; do not edit) -->';
export const LIMITATIONS_END = '<!-- limitations:end -->';

const COLUMNS: { capability: CapabilityName; title: string }[] = [
  { capability: 'read_back', title: 'can reach VERIFIED' },
  { capability: 'provider_idempotency', title: 'honours idempotency' },
  { capability: 'reversible', title: 'reversible' },
  { capability: 'context_read', title: 'context read' },
];
const MARKS = ['¹', '²', '³', '⁴', '⁵', '⁶', '⁷', '⁸', '⁹'];

/**
 * docs/connectors.md's limitations tables, generated from the same declarations GET /v1/connectors serves, so the
 * two cannot drift (libs/connectors/src/limitations.spec.ts fails when the document is out of date).
 */
export function limitationsMarkdown(registry = new ConnectorRegistry()): string {
  const header = (first: string[]) => [
    `| ${[...first, ...COLUMNS.map((c) => c.title)].join(' | ')} |`,
    `| ${[...first, ...COLUMNS].map(() => '---').join(' | ')} |`,
  ];
  const yesNo = (capabilities: ConnectorCapabilities, capability: CapabilityName) =>
    capabilities[capability] ? 'yes' : 'no';

  const connectors = header(['connector', 'tenant settings']);
  for (const connector of registry.list()) {
    const settings = [
      connector.settings?.allowHosts ? 'host allowlist' : null,
      connector.settings?.secrets ? 'secrets' : null,
      'spending cap',
    ].filter(Boolean);
    const cells = COLUMNS.map(({ capability }) => yesNo(connector.capabilities, capability));
    connectors.push(`| \`${connector.name}\` | ${settings.join(', ')} | ${cells.join(' | ')} |`);
  }

  const actions = header(['connector', 'action']);
  const notes: string[] = [];
  for (const connector of registry.list()) {
    for (const [action, spec] of Object.entries(connector.actions)) {
      const declared = actionCapabilities(connector, action);
      const cells = COLUMNS.map(({ capability, title }) => {
        const condition = spec.conditions?.[capability];
        if (!declared[capability] || !condition) return yesNo(declared, capability);
        const mark = MARKS[notes.length] ?? '*';
        notes.push(`${mark} \`${connector.name}\` \`${action}\`, ${title}: ${condition}.`);
        return `yes${mark}`;
      });
      actions.push(`| \`${connector.name}\` | \`${action}\` | ${cells.join(' | ')} |`);
    }
  }
  return [
    LIMITATIONS_START,
    '',
    'Per connector (its declaration):',
    '',
    ...connectors,
    '',
    'Per action (what an operation of that action can get; a mark means "only under a condition"):',
    '',
    ...actions,
    '',
    ...notes.flatMap((note) => [note, '']),
    LIMITATIONS_END,
  ].join('\n');
}

/** The document with its generated block replaced by the current one. */
export function withLimitations(document: string, registry = new ConnectorRegistry()): string {
  const start = document.indexOf(LIMITATIONS_START);
  const end = document.indexOf(LIMITATIONS_END);
  if (start < 0 || end < start) throw new Error('the document has no limitations block markers');
  return document.slice(0, start) + limitationsMarkdown(registry) + document.slice(end + LIMITATIONS_END.length);
}
