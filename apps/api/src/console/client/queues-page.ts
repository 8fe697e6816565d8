import {
  type ConnectorInfo,
  OperationStatus,
  type ReviewQueueItem,
  type ReviewQueuePage,
  type ManualReviewQuery,
  type ReviewQueueQuery,
  type StatusModelDocument,
  VerityError,
} from '@verity/sdk';
import { POLL_MS, Page } from './context';
import {
  type Child,
  code,
  definitions,
  effectBadge,
  executionBadge,
  formatTime,
  h,
  relative,
  time,
  fill,
  written,
} from './dom';
import { type Filters, filtersFromSearch } from './queue-filters';
import { api, problemText } from './session';

/** The reasons an operation can be held in MANUAL_REVIEW for: the only ones the manual-review queue filters by. */
function holdReasons(model: StatusModelDocument | null): string[] {
  const reasons = (model?.operation.transitions ?? [])
    .filter((t) => t.to === OperationStatus.MANUAL_REVIEW)
    .flatMap((t) => t.reasons);
  return [...new Set(reasons)];
}

interface Queue {
  id: 'approvals' | 'manual-reviews';
  title: string;
  empty: string;
  limit: number;
  signature: string;
  list: HTMLElement;
  count: HTMLElement;
  more: HTMLElement;
  shown: number;
  total: number;
}

const PAGE = 50;
let connectorCache: ConnectorInfo[] | null = null;

/** Filters live in the URL (shareable, survive a reload); the key never does. */
function filtersToUrl(filters: Filters): void {
  const params = new URLSearchParams();
  if (filters.connector) params.set('connector', filters.connector);
  if (filters.q) params.set('q', filters.q);
  if (filters.reason) params.set('reason', filters.reason);
  if (filters.escalated) params.set('escalated', 'true');
  const search = params.toString();
  window.history.replaceState(null, '', `/console${search ? `?${search}` : ''}${window.location.hash}`);
}

export const queuesPage: Page = (main, ctx) => {
  document.title = 'Queues · Verity review';
  const filters = filtersFromSearch(window.location.search);
  let disposed = false;
  let timer: ReturnType<typeof setTimeout> | null = null;
  let inFlight = false;

  const connectorSelect = h('select', { id: 'filter-connector' }, h('option', { value: '' }, 'All connectors'));
  const fillConnectors = (list: ConnectorInfo[]) => {
    fill(
      connectorSelect,
      h('option', { value: '' }, 'All connectors'),
      list.map((c) => h('option', { value: c.name }, c.name)),
    );
    connectorSelect.value = filters.connector;
  };
  if (connectorCache) fillConnectors(connectorCache);
  else {
    api((dx) => dx.connectors())
      .then((list) => {
        connectorCache = list;
        if (!disposed) fillConnectors(list);
      })
      .catch(() => undefined);
  }
  if (filters.connector && !connectorCache) {
    connectorSelect.append(h('option', { value: filters.connector }, filters.connector));
    connectorSelect.value = filters.connector;
  }
  const search = h('input', {
    id: 'filter-q',
    type: 'search',
    value: filters.q,
    placeholder: 'id, key, action, intent or agent',
    autocomplete: 'off',
  });
  const reasonSelect = h(
    'select',
    { id: 'filter-reason' },
    h('option', { value: '' }, 'Any reason'),
    holdReasons(ctx.statusModel()).map((r) => h('option', { value: r }, r)),
  );
  reasonSelect.value = filters.reason;
  const escalated = h('input', { id: 'filter-escalated', type: 'checkbox', checked: filters.escalated });
  const updated = h('p', { class: 'updated muted', 'aria-live': 'off' }, 'Loading…');
  const trouble = h('p', { class: 'error', role: 'alert' });

  const queues: Queue[] = [
    makeQueue('approvals', 'Awaiting approval', 'Nothing awaits approval.'),
    makeQueue('manual-reviews', 'Manual review', 'No operation is held for manual review.'),
  ];

  const apply = () => {
    filters.connector = connectorSelect.value;
    filters.q = search.value.trim();
    filters.reason = reasonSelect.value;
    filters.escalated = escalated.checked;
    filtersToUrl(filters);
    for (const queue of queues) queue.limit = PAGE;
    void refresh(true);
  };
  let typing: ReturnType<typeof setTimeout> | null = null;
  search.addEventListener('input', () => {
    if (typing) clearTimeout(typing);
    typing = setTimeout(apply, 300);
  });
  connectorSelect.addEventListener('change', apply);
  reasonSelect.addEventListener('change', apply);
  escalated.addEventListener('change', apply);

  const form = h(
    'form',
    {
      class: 'filters',
      role: 'search',
      'aria-label': 'Filter the queues',
      method: 'post',
      onsubmit: (event) => {
        event.preventDefault();
        apply();
      },
    },
    h('div', { class: 'field' }, h('label', { for: 'filter-q' }, 'Search'), search),
    h('div', { class: 'field' }, h('label', { for: 'filter-connector' }, 'Connector'), connectorSelect),
    h('div', { class: 'field' }, h('label', { for: 'filter-reason' }, 'Review reason'), reasonSelect),
    h(
      'div',
      { class: 'field field-check' },
      escalated,
      h('label', { for: 'filter-escalated' }, 'Escalated reviews only'),
    ),
    h(
      'div',
      { class: 'field field-actions' },
      h('button', { type: 'submit' }, 'Apply'),
      h(
        'button',
        {
          type: 'button',
          class: 'quiet',
          onclick: () => {
            search.value = '';
            connectorSelect.value = '';
            reasonSelect.value = '';
            escalated.checked = false;
            apply();
          },
        },
        'Clear',
      ),
    ),
  );

  fill(
    main,
    h('h1', { tabindex: -1 }, 'Review queues'),
    h(
      'p',
      { class: 'lede' },
      'Operations that wait for a human, newest first. Counts and lists refresh every 2 seconds.',
    ),
    form,
    updated,
    trouble,
    h(
      'div',
      { class: 'queues' },
      queues.map((queue) =>
        h(
          'section',
          { id: queue.id, class: 'panel queue', tabindex: -1, 'aria-labelledby': `${queue.id}-title` },
          h('h2', { id: `${queue.id}-title` }, `${queue.title} `, queue.count),
          queue.list,
          queue.more,
        ),
      ),
    ),
  );

  for (const queue of queues) {
    queue.more.addEventListener('click', () => {
      queue.limit = Math.min(200, queue.limit + PAGE);
      void refresh(true);
    });
  }

  async function refresh(force = false): Promise<void> {
    if (disposed || (inFlight && !force)) return;
    if (document.hidden && !force) return;
    inFlight = true;
    try {
      const readPage = (queue: Queue, limit: number, cursor: string | undefined) => {
        const query: ReviewQueueQuery = {
          limit,
          cursor,
          connector: filters.connector || undefined,
          q: filters.q || undefined,
        };
        return api((dx) =>
          queue.id === 'approvals'
            ? dx.review.approvals(query)
            : dx.review.manualReviews({
                ...query,
                reason: (filters.reason || undefined) as ManualReviewQuery['reason'],
                escalated: filters.escalated || undefined,
              }),
        );
      };
      // The API ends a page early once its operations hold 1 MiB (next_cursor set): read on up to the limit shown, or
      // large requests past the first MiB never appear and "Show more" asks again for the same cut page.
      const read = async (queue: Queue): Promise<ReviewQueuePage> => {
        let page = await readPage(queue, queue.limit, undefined);
        const data = [...page.data];
        while (page.next_cursor !== null && data.length < queue.limit) {
          page = await readPage(queue, queue.limit - data.length, page.next_cursor);
          data.push(...page.data);
        }
        return { ...page, data };
      };
      const counts = ctx.refreshCounts();
      const pages = await Promise.all(queues.map(read));
      await counts;
      if (disposed) return;
      pages.forEach((page, i) => render(queues[i], page));
      updated.textContent = `Updated ${formatTime(new Date().toISOString())}.`;
      trouble.textContent = '';
    } catch (error) {
      if (disposed) return;
      trouble.textContent =
        error instanceof VerityError
          ? `Could not refresh the queues: ${problemText(error)}. Retrying.`
          : 'Could not reach the API. Retrying.';
    } finally {
      inFlight = false;
    }
  }

  const loop = async () => {
    await refresh();
    if (!disposed) timer = setTimeout(() => void loop(), POLL_MS);
  };
  void loop();
  if (window.location.hash) document.getElementById(window.location.hash.slice(1))?.focus();

  return () => {
    disposed = true;
    if (timer) clearTimeout(timer);
    if (typing) clearTimeout(typing);
  };
};

function makeQueue(id: Queue['id'], title: string, empty: string): Queue {
  return {
    id,
    title,
    empty,
    limit: PAGE,
    signature: '',
    list: h('ul', { class: 'cards', 'aria-label': title }),
    count: h('span', { class: 'count', id: `count-${id}`, 'aria-label': 'count' }, '…'),
    more: h('button', { type: 'button', class: 'quiet more', hidden: true }, 'Show more'),
    shown: 0,
    total: 0,
  };
}

/** Re-rendered only when something changed (or a minute passed, for relative times), keeping keyboard focus. */
function render(queue: Queue, page: ReviewQueuePage): void {
  const signature = `${Math.floor(Date.now() / 60_000)}|${page.total}|${page.data
    .map((i) => `${i.operation.id}:${i.operation.status}:${i.operation.updated_at}:${i.execution?.status}`)
    .join(',')}`;
  if (signature === queue.signature) return;
  queue.signature = signature;
  queue.count.textContent = String(page.total);
  const focusedKey =
    document.activeElement && queue.list.contains(document.activeElement)
      ? document.activeElement.getAttribute('data-focus-key')
      : null;
  fill(
    queue.list,
    ...(page.data.length
      ? page.data.map((item) => (queue.id === 'approvals' ? approvalCard(item) : reviewCard(item)))
      : [h('li', { class: 'empty' }, queue.empty)]),
  );
  if (focusedKey) queue.list.querySelector<HTMLElement>(`[data-focus-key="${focusedKey}"]`)?.focus();
  queue.shown = page.data.length;
  queue.total = page.total;
  queue.more.hidden = page.total <= page.data.length || queue.limit >= 200;
  queue.more.textContent = `Show more (${page.total - page.data.length} not shown)`;
}

function cardHead(item: ReviewQueueItem): HTMLElement {
  const op = item.operation;
  return h(
    'div',
    { class: 'card-head' },
    h(
      'a',
      { class: 'card-title', href: `/console/operations/${op.id}`, 'data-focus-key': op.id },
      h('span', { class: 'op-key' }, op.key),
      h('span', { class: 'op-route' }, ' ', written(op.connector), ' › ', written(op.action)),
    ),
    h(
      'div',
      { class: 'badges' },
      item.execution ? executionBadge(item.execution.status) : null,
      effectBadge(op.status),
    ),
  );
}

/** A retry of a request reviewers denied before: how often, and the last denial's reason (the page shows them all). */
function deniedBeforeFact(op: ReviewQueueItem['operation']): [string, Child] | null {
  const denied = op.earlier_attempts.filter((attempt) => attempt.denied_by !== null);
  if (denied.length === 0) return null;
  const last = denied[0];
  return [
    'Denied before',
    h(
      'span',
      { class: 'tag tag-denied' },
      denied.length === 1 ? 'once' : `${denied.length} times`,
      last.reason ? [': “', written(last.reason), '”'] : null,
    ),
  ];
}

function approvalCard(item: ReviewQueueItem): HTMLElement {
  const op = item.operation;
  return h(
    'li',
    { class: 'card', 'data-operation-id': op.id },
    cardHead(item),
    definitions([
      ['Intent', item.execution ? written(item.execution.intent) : '—'],
      ['Agent', item.execution ? code(item.execution.agent_id) : '—'],
      ['Requested', time(op.approval?.requested_at ?? op.created_at, { relative: true })],
      ['Irreversible', op.irreversible ? 'yes' : 'no'],
      deniedBeforeFact(op),
    ]),
  );
}

function reviewCard(item: ReviewQueueItem): HTMLElement {
  const op = item.operation;
  const obligation = op.recovery_obligation;
  // A released hold (a resolution recorded, the send still to come) was met: it is overdue for nobody.
  const overdue = obligation && !obligation.resolution ? new Date(obligation.due_at).getTime() < Date.now() : false;
  return h(
    'li',
    { class: `card${overdue ? ' card-overdue' : ''}`, 'data-operation-id': op.id },
    cardHead(item),
    definitions([
      ['Reason', obligation?.reason ?? op.terminal_reason ?? '—'],
      ['Owner', obligation ? written(obligation.owner) : '—'],
      [
        'Due',
        obligation
          ? h(
              'span',
              {},
              time(obligation.due_at),
              ' ',
              h(
                'span',
                { class: overdue ? 'tag tag-bad' : 'muted' },
                overdue ? `overdue ${relative(obligation.due_at)}`.replace(' ago', '') : relative(obligation.due_at),
              ),
            )
          : '—',
      ],
      [
        'Escalation',
        escalationText(
          obligation?.escalated_at ?? null,
          obligation?.escalation_target,
          Boolean(obligation?.resolution),
        ),
      ],
      ['Intent', item.execution ? written(item.execution.intent) : '—'],
    ]),
  );
}

export function escalationText(escalatedAt: string | null, target: string | undefined, resolved = false): HTMLElement {
  if (escalatedAt) {
    return h(
      'span',
      { class: 'tag tag-bad' },
      'escalated to ',
      written(target ?? 'on-call'),
      ` ${relative(escalatedAt)}`,
    );
  }
  // A resolution on file (a release the dispatcher has yet to send) met the obligation: it is never escalated.
  if (resolved) return h('span', { class: 'muted' }, 'not escalated (a reviewer resolved it)');
  return h('span', { class: 'muted' }, 'not escalated (goes to ', written(target ?? 'on-call'), ' when overdue)');
}
