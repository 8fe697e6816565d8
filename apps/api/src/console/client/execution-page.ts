import { type Criterion, type Execution, VerityNotFoundError, isTerminalExecution } from '@verity/sdk';
import type { AppContext, Page } from './context';
import {
  code,
  definitions,
  effectBadge,
  effectsBadge,
  executionBadge,
  factsSection,
  h,
  intentAndAgent,
  section,
  pageTop,
  statusCard,
  time,
  verdictBadge,
  fill,
  written,
} from './dom';
import { EFFECTS_TEXT, effectMeaning } from './status-text';
import { api, problemText } from './session';
import { livePage } from './live-page';

export function executionPage(id: string): Page {
  return (main, ctx) => executionView(id, main, ctx);
}

function executionView(id: string, main: HTMLElement, ctx: AppContext): () => void {
  document.title = `Execution ${id} · Verity review`;

  const { heading, lede, statusCards, callout } = pageTop('Execution', id);
  const body = h('div', { class: 'col-main' });
  const side = h('div', { class: 'col-side' });
  fill(
    main,
    h(
      'nav',
      { class: 'crumbs', 'aria-label': 'Breadcrumb' },
      h('a', { href: '/console' }, 'Queues'),
      ' › ',
      h('span', { 'aria-current': 'page' }, 'Execution'),
    ),
    heading,
    lede,
    statusCards,
    callout,
    h('div', { class: 'layout' }, body, side),
  );

  const live = livePage({
    load: async () => {
      const execution = await api((dx) => dx.executions.get(id));
      return { execution, render: () => render(execution) };
    },
    failed: (error) => {
      lede.textContent =
        error instanceof VerityNotFoundError
          ? 'No execution with this id is visible to your key.'
          : `Could not load the execution: ${problemText(error)}.`;
    },
    side,
  });

  function render(execution: Execution): void {
    document.title = `Execution ${execution.status} · ${execution.effects.summary} · Verity review`;
    fill(lede, intentAndAgent(execution), h('span', {}, ' · Created ', time(execution.created_at)));
    fill(
      statusCards,
      statusCard('execution', executionBadge(execution.status), 'Where the agent’s work stands.'),
      statusCard('effect', effectsBadge(execution.effects.summary), EFFECTS_TEXT[execution.effects.summary] ?? ''),
    );
    const uncertain = isTerminalExecution(execution.status) && execution.effects.summary !== 'all_verified';
    callout.hidden = !uncertain;
    callout.className = `callout callout-${execution.effects.summary === 'unknown' ? 'warn' : 'info'}`;
    callout.textContent = uncertain
      ? `The execution is ${execution.status} (the agent’s work is over), but its effects are ${execution.effects.summary.replace(/_/g, ' ')}: check each operation’s effect below.`
      : '';
    fill(
      body,
      operationsSection(execution, ctx),
      effectsSection(execution),
      criteriaSection(execution),
      execution.failure ? failureSection(execution) : null,
    );
  }

  void live.load();
  return live.dispose;
}

function operationsSection(execution: Execution, ctx: AppContext): HTMLElement {
  return section(
    'operations',
    `Operations (${execution.operations.length})`,
    h(
      'table',
      { class: 'stack' },
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          ['Operation', 'Connector › action', 'Operation effect', 'Reason', 'Retry', 'Sent'].map((t) =>
            h('th', { scope: 'col' }, t),
          ),
        ),
      ),
      h(
        'tbody',
        {},
        execution.operations.map((op) =>
          h(
            'tr',
            { 'data-operation-id': op.id },
            h(
              'td',
              { 'data-label': 'Operation' },
              h('a', { href: `/console/operations/${op.id}` }, h('span', { class: 'op-key' }, op.key)),
            ),
            h('td', { 'data-label': 'Connector › action' }, written(op.connector), ' › ', written(op.action)),
            h(
              'td',
              { 'data-label': 'Operation effect', class: 'cell-badge' },
              effectBadge(op.status, effectMeaning(op, ctx.meaning(op.status))),
            ),
            h('td', { 'data-label': 'Reason' }, op.terminal_reason ? code(op.terminal_reason) : '—'),
            h('td', { 'data-label': 'Retry' }, code(op.retry)),
            h('td', { 'data-label': 'Sent' }, op.attempt > 0 ? `${op.attempt}×` : 'never'),
          ),
        ),
      ),
    ),
  );
}

function effectsSection(execution: Execution): HTMLElement {
  const counts = Object.entries(execution.effects.counts).filter(([, n]) => n > 0);
  return section(
    'effects',
    'Effects summary',
    h('p', {}, effectsBadge(execution.effects.summary), ' ', EFFECTS_TEXT[execution.effects.summary] ?? ''),
    definitions(counts.map(([status, n]): [string, string] => [status, String(n)])),
  );
}

function criteriaSection(execution: Execution): HTMLElement {
  if (execution.criteria.length === 0) {
    return section('criteria', 'Criteria', h('p', { class: 'muted' }, 'The agent declared no criteria.'));
  }
  const results = execution.criteria_results;
  return section(
    'criteria',
    'Criteria',
    results ? null : h('p', { class: 'muted' }, 'Verdicts are given once every operation has settled.'),
    h(
      'table',
      { class: 'stack' },
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          ['Criterion', 'Operation', 'Expected', 'Verdict', 'Evidence'].map((t) => h('th', { scope: 'col' }, t)),
        ),
      ),
      h(
        'tbody',
        {},
        execution.criteria.map((criterion) => {
          const verdict = results?.find((r) => r.key === criterion.key);
          return h(
            'tr',
            { 'data-criterion': criterion.key },
            h('td', { 'data-label': 'Criterion' }, code(criterion.key)),
            h('td', { 'data-label': 'Operation' }, written(criterion.operation)),
            h('td', { 'data-label': 'Expected' }, code(expectation(criterion))),
            h(
              'td',
              { 'data-label': 'Verdict' },
              verdict ? verdictBadge(verdict.verdict) : h('span', { class: 'muted' }, 'pending'),
            ),
            h(
              'td',
              { 'data-label': 'Evidence' },
              verdict?.evidence_event_ids.length
                ? verdict.evidence_event_ids.map((eventId, i) => [
                    i ? ', ' : '',
                    h('a', { href: `#${eventId}`, class: 'event-link' }, eventId),
                  ])
                : '—',
            ),
          );
        }),
      ),
    ),
  );
}

/** What a criterion expects: a status, or a value at a path of the verified evidence. */
function expectation(criterion: Criterion): string {
  if ('expect_status' in criterion) return criterion.expect_status;
  return `${criterion.expect_evidence.path} = ${JSON.stringify(criterion.expect_evidence.equals)}`;
}

function failureSection(execution: Execution): HTMLElement {
  const f = execution.failure!;
  return factsSection('failure', 'Failure', [
    ['Code', code(f.code)],
    ['Phase', f.phase],
    ['Category', f.category],
    ['Retryable', f.retryable ? 'yes' : 'no'],
    // It may carry what the agent or a provider wrote (a refused request's problems): isolated, as such text is.
    ['Message', written(f.message)],
    ['At', time(f.at)],
  ]);
}
