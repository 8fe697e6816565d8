import { StatusModelDocument, VerityError } from '@verity/sdk';
import { AppContext, POLL_MS, Page } from './context';
import { h, fill } from './dom';
import { executionPage } from './execution-page';
import { operationPage } from './operation-page';
import { queuesPage } from './queues-page';
import { api, clientFor, session, whenUnauthorized } from './session';

const BASE = '/console';
const app = document.getElementById('app')!;
let disposePage: () => void = () => undefined;
let countsTimer: ReturnType<typeof setInterval> | null = null;
let statusModel: StatusModelDocument | null = null;
// Whether the signed-in key may take decisions (the summary's can_decide), kept with the key it was read for.
let decides: { key: string; can: boolean } | null = null;
const live = h('div', { id: 'live', class: 'visually-hidden', role: 'status', 'aria-live': 'polite' });

const ctx: AppContext = {
  navigate(path) {
    window.history.pushState(null, '', path);
    route(true);
  },
  announce(message) {
    live.textContent = '';
    // A fresh text node after clearing makes screen readers repeat an identical message.
    setTimeout(() => (live.textContent = message), 30);
  },
  refreshCounts: () => refreshCounts(),
  meaning: (status) => statusModel?.operation.statuses.find((s) => s.status === status)?.meaning,
  statusModel: () => statusModel,
  canDecide: () => (decides && decides.key === session.key() ? decides.can : null),
};

function pageAt(pathname: string): Page | null {
  const path = pathname.replace(/\/+$/, '');
  if (path === BASE) return queuesPage;
  const match = /^\/console\/(operations|executions)\/([A-Za-z0-9_-]{1,100})$/.exec(path);
  if (!match) return null;
  return match[1] === 'operations' ? operationPage(match[2]) : executionPage(match[2]);
}

let routed = '';

function route(userNavigated = false): void {
  routed = window.location.pathname + window.location.search;
  disposePage();
  disposePage = () => undefined;
  if (!session.key()) {
    stopCounts();
    signInPage();
    return;
  }
  const main = shell();
  const page = pageAt(window.location.pathname);
  if (page) disposePage = page(main, ctx);
  else {
    document.title = 'Not found · Verity review';
    fill(
      main,
      h('h1', { tabindex: -1 }, 'Page not found'),
      h(
        'p',
        {},
        'The console has queues, operation pages and execution pages. ',
        h('a', { href: BASE }, 'Back to the queues'),
        '.',
      ),
    );
  }
  if (userNavigated) {
    window.scrollTo(0, 0);
    main.querySelector('h1')?.focus({ preventScroll: true });
  }
}

/** Header and main landmark, built once per sign-in. */
function shell(): HTMLElement {
  const existing = document.getElementById('main');
  if (existing?.dataset.shell) return existing;
  const findInput = h('input', {
    id: 'find-id',
    type: 'search',
    placeholder: 'exe_… or op_…',
    autocomplete: 'off',
    spellcheck: 'false',
    required: true,
  });
  const findForm = h(
    'form',
    {
      id: 'find',
      role: 'search',
      method: 'post',
      onsubmit: (event) => {
        event.preventDefault();
        const id = findInput.value.trim();
        if (!id) return;
        const kind = id.startsWith('op_') ? 'operations' : 'executions';
        findInput.value = '';
        ctx.navigate(`${BASE}/${kind}/${encodeURIComponent(id)}`);
      },
    },
    h('label', { for: 'find-id' }, 'Open by id'),
    findInput,
    h('button', { type: 'submit' }, 'Open'),
  );
  const header = h(
    'header',
    { class: 'top' },
    h('a', { class: 'brand', href: BASE }, 'Verity ', h('span', {}, 'review')),
    h(
      'nav',
      { 'aria-label': 'Work queues' },
      h(
        'a',
        { href: `${BASE}#approvals`, id: 'nav-approvals' },
        'Approvals ',
        h('span', { class: 'count', id: 'nav-count-approvals' }, '–'),
      ),
      h(
        'a',
        { href: `${BASE}#manual-reviews`, id: 'nav-manual' },
        'Manual reviews ',
        h('span', { class: 'count', id: 'nav-count-manual' }, '–'),
        h('span', { class: 'count count-alert', id: 'nav-count-escalated', hidden: true }),
      ),
    ),
    findForm,
    h(
      'button',
      {
        type: 'button',
        id: 'sign-out',
        class: 'quiet',
        onclick: () => {
          session.signOut();
          window.history.pushState(null, '', BASE);
          route();
        },
      },
      'Sign out',
    ),
  );
  const main = h('main', { id: 'main', tabindex: -1, 'data-shell': 'console' });
  fill(app, h('a', { class: 'skip', href: '#main' }, 'Skip to content'), header, main, live);
  startCounts();
  return main;
}

let countsAt = 0;

/** The header counts; the queues page calls this with its own refresh so the two never disagree for long. */
async function refreshCounts(): Promise<void> {
  if (!session.key()) return;
  countsAt = Date.now();
  try {
    const key = session.key();
    const counts = await api((dx) => dx.review.summary());
    if (key) decides = { key, can: counts.can_decide };
    const set = (id: string, text: string) => {
      const el = document.getElementById(id);
      if (el && el.textContent !== text) el.textContent = text;
    };
    set('nav-count-approvals', String(counts.approvals));
    set('nav-count-manual', String(counts.manual_reviews));
    const escalated = document.getElementById('nav-count-escalated');
    if (escalated) {
      escalated.hidden = counts.escalated === 0;
      escalated.textContent = `${counts.escalated} escalated`;
    }
    const pending = counts.approvals + counts.manual_reviews;
    const base = document.title.replace(/^\(\d+\) /, '');
    document.title = pending ? `(${pending}) ${base}` : base;
  } catch {
    // The page's own refresh reports trouble; the header just keeps its last counts.
  }
}

function startCounts(): void {
  stopCounts();
  void refreshCounts();
  countsTimer = setInterval(() => {
    if (!document.hidden && Date.now() - countsAt >= POLL_MS / 2) void refreshCounts();
  }, POLL_MS);
}

function stopCounts(): void {
  if (countsTimer) clearInterval(countsTimer);
  countsTimer = null;
}

function signInPage(message?: string): void {
  document.title = 'Sign in · Verity review';
  const input = h('input', {
    id: 'api-key',
    type: 'password',
    autocomplete: 'off',
    spellcheck: 'false',
    required: true,
    'aria-describedby': 'api-key-help signin-error',
  });
  const error = h('p', { id: 'signin-error', class: 'error', role: 'alert' }, message ?? '');
  const submit = h('button', { type: 'submit', class: 'primary' }, 'Sign in');
  const form = h(
    'form',
    {
      id: 'signin',
      method: 'post',
      onsubmit: (event) => {
        event.preventDefault();
        const key = input.value.trim();
        if (!key) {
          error.textContent = 'Enter a reviewer API key.';
          input.focus();
          return;
        }
        submit.disabled = true;
        error.textContent = '';
        // Inside the chain: a key the SDK refuses to send (a line break) is reported like any other failure.
        Promise.resolve()
          .then(() => clientFor(key).review.summary())
          .then(async (summary) => {
            decides = { key, can: summary.can_decide };
            session.signIn(key);
            await loadStatusModel();
            route(true);
          })
          .catch((e: unknown) => {
            error.textContent = signInFailure(e);
            input.focus();
          })
          .finally(() => (submit.disabled = false));
      },
    },
    h('label', { for: 'api-key' }, 'Reviewer API key'),
    input,
    h(
      'p',
      { id: 'api-key-help', class: 'hint' },
      'Kept only in this browser tab (session storage) and sent as an Authorization header, never in a URL.',
    ),
    error,
    submit,
  );
  fill(
    app,
    h(
      'main',
      { id: 'main', class: 'signin', tabindex: -1 },
      h('h1', {}, 'Verity review console'),
      h(
        'p',
        {},
        'Approve or deny operations that wait for a human, and resolve operations held in manual review with evidence.',
      ),
      form,
    ),
    live,
  );
  input.focus();
}

function signInFailure(error: unknown): string {
  if (error instanceof VerityError) {
    if (error.status === 401) return 'This key was refused: it is unknown or has been revoked.';
    if (error.status === 403) return 'This key is valid but does not have the reviewer role.';
    if (error.status === 429) return 'Too many attempts; wait a moment and try again.';
    return `The API answered ${error.status}: ${error.detail || error.title}`;
  }
  return 'The API could not be reached. Check the connection and try again.';
}

/** Plain clicks on console links change the page without a reload; modified clicks keep the browser's behaviour. */
function interceptLinks(event: MouseEvent): void {
  if (
    event.defaultPrevented ||
    event.button !== 0 ||
    event.metaKey ||
    event.ctrlKey ||
    event.shiftKey ||
    event.altKey
  ) {
    return;
  }
  const anchor = (event.target as HTMLElement | null)?.closest?.('a[href]');
  if (!anchor || anchor.getAttribute('target')) return;
  const href = anchor.getAttribute('href') ?? '';
  if (!href.startsWith(`${BASE}`) || href.startsWith('//')) return;
  const [path, hash] = href.split('#');
  event.preventDefault();
  if (path === window.location.pathname || (path === BASE && window.location.pathname === `${BASE}/`)) {
    if (hash) document.getElementById(hash)?.focus();
    return;
  }
  window.history.pushState(null, '', href);
  route(true);
  if (hash) document.getElementById(hash)?.focus();
}

async function boot(): Promise<void> {
  whenUnauthorized(() => {
    session.signOut();
    disposePage();
    disposePage = () => undefined;
    stopCounts();
    signInPage('The API refused the stored key (revoked or unknown). Sign in again.');
  });
  // A fragment link (#evt_…) fires popstate too; it scrolls within the page and must not rebuild it.
  window.addEventListener('popstate', () => {
    if (window.location.pathname + window.location.search !== routed) route();
  });
  document.addEventListener('click', interceptLinks);
  await loadStatusModel();
  // A stored key (a reload): whether it may decide is known before a page offers any decision. A key refused there
  // has already brought back the sign-in page, with the reason.
  if (session.key()) {
    await refreshCounts();
    if (!session.key()) return;
  }
  route();
}

/**
 * The status model's meanings and reasons (a public document, read with the SDK once a key is at hand). Without it
 * the console still works: badges lose their tooltips and the reason filter its choices.
 */
async function loadStatusModel(): Promise<void> {
  const key = session.key();
  if (statusModel || !key) return;
  statusModel = await clientFor(key)
    .statusModel()
    .catch(() => null);
}

void boot();
