import {
  type Execution,
  type OperationDetail,
  OperationStatus,
  type Verity,
  VerityError,
  VerityMissingETagError,
  VerityNotFoundError,
  VerityPreconditionFailedError,
} from '@verity/sdk';
import type { AppContext, Page } from './context';
import {
  type Child,
  code,
  definitions,
  effectBadge,
  executionBadge,
  factsSection,
  fill,
  h,
  intentAndAgent,
  json,
  revealableJson,
  sentCode,
  type RevealState,
  link,
  relative,
  section,
  pageTop,
  statusCard,
  time,
  written,
} from './dom';
import { maskSecrets, maskString } from '../mask';
import { escalationText } from './queues-page';
import { divergence, effectMeaning } from './status-text';
import { api, problemText } from './session';
import { livePage } from './live-page';

const RESOLUTION_TEXT: Record<string, string> = {
  VERIFIED: 'the effect happened (confirmed outside Verity)',
  FAILED: 'no effect exists',
  SENT: 'release it: send it now',
  CANCELLED: 'never send it',
};

/** The API's reason for an action, falling back to the plain meaning of the status. */
function optionWhy(op: OperationDetail, status: string): string {
  return op.resolution_options.find((o) => o.status === status)?.why ?? RESOLUTION_TEXT[status] ?? '';
}

/** Shown while the operation is read without its version (ETag), and until a later read has it again. */
const MISSING_ETAG =
  'The API answered without the operation’s version (its ETag header): something between this page and the API ' +
  'removes it, so no decision can be taken here.';

export function operationPage(id: string): Page {
  return (main, ctx) => operationView(id, main, ctx);
}

function operationView(id: string, main: HTMLElement, ctx: AppContext): () => void {
  document.title = `Operation ${id} · Verity review`;
  let actionSignature = '';
  let busy = false;
  // The ETag of the operation as the page shows it now: every decision is sent with it (If-Match), so it is taken on
  // what the reviewer sees — never on a later hold of the operation, or an approval asked for again, that a stale page
  // does not show (412 then, nothing written).
  let shownETag: string | undefined;
  // The masked blocks the reviewer unmasked, by operation id and block: every live re-render shows them as the reviewer
  // left them. Kept by this page only: another operation (a new page) starts masked, and so does a reload.
  const revealed = new Set<string>();
  const reveal = (operationId: string, block: string): RevealState => {
    const key = `${operationId}/${block}`;
    return {
      get revealed() {
        return revealed.has(key);
      },
      set: (on) => void (on ? revealed.add(key) : revealed.delete(key)),
    };
  };

  const crumbs = h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('a', { href: '/console' }, 'Queues'));
  const { heading, lede, statusCards, callout } = pageTop('Operation', id);
  const result = h('p', { class: 'result', role: 'status' });
  const actions = h('section', { id: 'actions', class: 'panel actions', 'aria-labelledby': 'actions-title' });
  const details = h('div', { class: 'details' });
  const side = h('div', { class: 'col-side' });
  fill(
    main,
    crumbs,
    heading,
    lede,
    statusCards,
    callout,
    h('div', { class: 'layout' }, h('div', { class: 'col-main' }, result, actions, details), side),
  );

  const live = livePage({
    load: async () => {
      const { operation: op, etag } = await api((dx) => dx.operations.getWithETag(id));
      const execution = await api((dx) => dx.executions.get(op.execution_id));
      // A refused action that becomes available with no event (a FAILED waiting for any call to land): look again then.
      const reloadAt = op.resolution_options
        .map((o) => (o.available_at ? Date.parse(o.available_at) : NaN))
        .filter((at) => Number.isFinite(at))
        .sort((a, b) => a - b)[0];
      const shown = () => {
        shownETag = etag;
        // The version is back: the decisions return, and the message that there was none goes (only it: what a decision
        // or an earlier failure said stays until the next one).
        if (result.textContent === MISSING_ETAG) result.textContent = '';
        render(op, execution);
      };
      return { execution, render: shown, focusOperationId: op.id, reloadAt };
    },
    failed: (error) => {
      if (error instanceof VerityNotFoundError) {
        lede.textContent = 'No operation with this id is visible to your key.';
        fill(statusCards);
        actions.hidden = true;
        return;
      }
      if (error instanceof VerityMissingETagError) {
        // No version to decide on: a decision sent from here would be taken on whatever the operation has become.
        actions.hidden = true;
        actionSignature = '';
        result.textContent = MISSING_ETAG;
        return;
      }
      result.textContent = `Could not load the operation: ${problemText(error)}.`;
    },
    // Another operation's event changes nothing here, unless it is one this page has not shown yet.
    quiet: (event, known) =>
      !!event.operation_id &&
      event.operation_id !== id &&
      !event.type.startsWith('execution') &&
      known(event.operation_id),
    side,
  });

  function render(op: OperationDetail, execution: Execution): void {
    document.title = `${op.key} · ${op.status} · Verity review`;
    fill(
      crumbs,
      h('a', { href: '/console' }, 'Queues'),
      ' › ',
      h('a', { href: `/console/executions/${execution.id}` }, 'Execution ', code(execution.id)),
      ' › ',
      h('span', { 'aria-current': 'page' }, written(op.key)),
    );
    fill(heading, 'Operation ', h('span', { class: 'op-key' }, op.key));
    fill(lede, intentAndAgent(execution), h('span', {}, ' · Operation ', code(op.id)));
    fill(
      statusCards,
      statusCard(
        'execution',
        executionBadge(execution.status),
        'Where the agent’s work stands. ',
        h('a', { href: `/console/executions/${execution.id}` }, 'Open the execution'),
      ),
      statusCard(
        'effect',
        effectBadge(op.status, effectMeaning(op, ctx.meaning(op.status))),
        'Whether the effect occurred in the world: ',
        effectMeaning(op, ctx.meaning(op.status)),
        '.',
      ),
    );
    const note = divergence(execution, op);
    callout.hidden = !note;
    callout.className = `callout callout-${note?.tone ?? 'info'}`;
    callout.textContent = note?.text ?? '';

    // The actions are drawn again whenever anything they send or say changes. An approval names its request
    // (`requested_at`): kept from a first one, every click answered that request again, refused each time. A button
    // says what the API does with it (`resolution_options`: a release that grants approval too, since the policy asks
    // for one; when a refused FAILED becomes possible): kept from when the page opened, a reloaded page said otherwise.
    const signature = JSON.stringify([
      op.status,
      op.approval?.state ?? null,
      op.approval?.requested_at ?? null,
      op.irreversible,
      op.retry,
      op.permitted_resolutions,
      op.resolution_options,
      op.recovery_obligation?.evidence_required ?? null,
      op.recovery_obligation?.resolution ?? null,
      op.earlier_attempts,
      ctx.canDecide(),
    ]);
    if (signature !== actionSignature && !busy) {
      actionSignature = signature;
      renderActions(op);
    }
    fill(
      details,
      requestSection(op, reveal),
      op.earlier_attempts.length > 0 ? earlierAttemptsSection(op) : null,
      evidenceSection(op),
      op.recovery_obligation ? obligationSection(op) : null,
      op.approval ? approvalSection(op) : null,
    );
  }

  function renderActions(op: OperationDetail): void {
    actions.hidden = false;
    // What the reviewer was typing survives a re-render of the actions (an option became available, another moved).
    const typed = (id: string) => actions.querySelector<HTMLTextAreaElement>(`#${id}`)?.value ?? '';
    const focused = document.activeElement && actions.contains(document.activeElement) ? document.activeElement.id : '';
    const refocus = () => {
      if (focused) document.getElementById(focused)?.focus();
    };
    const title = h('h2', { id: 'actions-title' }, 'Actions');
    const error = h('p', { class: 'error', role: 'alert' });
    const decidable =
      (op.status === 'PREPARED' && op.approval?.state === 'requested') || op.permitted_resolutions.length > 0;
    if (decidable && ctx.canDecide() === false) {
      // The API refuses this key's decisions (403: an admin's); offering buttons that can only be refused helps nobody.
      fill(
        actions,
        title,
        h(
          'p',
          { id: 'no-decisions' },
          'This operation waits for a decision, but the key you signed in with cannot take it: approvals and ' +
            'resolutions are a reviewer key’s alone. Sign in with a reviewer key to decide.',
        ),
      );
      return;
    }
    if (op.status === 'PREPARED' && op.approval?.state === 'requested') {
      const reason = h('textarea', {
        id: 'decision-reason',
        rows: 3,
        maxlength: 2000,
        'aria-describedby': 'decision-reason-hint',
      });
      reason.value = typed('decision-reason');
      const buttons: HTMLButtonElement[] = [];
      const decide = async (decision: 'approve' | 'deny') => {
        const text = reason.value.trim();
        if (decision === 'deny' && !text) {
          error.textContent = 'Give a reason to deny: it is recorded with the decision.';
          reason.focus();
          return;
        }
        await act(
          buttons,
          error,
          (dx) =>
            // The request this page shows: a decision never answers one asked for since (after a grant of this one
            // was withdrawn as stale), which the reviewer has not seen.
            decision === 'approve'
              ? dx.operations.approve(op.id, {
                  reason: text || undefined,
                  requestedAt: op.approval?.requested_at,
                  ifMatch: shownETag,
                })
              : dx.operations.deny(op.id, { reason: text, requestedAt: op.approval?.requested_at, ifMatch: shownETag }),
          decision === 'approve'
            ? 'Approved. The operation is dispatched next; its effect status updates below.'
            : 'Denied. The operation is cancelled and will never be sent.',
        );
      };
      buttons.push(
        h(
          'button',
          { type: 'button', class: 'primary', id: 'approve', onclick: () => void decide('approve') },
          'Approve',
        ),
        h('button', { type: 'button', class: 'danger', id: 'deny', onclick: () => void decide('deny') }, 'Deny'),
      );
      fill(
        actions,
        title,
        h(
          'p',
          {},
          'The agent asked for approval before this operation is sent. ',
          op.irreversible ? h('strong', {}, 'It cannot be undone once sent.') : null,
        ),
        deniedBefore(op),
        decisionSubject(op, 'What an approval sends'),
        h(
          'form',
          { id: 'approval-form', method: 'post', onsubmit: (event) => event.preventDefault() },
          h('label', { for: 'decision-reason' }, 'Reason for the decision'),
          reason,
          h('p', { id: 'decision-reason-hint', class: 'hint' }, 'Recorded with the decision. Required to deny.'),
          error,
          h('div', { class: 'buttons' }, buttons),
        ),
      );
      refocus();
      return;
    }
    if (op.permitted_resolutions.length > 0) {
      const evidence = h('textarea', {
        id: 'resolution-evidence',
        rows: 4,
        maxlength: 10000,
        required: true,
        'aria-describedby': 'resolution-evidence-hint',
      });
      evidence.value = typed('resolution-evidence');
      const buttons: HTMLButtonElement[] = op.permitted_resolutions.map((status) =>
        h(
          'button',
          {
            type: 'button',
            class:
              status === OperationStatus.VERIFIED ? 'primary' : status === OperationStatus.SENT ? 'warning' : 'danger',
            'data-resolution': status,
            onclick: async () => {
              const text = evidence.value.trim();
              if (!text) {
                error.textContent = 'Describe the evidence first: a resolution without evidence is refused.';
                evidence.focus();
                return;
              }
              await act(
                buttons,
                error,
                (dx) => dx.operations.resolve(op.id, { status, evidence: text }, { ifMatch: shownETag }),
                status === OperationStatus.SENT
                  ? 'Release recorded. The dispatcher sends the operation next.'
                  : `Resolved as ${status}. The evidence is stored with the operation.`,
              );
            },
          },
          `Resolve as ${status}`,
          h('span', { class: 'button-sub' }, optionWhy(op, status)),
        ),
      );
      // Exactly what the API refuses, each with the API's own reason (never a button the API would answer 409 to).
      const forbidden = op.resolution_options.filter((o) => !o.permitted);
      fill(
        actions,
        title,
        decisionSubject(op, 'The operation you resolve'),
        h(
          'form',
          { id: 'resolve-form', method: 'post', onsubmit: (event) => event.preventDefault() },
          h('label', { for: 'resolution-evidence' }, 'Evidence of the real outcome'),
          evidence,
          h(
            'p',
            { id: 'resolution-evidence-hint', class: 'hint' },
            'What shows the real outcome: ',
            op.recovery_obligation
              ? written(op.recovery_obligation.evidence_required)
              : 'evidence of the operation’s real outcome',
            '.',
          ),
          error,
          h('div', { class: 'buttons' }, buttons),
          forbidden.length
            ? h(
                'div',
                { class: 'hint', id: 'not-permitted' },
                'Not permitted for this operation:',
                h(
                  'ul',
                  {},
                  forbidden.map((o) => h('li', { 'data-refused': o.status }, code(o.status), ': ', o.why)),
                ),
              )
            : null,
        ),
      );
      refocus();
      return;
    }
    // A release is a decision already made: nothing more is permitted on the hold, and the dispatcher carries it out.
    const release = op.recovery_obligation?.resolution;
    if (op.status === OperationStatus.MANUAL_REVIEW && release?.status === OperationStatus.SENT) {
      fill(
        actions,
        title,
        h(
          'p',
          { class: 'callout callout-info', id: 'release-recorded' },
          'A release was recorded by ',
          code(release.by),
          ' at ',
          time(release.at, { relative: true }),
          '; the dispatcher sends the operation next. No other resolution is permitted.',
        ),
      );
      return;
    }
    fill(
      actions,
      title,
      h(
        'p',
        { id: 'no-actions' },
        `No reviewer action is permitted while the operation is ${op.status}`,
        op.status === 'PREPARED' && op.approval?.state === 'granted' ? ' (approved; waiting to be dispatched)' : '',
        '. Retry rule: ',
        code(op.retry),
        '.',
      ),
    );
  }

  async function act(
    buttons: HTMLButtonElement[],
    error: HTMLElement,
    call: (dx: Verity) => Promise<unknown>,
    success: string,
  ): Promise<void> {
    busy = true;
    for (const b of buttons) b.disabled = true;
    error.textContent = '';
    try {
      await api(call);
      result.textContent = success;
      ctx.announce(success);
      busy = false;
      actionSignature = '';
      await live.load();
      live.resumeTimeline();
    } catch (e) {
      busy = false;
      for (const b of buttons) b.disabled = false;
      const refusal = !(e instanceof VerityError)
        ? 'The API could not be reached; nothing was changed.'
        : e instanceof VerityPreconditionFailedError
          ? // What the page showed is no longer the operation: the decision was not taken (nothing was written).
            'Refused (412): this operation changed since you opened it — reload: it is shown below as it is now; ' +
            'review it and decide again. Nothing was changed.'
          : `Refused (${e.status}): ${e.detail || e.title}`;
      error.textContent = refusal;
      if (e instanceof VerityError && (e.status === 409 || e.status === 412)) {
        // Someone decided first, or the operation moved: the reload shows where it stands now and may replace the
        // actions (and the message in them), so the refusal — whose decision won — stays in the page's status line.
        await live.load();
        // The decision that won may have come after the timeline's stream ended (an execution past its deadline).
        live.resumeTimeline();
        result.textContent = refusal;
        ctx.announce(refusal);
      }
    }
  }

  void live.load();
  return live.dispose;
}

/**
 * What a decision is about, inside the panel that takes it: the connector, the action and the params that a grant or a
 * release sends. The intent above is the agent's own words about it; the params are what the connector will be given,
 * and a reviewer must not have to scroll past the buttons (on a phone, below the fold) to read them. Masked as the
 * request's params are; the Request section below shows them unmasked on request.
 */
function decisionSubject(op: OperationDetail, title: string): HTMLElement {
  const params = maskSecrets(op.params) as Record<string, unknown>;
  return h(
    'div',
    { class: 'decision-subject', id: 'decision-subject' },
    h('h3', {}, title),
    definitions([
      ['Connector', code(op.connector)],
      ['Action', code(op.action)],
      ['Irreversible', op.irreversible ? 'yes' : 'no'],
      ...Object.entries(params).map(([name, value]): [string, Child] => [
        name,
        // Right-to-left letters lay out the digits after them right to left: also shown in the order it is sent.
        sentCode(typeof value === 'string' ? value : JSON.stringify(value)),
      ]),
    ]),
  );
}

type EarlierAttempt = OperationDetail['earlier_attempts'][number];

/** Who denied an earlier attempt, when and why, in words. */
function denialText(attempt: EarlierAttempt): Child[] {
  return [
    'denied by key ',
    code(attempt.denied_by ?? '—'),
    ' ',
    time(attempt.denied_at, { relative: true }),
    attempt.reason ? [': “', written(attempt.reason), '”'] : ', no reason given',
  ];
}

/**
 * Above an approval's buttons: the same request was denied before (an earlier attempt of this retry), by whom, when and
 * why — a reviewer asked again decides knowing what colleagues decided. Nothing when no earlier attempt was denied.
 */
function deniedBefore(op: OperationDetail): HTMLElement | null {
  const denied = op.earlier_attempts.filter((attempt) => attempt.denied_by !== null);
  if (denied.length === 0) return null;
  return h(
    'div',
    { class: 'callout callout-warn', id: 'denied-before', role: 'note' },
    h(
      'p',
      {},
      `This is a retry of a request reviewers denied ${denied.length === 1 ? 'once' : `${denied.length} times`} before:`,
    ),
    h(
      'ul',
      {},
      denied.map((attempt) =>
        h(
          'li',
          {},
          link(`/console/operations/${attempt.operation_id}`, code(attempt.operation_id)),
          ' ',
          denialText(attempt),
        ),
      ),
    ),
  );
}

/** The earlier attempts of this request (its chain of retries), nearest first, with how each ended. */
function earlierAttemptsSection(op: OperationDetail): HTMLElement {
  return section(
    'earlier-attempts',
    'Earlier attempts',
    h(
      'ol',
      {},
      op.earlier_attempts.map((attempt) =>
        h(
          'li',
          { 'data-operation-id': attempt.operation_id },
          link(`/console/operations/${attempt.operation_id}`, code(attempt.operation_id)),
          ' ',
          code(attempt.status),
          attempt.terminal_reason ? [' (', code(attempt.terminal_reason), ')'] : null,
          attempt.denied_by !== null ? [' — ', denialText(attempt)] : null,
        ),
      ),
    ),
  );
}

function requestSection(op: OperationDetail, reveal: (operationId: string, block: string) => RevealState): HTMLElement {
  return section(
    'request',
    'Request',
    definitions([
      ['Connector', code(op.connector)],
      ['Action', code(op.action)],
      ['Key', sentCode(op.key)],
      ['Irreversible', op.irreversible ? 'yes' : 'no'],
      ['Requires approval', op.requires_approval ? 'yes' : 'no'],
      [
        'Verification',
        op.verification_method
          ? code(op.verification_method)
          : h('span', {}, 'none: this connector cannot read back, so only a human with evidence can make it VERIFIED'),
      ],
      ['Depends on', op.depends_on.length ? op.depends_on.join(', ') : '—'],
      ['Times sent', String(op.attempt)],
      ['Retry rule', code(op.retry)],
      op.terminal_reason ? ['Reason', code(op.terminal_reason)] : null,
      op.no_change_required ? ['No change required', 'the source already held the requested state'] : null,
      ['Sent at', time(op.sent_at)],
      ['Acknowledged at', time(op.acknowledged_at)],
      // The provider's rejection that came back after the send was marked UNKNOWN: a person's VERIFIED is refused.
      op.rejected_at
        ? [
            'Rejected late',
            h(
              'span',
              {},
              time(op.rejected_at),
              ' — ',
              op.rejection?.detail ? written(op.rejection.detail) : 'rejected by the provider',
            ),
          ]
        : null,
      op.retry_of ? ['Retry of', link(`/console/operations/${op.retry_of}`, code(op.retry_of))] : null,
    ]),
    h('h3', {}, 'Params ', h('span', { class: 'muted' }, '(secret-looking values masked)')),
    revealableJson(op.params, 'Params, secret-looking values masked', reveal(op.id, 'params')),
    op.expected_state
      ? [h('h3', {}, 'Expected state'), revealableJson(op.expected_state, 'Expected state', reveal(op.id, 'expected'))]
      : null,
  );
}

function evidenceSection(op: OperationDetail): HTMLElement {
  const evidence = op.evidence;
  if (!evidence) return section('evidence', 'Evidence', h('p', { class: 'muted' }, 'Nothing has been read back yet.'));
  const { method, source, read_at, record, found, resolution, ...rest } = evidence as Record<string, unknown> & {
    resolution?: { status: string; evidence: string; by: string; at: string };
  };
  return section(
    'evidence',
    'Evidence',
    definitions([
      ['Method', method ? code(String(method)) : '—'],
      typeof source === 'string' ? ['Read from', sentCode(maskString(source))] : null,
      typeof read_at === 'string' ? ['Read at', time(read_at, { relative: true })] : null,
      found !== undefined || record !== undefined ? ['Found at the source', found === false ? 'no' : 'yes'] : null,
    ]),
    record !== undefined ? [h('h3', {}, 'What was read back'), json(record, 'Record read back')] : null,
    resolution
      ? [
          h('h3', {}, 'Human resolution'),
          definitions([
            ['Resolved as', code(resolution.status)],
            ['By key', code(resolution.by)],
            ['At', time(resolution.at, { relative: true })],
          ]),
          h('blockquote', { class: 'resolution-evidence' }, maskString(resolution.evidence)),
        ]
      : null,
    Object.keys(rest).length ? [h('h3', {}, 'More'), json(rest, 'More evidence')] : null,
  );
}

function obligationSection(op: OperationDetail): HTMLElement {
  const o = op.recovery_obligation!;
  const open = op.status === OperationStatus.MANUAL_REVIEW;
  const overdue = open && !o.resolution && new Date(o.due_at).getTime() < Date.now();
  return factsSection('obligation', open ? 'Recovery obligation' : 'Recovery obligation (closed)', [
    ['Reason', code(o.reason)],
    ['Owner', written(o.owner)],
    ['Evidence required', written(o.evidence_required)],
    // While held: what the API accepts now (a FAILED may still wait for a call to land), not the list at hold time.
    // Closed: none — the hold was decided, and nothing listed at hold time can be taken any more.
    ['Permitted actions', (open ? op.permitted_resolutions : []).join(', ') || '—'],
    [
      open ? 'Due' : 'Was due',
      h(
        'span',
        {},
        time(o.due_at),
        open
          ? [' ', h('span', { class: overdue ? 'tag tag-bad' : 'muted' }, overdue ? 'overdue' : relative(o.due_at))]
          : null,
      ),
    ],
    [
      'Escalation',
      open || o.escalated_at
        ? escalationText(o.escalated_at, o.escalation_target, Boolean(o.resolution))
        : 'not escalated',
    ],
    o.resolution
      ? [
          'Resolution',
          h('span', {}, code(o.resolution.status), ' by ', code(o.resolution.by), ' ', time(o.resolution.at)),
        ]
      : null,
  ]);
}

function approvalSection(op: OperationDetail): HTMLElement {
  const a = op.approval!;
  return factsSection('approval', 'Approval', [
    ['State', h('span', { class: `tag tag-${a.state}` }, a.state)],
    ['Requested', time(a.requested_at, { relative: true })],
    a.decided_at ? ['Decided', time(a.decided_at, { relative: true })] : null,
    a.decided_by ? ['Decided by key', code(a.decided_by)] : null,
    a.reason ? ['Reason', written(a.reason)] : null,
    a.expires_at ? ['Grant expires', time(a.expires_at, { relative: true })] : null,
  ]);
}
