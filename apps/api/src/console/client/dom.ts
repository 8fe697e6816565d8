import { maskSecrets, maskString } from '../mask';
import { rightToLeftIn, shown } from './shown-text';

export type Child = Node | string | number | null | undefined | false | Child[];
type AttrValue = string | number | boolean | null | undefined | ((event: Event) => void);

/**
 * Builds elements without ever parsing HTML: text goes in as text, so nothing an agent wrote (intent, params,
 * evidence) can become markup or script in a reviewer's browser.
 */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, AttrValue> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (typeof value === 'function') el.addEventListener(name.replace(/^on/, ''), value);
    else if (name === 'class') el.className = String(value);
    else el.setAttribute(name, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

function append(el: Element, children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(typeof child === 'number' ? String(child) : typeof child === 'string' ? shown(child) : child);
  }
}

const pad = (n: number, width = 2) => String(n).padStart(width, '0');

/** Local time, unambiguous and sortable; the ISO value stays in the datetime attribute. */
export function formatTime(iso: string | null | undefined, withMillis = false): string {
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  const base = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  return withMillis ? `${base}.${pad(d.getMilliseconds(), 3)}` : base;
}

export function relative(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return '';
  const ms = new Date(iso).getTime() - now;
  const abs = Math.abs(ms);
  const minutes = Math.round(abs / 60_000);
  const unit =
    abs < 60_000
      ? `${Math.round(abs / 1000)} s`
      : minutes < 60
        ? `${minutes} min`
        : minutes < 24 * 60
          ? `${Math.floor(minutes / 60)} h${minutes % 60 ? ` ${minutes % 60} min` : ''}`
          : `${Math.round(minutes / (24 * 60))} d`;
  return ms >= 0 ? `in ${unit}` : `${unit} ago`;
}

export function time(
  iso: string | null | undefined,
  options: { relative?: boolean; millis?: boolean } = {},
): HTMLElement {
  if (!iso) return h('span', { class: 'muted' }, '—');
  return h(
    'time',
    { datetime: iso, title: iso },
    formatTime(iso, options.millis),
    options.relative ? h('span', { class: 'muted' }, ` (${relative(iso)})`) : null,
  );
}

/** A string token of JSON text (a key or a value, its quotes and escapes included). */
const JSON_STRING = /"(?:[^"\\]|\\.)*"/g;

/**
 * Text sent as it is shown, and also in the order it is sent when it holds right-to-left letters: such a letter lays
 * out the digits after it right to left, so `\u05D0 1111 2222` reads `2222 1111 \u05D0` with no hidden character.
 */
function sendingOrder(text: string): HTMLElement {
  return h(
    'span',
    { class: 'sending-order' },
    ' — in the order it is sent: ',
    h('code', { class: 'logical', dir: 'ltr' }, text),
  );
}

/** A value as `code()` shows it, followed, when it holds right-to-left letters, by the same value in sending order. */
export function sentCode(text: string): Child {
  return rightToLeftIn(text) ? [code(text), sendingOrder(text)] : code(text);
}

/**
 * Pretty JSON text as the console shows it: each string (a key or a value) in an isolated span of its own, so the
 * right-to-left letters of one can never reorder the digits or punctuation of another on its line (`"\u05D0": 500`);
 * and each string that holds right-to-left letters also in the order it is sent, at the end of its line (a muted note
 * that is not selected with the JSON). Every piece is shown() by append.
 */
function jsonText(text: string): Child[] {
  const lines = text.split('\n');
  return lines.map((line, index) => {
    const parts: Child[] = [];
    const sent: HTMLElement[] = [];
    let at = 0;
    for (const match of line.matchAll(JSON_STRING)) {
      if (match.index > at) parts.push(line.slice(at, match.index));
      parts.push(h('span', { class: 'json-string' }, match[0]));
      if (rightToLeftIn(match[0])) sent.push(sendingOrder(match[0]));
      at = match.index + match[0].length;
    }
    if (at < line.length) parts.push(line.slice(at));
    return [parts, sent, index < lines.length - 1 ? '\n' : null];
  });
}

/** Masked, pretty JSON in a scrollable, keyboard-focusable block. */
export function json(value: unknown, label: string): HTMLElement {
  return h(
    'pre',
    { class: 'json', tabindex: 0, 'aria-label': label },
    jsonText(JSON.stringify(maskSecrets(value), null, 2)),
  );
}

/** Whether a reviewer has unmasked a block, kept by the page so that its live re-renders do not mask it again. */
export interface RevealState {
  readonly revealed: boolean;
  set(revealed: boolean): void;
}

/**
 * Masked JSON a reviewer can unmask. What is masked is chosen by names and patterns (a field called `…token`, a
 * `Bearer …` inside a string), and an agent could shape what it sends to look like that; the reviewer decides on what
 * will be sent, so the values stay one click away (the API returns them to a reviewer anyway). `state`: where the
 * reviewer's choice outlives this element (a page re-renders it on every live update); without it, it starts masked.
 */
export function revealableJson(value: unknown, label: string, state?: RevealState): HTMLElement {
  const masked = JSON.stringify(maskSecrets(value), null, 2);
  const raw = JSON.stringify(value, null, 2);
  const block = h('pre', { class: 'json', tabindex: 0, 'aria-label': label }, jsonText(masked));
  if (masked === raw) return block;
  const toggle: HTMLButtonElement = h('button', {
    type: 'button',
    class: 'reveal',
    onclick: () => {
      const revealed = toggle.getAttribute('aria-pressed') !== 'true';
      show(revealed);
      state?.set(revealed);
    },
  });
  const show = (revealed: boolean) => {
    fill(block, jsonText(revealed ? raw : masked));
    toggle.setAttribute('aria-pressed', String(revealed));
    toggle.textContent = revealed ? 'Mask them again' : 'Show masked values';
  };
  show(state?.revealed ?? false);
  return h('div', { class: 'revealable' }, toggle, block);
}

export function definitions(rows: Array<[string, Child] | null | false>): HTMLElement {
  return h(
    'dl',
    { class: 'facts' },
    rows
      .filter((r): r is [string, Child] => Boolean(r))
      .map(([term, value]) => h('div', {}, h('dt', {}, term), h('dd', {}, value))),
  );
}

export function section(id: string, title: string, ...children: Child[]): HTMLElement {
  return h(
    'section',
    { id, class: 'panel', 'aria-labelledby': `${id}-title` },
    h('h2', { id: `${id}-title` }, title),
    children,
  );
}

/** A panel that is one list of facts (`definitions`). */
export function factsSection(id: string, title: string, facts: Parameters<typeof definitions>[0]): HTMLElement {
  return section(id, title, definitions(facts));
}

const EXECUTION_TONE: Record<string, string> = {
  completed: 'done',
  failed: 'bad',
  cancelled: 'off',
  expired: 'off',
  waiting_for_approval: 'attention',
};

const EFFECT_TONE: Record<string, string> = {
  VERIFIED: 'good',
  FAILED: 'bad',
  UNKNOWN: 'warn',
  RECONCILING: 'warn',
  MANUAL_REVIEW: 'review',
  CANCELLED: 'off',
  PREPARED: 'idle',
  SENT: 'pending',
  ACKNOWLEDGED: 'pending',
};

/**
 * The execution status (where the agent's work stands): a rounded, outlined pill with a lowercase value.
 * Never to be read as "the effect happened".
 */
export function executionBadge(status: string): HTMLElement {
  return h(
    'span',
    {
      class: `badge badge-execution tone-${EXECUTION_TONE[status] ?? 'active'}`,
      'data-kind': 'execution',
      'data-status': status,
    },
    h('span', { class: 'badge-label' }, 'Execution'),
    h('span', { class: 'badge-value' }, status),
  );
}

/** The operation status (whether the effect occurred in the world): a square, filled tag with an uppercase value. */
export function effectBadge(status: string, meaning?: string): HTMLElement {
  return h(
    'span',
    {
      class: `badge badge-effect tone-${EFFECT_TONE[status] ?? 'idle'}`,
      'data-kind': 'operation',
      'data-status': status,
      title: meaning,
    },
    h('span', { class: 'badge-label' }, 'Operation effect'),
    h('span', { class: 'badge-value' }, status),
  );
}

export function effectsBadge(summary: string): HTMLElement {
  return h(
    'span',
    { class: `badge badge-summary tone-${summary}`, 'data-kind': 'effects', 'data-status': summary },
    h('span', { class: 'badge-label' }, 'Effects'),
    h('span', { class: 'badge-value' }, summary.replace(/_/g, ' ')),
  );
}

/** The group that holds the two status cards, kept apart because they are two separate kinds of status. */
export function statusPair(): HTMLElement {
  return h('div', { class: 'status-pair', role: 'group', 'aria-label': 'Status, two separate kinds' });
}

/** The top of an execution's or an operation's page: heading, lede, the two status cards and the callout below them. */
export function pageTop(kind: 'Execution' | 'Operation', id: string) {
  return {
    heading: h('h1', { tabindex: -1 }, `${kind} `, code(id)),
    lede: h('p', { class: 'lede' }, 'Loading…'),
    statusCards: statusPair(),
    callout: h('p', { class: 'callout', hidden: true }),
  };
}

/** One card of the pair: `execution`, where the agent's work stands, or `effect`, whether it happened. */
export function statusCard(kind: 'execution' | 'effect', badge: HTMLElement, ...text: Child[]): HTMLElement {
  return h('div', { class: `status-card status-card-${kind}` }, badge, h('p', {}, ...text));
}

/** The start of a page's lede: the execution's intent (masked) and its agent. */
export function intentAndAgent(execution: { intent: string; agent_id: string }): Child[] {
  return [
    h('span', {}, 'Intent: ', h('q', {}, maskString(execution.intent))),
    h('span', {}, ' · Agent ', code(execution.agent_id)),
  ];
}

export function verdictBadge(verdict: string): HTMLElement {
  return h('span', { class: `verdict verdict-${verdict}`, 'data-verdict': verdict }, verdict.replace(/_/g, ' '));
}

export function link(href: string, ...children: Child[]): HTMLElement {
  return h('a', { href }, children);
}

export function code(text: string): HTMLElement {
  return h('code', {}, text);
}

/**
 * Text written by someone else — an agent, another reviewer, a tenant's admin — shown inside the console's own words:
 * a <bdi> (isolated), so a right-to-left override in it (U+202E) cannot reorder the text around it.
 */
export function written(text: string): HTMLElement {
  return h('bdi', {}, text);
}

/** replaceChildren that accepts the same children as h() (nulls skipped, arrays flattened). */
export function fill(el: Element, ...children: Child[]): void {
  el.replaceChildren();
  append(el, children);
}
