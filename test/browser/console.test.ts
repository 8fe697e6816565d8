import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Browser, Page, chromium } from 'playwright-core';
import { createApiKey, revokeApiKey } from '@verity/persistence';
import { charge, http, sms, submission, unique } from '../support/http';
import { DEMO, Stack, waitFor } from '../support/stack';
import type { Execution, ResolutionOption } from '@verity/sdk';

const CHROMIUM = '/usr/bin/chromium';
const SHOTS = join(__dirname, '..', '..', 'test-artifacts', 'screenshots');
const SIZES = [
  { name: 'desktop', width: 1280, height: 800 },
  { name: 'mobile', width: 390, height: 844 },
] as const;
const SLOW = 30_000;
// Each step waits at most SLOW; a test has several, and the machine is shared.
jest.setTimeout(120_000);

interface Op {
  id: string;
  execution_id: string;
  status: string;
  approval: { state: string; reason?: string } | null;
  evidence: Record<string, unknown> | null;
  permitted_resolutions?: string[];
  resolution_options?: ResolutionOption[];
  recovery_obligation: { permitted_actions: string[] } | null;
}

const chromiumMissing = !existsSync(CHROMIUM);
if (chromiumMissing) {
  // A missing browser is a failed run, not a quiet skip: the console would go untested while `npm test` stays green.
  it('runs the review console in headless Chromium', () => {
    throw new Error(`${CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium; .ci/run does it)`);
  });
}

/** The review console, driven in real headless Chromium against the whole stack. */
(chromiumMissing ? describe.skip : describe)('review console (headless Chromium)', () => {
  let stack: Stack;
  let browser: Browser;
  let page: Page;
  const problems: string[] = [];
  const urls: string[] = [];
  const authorized: string[] = [];

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    stack = await Stack.start({ label: 'console' });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-background-networking',
        '--disable-quic',
        '--no-first-run',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    page = await context.newPage();
    page.setDefaultTimeout(SLOW);
    page.on('pageerror', (error) => problems.push(`pageerror: ${error.message}`));
    page.on('console', (message) => {
      if (message.type() === 'error') problems.push(`console: ${message.text()}`);
    });
    page.on('request', (request) => {
      urls.push(request.url());
      if (request.headers().authorization) authorized.push(request.url());
    });
  }, 90_000);

  afterAll(async () => {
    await browser?.close();
    await stack?.stop();
  });

  const consoleUrl = (path = '') => `${stack.apiUrl}/console${path}`;

  /** What a reviewer sees first at each size, and the whole page. */
  async function shoot(name: string): Promise<void> {
    for (const size of SIZES) {
      await page.setViewportSize({ width: size.width, height: size.height });
      // Two animation frames: the new layout has been painted before the screenshot.
      await page.evaluate('new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve)))');
      await page.screenshot({ path: join(SHOTS, `${name}-${size.name}.png`) });
      await page.screenshot({ path: join(SHOTS, `${name}-${size.name}-full.png`), fullPage: true });
    }
    await page.setViewportSize({ width: 1280, height: 800 });
  }

  async function submit(operations: unknown[], extra: Record<string, unknown> = {}): Promise<Execution> {
    const created = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission(operations, extra),
    });
    expect(created.status).toBe(201);
    return created.body;
  }

  async function operation(id: string): Promise<Op> {
    return (await http<Op>(stack.apiUrl, 'GET', `/v1/operations/${id}`, { key: DEMO.reviewer })).body;
  }

  async function awaitingApproval(execution: Execution): Promise<Op> {
    return waitFor(
      () => operation(execution.operations[0].id),
      (op) => op.status === 'PREPARED' && op.approval?.state === 'requested',
      SLOW,
    );
  }

  const effectBadge = () => page.locator('.status-card-effect [data-kind="operation"]');
  const executionBadge = () => page.locator('.status-card-execution [data-kind="execution"]');

  it('serves the shell with a strict CSP, no inline script, and client routes', async () => {
    const shell = await fetch(consoleUrl());
    expect(shell.status).toBe(200);
    const csp = shell.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("default-src 'none'");
    expect(csp).not.toContain('unsafe-inline');
    const html = await shell.text();
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
    expect(html).not.toMatch(/\sstyle=|<style/);
    const script = await fetch(consoleUrl('/app.js'));
    expect(script.status).toBe(200);
    expect(script.headers.get('content-type')).toContain('javascript');
    const stylesheet = await fetch(consoleUrl('/app.css'));
    expect(stylesheet.status).toBe(200);
    expect(stylesheet.headers.get('content-type')).toContain('text/css');
    expect(csp).toContain("style-src 'self'");
    expect((await fetch(consoleUrl('/operations/op_abc'))).status).toBe(200);
    expect((await fetch(consoleUrl('/executions/exe_abc'))).status).toBe(200);
    expect((await fetch(consoleUrl('/nothing/here'))).status).toBe(404);
  });

  it('keeps the review queues to the reviewer role', async () => {
    expect((await http(stack.apiUrl, 'GET', '/v1/review/approvals')).status).toBe(401);
    expect((await http(stack.apiUrl, 'GET', '/v1/review/approvals', { key: DEMO.agent })).status).toBe(403);
    expect((await http(stack.apiUrl, 'GET', '/v1/review/manual-reviews', { key: 'wrong-key' })).status).toBe(401);
    const ok = await http<{ data: unknown[]; total: number }>(stack.apiUrl, 'GET', '/v1/review/approvals', {
      key: DEMO.reviewer,
    });
    expect(ok.status).toBe(200);
    expect(ok.body).toMatchObject({ data: expect.any(Array), total: expect.any(Number) });
    expect((await http(stack.apiUrl, 'GET', '/v1/review/approvals?limit=0', { key: DEMO.reviewer })).status).toBe(400);
    expect((await http(stack.apiUrl, 'GET', '/v1/review/approvals?nope=1', { key: DEMO.reviewer })).status).toBe(400);
  });

  it('refuses a wrong key and an agent key, and keeps nothing', async () => {
    await page.goto(consoleUrl());
    await page.getByLabel('Reviewer API key').fill('wrong-key');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await expectText('#signin-error', /refused: it is unknown or has been revoked/);
    expect(await page.evaluate(() => sessionStorage.length)).toBe(0);
    await shoot('01-sign-in-refused');

    await page.getByLabel('Reviewer API key').fill(DEMO.agent);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await expectText('#signin-error', /does not have the reviewer role/);
    expect(await page.evaluate(() => sessionStorage.length)).toBe(0);
    await expect(page.locator('#sign-out').count()).resolves.toBe(0);
  });

  it('signs in with the keyboard alone; the key stays in session storage', async () => {
    await page.goto(consoleUrl());
    // Focus starts in the key field, so typing and Enter are enough.
    await page.locator('#api-key:focus').waitFor();
    await page.keyboard.type(DEMO.reviewer);
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { level: 1, name: 'Review queues' }).waitFor();
    expect(await page.evaluate(() => sessionStorage.getItem('verity.console.key'))).toBe(DEMO.reviewer);
    await page.locator('#count-approvals').filter({ hasText: /^\d+$/ }).waitFor();
  });

  let approvedExecution: Execution;

  it('shows a new approval live, approves it, and watches the effect reach VERIFIED without a reload', async () => {
    const before = Number(await page.locator('#count-approvals').textContent());
    await page.evaluate("window.marker = 'no-reload'");
    const reference = unique('order');
    approvedExecution = await submit([charge(reference, { requires_approval: true })], {
      intent: `Charge ${reference} after a human approves`,
      criteria: [{ key: 'paid', operation: 'charge', expect_status: 'VERIFIED' }],
    });
    const opId = approvedExecution.operations[0].id;
    await awaitingApproval(approvedExecution);
    const card = page.locator(`#approvals [data-operation-id="${opId}"]`);
    await card.waitFor();
    await expectText('#count-approvals', String(before + 1));
    await expectText('#nav-count-approvals', /^\d+$/);

    await card.getByRole('link').click();
    await page.getByRole('heading', { level: 1, name: /Operation/ }).waitFor();
    expect(page.url()).toBe(consoleUrl(`/operations/${opId}`));
    await page.locator('#approve').waitFor();
    expect(await page.locator('#deny').isVisible()).toBe(true);
    expect(await page.locator('[data-resolution]').count()).toBe(0);
    await expectText('.status-card-execution .badge-label', 'Execution');
    await expectText('.status-card-effect .badge-label', 'Operation effect');
    expect(await effectBadge().getAttribute('data-status')).toBe('PREPARED');
    expect(await executionBadge().getAttribute('data-status')).toBe('waiting_for_approval');
    await page.locator('#timeline .event').first().waitFor();
    await shoot('03-operation-awaiting-approval');

    await page
      .getByRole('textbox', { name: 'Reason for the decision' })
      .fill('Order verified by phone with the customer');
    await page.locator('#approve').click();
    await page.locator('.status-card-effect [data-status="VERIFIED"]').waitFor({ timeout: SLOW });
    await page.locator('#timeline .event[data-to="VERIFIED"]').waitFor();
    expect(await page.evaluate('window.marker')).toBe('no-reload');
    const op = await operation(opId);
    expect(op.status).toBe('VERIFIED');
    expect(op.approval).toMatchObject({ state: 'granted', reason: 'Order verified by phone with the customer' });
    await page.locator('#evidence').getByText('What was read back').waitFor();
    await expectText('#evidence', /\/v1\/charges\?reference=/);
    expect(await page.locator('#approve').count()).toBe(0);
    await expectText('#no-actions', /No reviewer action is permitted while the operation is VERIFIED/);
    await page.locator('.status-card-execution [data-status="completed"]').waitFor({ timeout: SLOW });
    await shoot('04-operation-verified');
  });

  it('denies with a reason, and not without one', async () => {
    const execution = await submit([charge(unique('order'), { requires_approval: true })]);
    const opId = execution.operations[0].id;
    await awaitingApproval(execution);
    await page.getByLabel('Open by id').fill(opId);
    await page.getByLabel('Open by id').press('Enter');
    await page.locator('#deny').waitFor();
    await page.locator('#deny').click();
    await expectText('#approval-form .error', /Give a reason to deny/);
    expect((await operation(opId)).approval?.state).toBe('requested');
    // Keyboard only: type the reason, Tab past Approve to Deny, press Enter.
    await page.getByRole('textbox', { name: 'Reason for the decision' }).focus();
    await page.keyboard.type('Amount does not match the invoice');
    await page.keyboard.press('Tab');
    expect(await page.evaluate('document.activeElement.id')).toBe('approve');
    await page.keyboard.press('Tab');
    expect(await page.evaluate('document.activeElement.id')).toBe('deny');
    await page.keyboard.press('Enter');
    await page.locator('.status-card-effect [data-status="CANCELLED"]').waitFor();
    expect((await operation(opId)).approval).toMatchObject({
      state: 'denied',
      reason: 'Amount does not match the invoice',
    });
  });

  it('resolves a sent SMS held in MANUAL_REVIEW with evidence; SENT and CANCELLED are not offered', async () => {
    const pending = await submit([charge(unique('order'), { requires_approval: true })], {
      intent: 'Refund review left pending for the screenshot',
    });
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/messages', fault: 'timeout_after_commit', probability: 1, count: 1 }],
    });
    const clientRef = unique('sms');
    const execution = await submit(
      [
        sms(clientRef, {
          params: { to: '+15550100', body: 'Your code is {{secret:otp_code}}', client_ref: clientRef },
        }),
      ],
      { intent: 'Text the customer their one-time code' },
    );
    const opId = execution.operations[0].id;
    // FAILED is offered once no call of the SMS can still reach the provider (until then only VERIFIED is).
    const held = await waitFor(
      () => operation(opId),
      (op) => op.status === 'MANUAL_REVIEW' && Boolean(op.permitted_resolutions?.includes('FAILED')),
      SLOW,
    );
    expect(held.permitted_resolutions).toEqual(['VERIFIED', 'FAILED']);
    await awaitingApproval(pending);
    const queue = await http<{ data: { operation: { id: string; params: { body: string } } }[] }>(
      stack.apiUrl,
      'GET',
      `/v1/review/manual-reviews?connector=sandbox.sms&q=${opId}`,
      { key: DEMO.reviewer },
    );
    expect(queue.body.data.map((i) => i.operation.id)).toEqual([opId]);
    expect(queue.body.data[0].operation.params.body).not.toContain('otp_code');

    await page.getByRole('link', { name: /Manual reviews/ }).click();
    const card = page.locator(`#manual-reviews [data-operation-id="${opId}"]`);
    await card.waitFor();
    await expectText(`#manual-reviews [data-operation-id="${opId}"]`, /CONNECTOR_ERROR/);
    await expectText(`#manual-reviews [data-operation-id="${opId}"]`, /not escalated/);
    await page.locator(`#approvals [data-operation-id="${pending.operations[0].id}"]`).waitFor();
    await shoot('02-queues');

    await page.goto(consoleUrl(`/executions/${execution.id}`));
    await page.locator('.status-card-execution [data-status="completed"]').waitFor({ timeout: SLOW });
    await expectText('.status-card-effect [data-kind="effects"]', /unknown/);
    await shoot('06-execution-completed-effect-unknown');

    await page.locator(`#operations [data-operation-id="${opId}"] a`).click();
    await page.locator('[data-resolution="VERIFIED"]').waitFor();
    expect(await page.locator('[data-resolution="FAILED"]').count()).toBe(1);
    expect(await page.locator('[data-resolution="SENT"]').count()).toBe(0);
    expect(await page.locator('[data-resolution="CANCELLED"]').count()).toBe(0);
    // Each refused action is listed with the API's reason (it was already sent).
    await expectText('#not-permitted', /SENT: it was already sent[\s\S]*CANCELLED: it was already sent/);
    expect(await executionBadge().getAttribute('data-status')).toBe('completed');
    expect(await effectBadge().getAttribute('data-status')).toBe('MANUAL_REVIEW');
    await expectText('.callout', /may or may not have happened/);
    await expectText('#request', /\{\{secret:••••••\}\}/);
    expect(await page.locator('#request').textContent()).not.toContain('otp_code');
    await expectText('#obligation', /CONNECTOR_ERROR/);
    await shoot('05-operation-manual-review');

    await page.locator('[data-resolution="VERIFIED"]').click();
    await expectText('#resolve-form .error', /Describe the evidence first/);
    const evidence = 'Provider dashboard shows message SM-1234 delivered at 10:02 to +15550100';
    await page.getByRole('textbox', { name: 'Evidence of the real outcome' }).fill(evidence);
    await page.locator('[data-resolution="VERIFIED"]').click();
    await page.locator('.status-card-effect [data-status="VERIFIED"]').waitFor();
    await expectText('#evidence blockquote', evidence);
    await page.locator('#timeline .event[data-to="VERIFIED"]').waitFor();
    // The obligation is closed: it lists no action (it listed VERIFIED, FAILED — those of the hold — until 2026-12-03).
    await expectText('#obligation-title', /Recovery obligation \(closed\)/);
    expect(await page.locator('#obligation dt:text-is("Permitted actions") + dd').textContent()).toBe('—');
    const resolved = await operation(opId);
    expect(resolved.status).toBe('VERIFIED');
    expect(resolved.recovery_obligation!.permitted_actions).toEqual([]);
    expect(resolved.evidence).toMatchObject({ resolution: { status: 'VERIFIED', evidence } });
    expect((await stack.effects()).messages[clientRef].count).toBe(1);
    await shoot('07-operation-resolved');
  });

  it('offers FAILED for a sent SMS only once no call can still land, on its own, without a reload', async () => {
    // The send is dropped: UNKNOWN at once, held (an SMS cannot be read back) while the page is already open.
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/messages', fault: 'drop_before_commit', probability: 1, count: 1 }],
    });
    const execution = await submit([sms(unique('sms-wait'))]);
    const opId = execution.operations[0].id;
    await page.goto(consoleUrl(`/operations/${opId}`));
    await page.locator('.status-card-effect [data-status="MANUAL_REVIEW"]').waitFor({ timeout: SLOW });
    await page.locator('[data-resolution="VERIFIED"]').waitFor();
    // Refused first, with the reason and the time (the bound is seconds after the hold; the page follows events).
    const waiting = (await operation(opId)).resolution_options!.find((o) => o.status === 'FAILED')!;
    expect(waiting).toMatchObject({ permitted: false, available_at: expect.any(String) });
    expect(await page.locator('[data-resolution="FAILED"]').count()).toBe(0);
    await expectText('#not-permitted', /FAILED: a call made for it may still reach the provider until/);
    const navigations: string[] = [];
    page.on('framenavigated', (frame) => navigations.push(frame.url()));
    // Then offered, by the page's own reload at `available_at`: no event announces it, nobody reloads by hand.
    await page.locator('[data-resolution="FAILED"]').waitFor({ timeout: SLOW });
    expect(Date.now()).toBeGreaterThanOrEqual(Date.parse(waiting.available_at!));
    expect(navigations).toEqual([]);
  });

  it('keeps the evidence a reviewer is typing when the page re-renders its actions (FAILED becomes available)', async () => {
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/messages', fault: 'drop_before_commit', probability: 1, count: 1 }],
    });
    const execution = await submit([sms(unique('sms-typing'))]);
    const opId = execution.operations[0].id;
    await page.goto(consoleUrl(`/operations/${opId}`));
    await page.locator('[data-resolution="VERIFIED"]').waitFor({ timeout: SLOW });
    expect(await page.locator('[data-resolution="FAILED"]').count()).toBe(0);
    const typed = 'Called the carrier: the message was never delivered (ticket 4711)';
    await page.locator('#resolution-evidence').fill(typed);
    // The page reloads itself when FAILED becomes available and draws the actions again, with a new form.
    await page.locator('[data-resolution="FAILED"]').waitFor({ timeout: SLOW });
    expect(await page.locator('#resolution-evidence').inputValue()).toBe(typed);
  });

  it('offers SENT and CANCELLED for a never-sent operation held in MANUAL_REVIEW', async () => {
    const execution = await submit([charge(unique('order'), { expected_state: { charged: true } })]);
    const opId = execution.operations[0].id;
    const held = await waitFor(
      () => operation(opId),
      (op) => op.status === 'MANUAL_REVIEW',
      SLOW,
    );
    await page.goto(consoleUrl(`/operations/${opId}`));
    await page.locator('#resolve-form').waitFor();
    for (const status of held.permitted_resolutions ?? []) {
      expect(await page.locator(`[data-resolution="${status}"]`).count()).toBe(1);
    }
    expect(held.permitted_resolutions).toEqual(expect.arrayContaining(['SENT', 'CANCELLED']));
    expect(await page.locator('[data-resolution]').count()).toBe(held.permitted_resolutions?.length);
  });

  it('says a release is recorded and waits for the dispatcher, rather than that no action is permitted', async () => {
    const execution = await submit([charge(unique('order'), { expected_state: { charged: true } })]);
    const opId = execution.operations[0].id;
    await waitFor(
      () => operation(opId),
      (op) => op.status === 'MANUAL_REVIEW',
      SLOW,
    );
    // No dispatcher carries the release out while the page shows it.
    for (const app of stack.running('dispatcher')) await stack.kill(app, 'SIGTERM');
    try {
      const released = await http(stack.apiUrl, 'POST', `/v1/operations/${opId}/resolve`, {
        key: DEMO.reviewer,
        body: { status: 'SENT', evidence: 'the customer confirmed the order' },
      });
      expect(released.status).toBe(200);
      await page.goto(consoleUrl(`/operations/${opId}`));
      await page.locator('#release-recorded').waitFor();
      await expectText('#release-recorded', /A release was recorded .*; the dispatcher sends the operation next/);
      expect(await page.locator('[data-resolution]').count()).toBe(0);
      expect(await page.locator('#no-actions').count()).toBe(0);
    } finally {
      await stack.startApp('dispatcher');
    }
    // Carried out once a dispatcher runs: the page follows it and the note goes.
    await page.locator('#release-recorded').waitFor({ state: 'detached' });
  });

  it('keeps a 409 in view on a stale page: another reviewer decided first, and the page still says so once reloaded', async () => {
    const execution = await submit([charge(unique('order'), { expected_state: { charged: true } })]);
    const opId = execution.operations[0].id;
    await waitFor(
      () => operation(opId),
      (op) => op.status === 'MANUAL_REVIEW',
      SLOW,
    );
    // No live updates for this page: the reviewer acts on what was loaded, as on a page left open over a flaky network.
    await page.route('**/stream', (route) => route.abort());
    const logged = problems.length;
    try {
      await page.goto(consoleUrl(`/operations/${opId}`));
      await page.locator('[data-resolution="SENT"]').waitFor();
      const other = await http(stack.apiUrl, 'POST', `/v1/operations/${opId}/resolve`, {
        key: DEMO.reviewer,
        body: { status: 'CANCELLED', evidence: 'the customer withdrew the order' },
      });
      expect(other.status).toBe(200);
      await page.locator('#resolution-evidence').fill('the customer confirmed the order');
      await page.locator('[data-resolution="SENT"]').click();
      // The 409 reloads the page: the operation is CANCELLED and no action is left, and the refusal is still shown.
      await page.locator('.status-card-effect [data-status="CANCELLED"]').waitFor();
      await page.locator('#no-actions').waitFor();
      await expectText('main', /Refused \(409\): the operation was already resolved as CANCELLED/);
    } finally {
      await page.unroute('**/stream');
      // Chromium logs the aborted streams and the 409 this test provokes as console errors: expected here, not elsewhere.
      const mine = problems.splice(logged);
      problems.push(...mine.filter((p) => !/net::ERR_FAILED|status of 409/.test(p)));
    }
  });

  it('after a 409, the timeline of an execution past its deadline shows the decision that won', async () => {
    // Completed at once (the hold is the end of its automatic life); past its deadline, its stream ends "deadline".
    const execution = await submit([charge(unique('order'), { expected_state: { charged: true } })], {
      deadline_seconds: 2,
    });
    const opId = execution.operations[0].id;
    await waitFor(
      () => operation(opId),
      (op) => op.status === 'MANUAL_REVIEW',
      SLOW,
    );
    const deadline = Date.parse(execution.deadline_at);
    await waitFor(
      async () => Date.now(),
      (now) => now > deadline,
      SLOW,
    );
    let loads = 0;
    const counted = (response: { url(): string }) => {
      if (response.url().endsWith(`/v1/operations/${opId}`)) loads += 1;
    };
    page.on('response', counted);
    await page.goto(consoleUrl(`/operations/${opId}`));
    await page.locator('.stream-state[data-state="ended"]').waitFor();
    await page.locator('[data-resolution="SENT"]').waitFor();
    // The history the stream replayed reloads the page once; the other reviewer decides after that, so this page is stale.
    await waitFor(
      async () => loads,
      (n) => n >= 2,
      SLOW,
    );
    page.off('response', counted);
    const other = await http(stack.apiUrl, 'POST', `/v1/operations/${opId}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'CANCELLED', evidence: 'the customer withdrew the order' },
    });
    expect(other.status).toBe(200);
    await page.locator('#resolution-evidence').fill('the customer confirmed the order');
    const logged = problems.length;
    await page.locator('[data-resolution="SENT"]').click();
    await page.locator('#no-actions').waitFor();
    // The other reviewer's decision is in the timeline too, not only in the reloaded page.
    await page.locator('#timeline .event[data-type="operation.resolved"]').waitFor();
    await page.locator('#timeline .event[data-to="CANCELLED"]').waitFor();
    // Chromium logs the 409 this test provokes as a console error: expected here, not elsewhere.
    problems.push(...problems.splice(logged).filter((p) => !/status of 409/.test(p)));
  });

  it('never offers "no effect exists" for a charge the provider showed (INTEGRITY_MISMATCH), and says why', async () => {
    await stack.setFaults({ read_fault: 'amount_mismatch' });
    const execution = await submit([charge(unique('order'))]);
    const opId = execution.operations[0].id;
    const held = await waitFor(
      () => operation(opId),
      (op) => op.status === 'MANUAL_REVIEW',
      SLOW,
    ).finally(() => stack.setFaults({ read_fault: null }));
    expect(held.permitted_resolutions).toEqual(['VERIFIED']);
    await page.goto(consoleUrl(`/operations/${opId}`));
    await page.locator('[data-resolution="VERIFIED"]').waitFor();
    expect(await page.locator('[data-resolution]').count()).toBe(1);
    expect(await page.locator('[data-resolution="FAILED"]').count()).toBe(0);
    await expectText('#not-permitted [data-refused="FAILED"]', /a record of this effect is on file/);
    await expectText('#not-permitted [data-refused="FAILED"]', /cannot be marked as not having happened/);
    await shoot('09-operation-integrity-mismatch');
  });

  it('shows an execution: its operations, effects summary and criteria verdicts', async () => {
    await page.goto(consoleUrl(`/executions/${approvedExecution.id}`));
    await page.locator('.status-card-execution [data-status="completed"]').waitFor();
    await expectText('.status-card-effect [data-kind="effects"]', /all verified/);
    await expectText(`#operations [data-operation-id="${approvedExecution.operations[0].id}"]`, /VERIFIED/);
    await page.locator('#criteria [data-criterion="paid"] [data-verdict="pass"]').waitFor();
    await page.locator('#timeline .event').first().waitFor();
    await page.locator('#criteria .event-link').first().click();
    expect(page.url()).toContain(`/console/executions/${approvedExecution.id}#evt_`);
    await page.locator('#timeline .event:target').waitFor();
    await shoot('08-execution-all-verified');
  });

  /** A text as written, without its bidi override: what the API takes now. */
  const withoutOverride = (text: string) => text.replace(/\u202e/g, '');

  /**
   * An execution's agent_id and intent, written without their override, given it on the row, as an execution stored
   * before the API refused them holds it (e2e agent-text-hidden): what is checked here is how the console shows them.
   */
  async function agentTextAsBefore(executionId: string, text: { agent_id: string; intent: string }) {
    await stack.db.dataSource.query(`UPDATE executions SET agent_id = $2, intent = $3 WHERE id = $1`, [
      executionId,
      text.agent_id,
      text.intent,
    ]);
  }

  it('isolates what an agent wrote: a right-to-left override cannot reorder the console text around it', async () => {
    const written = { agent_id: 'agent\u202eDEIFIREV', intent: 'Charge \u202edeifirev si ti' };
    const execution = await submit([charge(unique('order'))], {
      agent_id: withoutOverride(written.agent_id),
      intent: withoutOverride(written.intent),
    });
    await agentTextAsBefore(execution.id, written);
    await page.goto(consoleUrl(`/executions/${execution.id}`));
    await page.locator('q', { hasText: 'Charge' }).waitFor();
    await page.locator('code', { hasText: 'agent' }).first().waitFor();
    // Found and measured in one turn of the page's own script: a live update re-renders the page at any time, and an
    // element replaced between finding it and measuring it has no computed style. (This file has no DOM types.)
    const styles = await page.evaluate(() => {
      type El = { textContent: string | null };
      const doc = (globalThis as unknown as { document: { querySelectorAll(s: string): Iterable<El> } }).document;
      const view = globalThis as unknown as { getComputedStyle(e: El): { unicodeBidi: string } };
      const first = (selector: string, text: string) =>
        [...doc.querySelectorAll(selector)].find((e) => e.textContent?.includes(text));
      return [first('q', 'Charge'), first('code', 'agent')].map((e) =>
        e ? view.getComputedStyle(e).unicodeBidi : null,
      );
    });
    expect(styles).toEqual(['isolate', 'isolate']);
  });

  /**
   * For each string, every text of the page that shows it, and the element that isolates it: the nearest one whose
   * computed unicode-bidi isolates (null: none does), with that element's tag and whole text. Found and measured in one
   * turn of the page's own script (a live re-render may replace an element between two turns).
   */
  async function isolationOf(strings: string[]) {
    const found = await page.evaluate((wanted: string[]) => {
      type El = { tagName: string; className: string; textContent: string | null; parentElement: El | null };
      type TextNode = { data: string; parentElement: El | null };
      const doc = (
        globalThis as unknown as {
          document: { body: unknown; createTreeWalker(root: unknown, show: number): { nextNode(): TextNode | null } };
        }
      ).document;
      const view = globalThis as unknown as { getComputedStyle(e: El): { unicodeBidi: string } };
      const found: Record<string, { tag: string | null; text: string | null }[]> = {};
      for (const text of wanted) found[text] = [];
      const walker = doc.createTreeWalker(doc.body, 4 /* NodeFilter.SHOW_TEXT */);
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        for (const text of wanted.filter((w) => node!.data.includes(w))) {
          let el = node.parentElement;
          while (el && !['isolate', 'isolate-override', 'plaintext'].includes(view.getComputedStyle(el).unicodeBidi)) {
            el = el.parentElement;
          }
          // A string of a JSON block is isolated on its own: `span.json-string`.
          const tag = el ? el.tagName.toLowerCase() + (el.className === 'json-string' ? '.json-string' : '') : null;
          found[text].push({ tag, text: el ? el.textContent : null });
        }
      }
      return found;
    }, strings.map(seen));
    // Keyed by the text as written, found as the console shows it.
    return Object.fromEntries(strings.map((text) => [text, found[seen(text)]]));
  }

  /**
   * A text as the console shows it: a bidi control written by others as its escape (`\u202e`), so it reorders nothing
   * even inside its own isolate, where "Charge \u202Edeifirev si ti" read "Charge it is verified".
   */
  const seen = (text: string) => text.replace(/\u202e/g, '\\u202e');

  /** Each text, written without its override, given it back on the operation's rows and events (stored before the rule). */
  async function storedAsBefore(operationId: string, texts: string[]) {
    for (const text of texts) {
      const args = [operationId, withoutOverride(text), text];
      await stack.db.dataSource.query(
        `UPDATE operations SET approval = replace(approval::text, $2, $3)::jsonb,
                obligation = replace(obligation::text, $2, $3)::jsonb, evidence = replace(evidence::text, $2, $3)::jsonb
          WHERE id = $1`,
        args,
      );
      // The log is append-only (a trigger): this test's own database sets it aside for the one rewrite.
      await stack.db.dataSource.transaction(async (tx) => {
        await tx.query('ALTER TABLE events DISABLE TRIGGER USER');
        await tx.query(`UPDATE events SET data = replace(data::text, $2, $3)::jsonb WHERE operation_id = $1`, args);
        await tx.query('ALTER TABLE events ENABLE TRIGGER USER');
      });
    }
  }

  /** The page holds no bidi override as it is: each was shown as its escape. */
  async function expectNoRawOverride() {
    const raw = await page.evaluate(
      () =>
        (globalThis as unknown as { document: { body: { textContent: string | null } } }).document.body.textContent ??
        '',
    );
    expect(raw.includes('\u202e')).toBe(false);
  }

  /** Isolated on its own: the isolating element holds exactly it (in an event's JSON details, exactly its JSON string). */
  function expectIsolated(shown: { tag: string | null; text: string | null }, text: string) {
    if (shown.tag === 'span.json-string') expect(shown.text).toBe(seen(JSON.stringify(text)));
    else expect({ tag: shown.tag, text: shown.text?.trim() }).toEqual({ tag: expect.any(String), text: seen(text) });
  }

  it('isolates what others wrote wherever a reviewer sees it: a right-to-left override cannot reorder the page', async () => {
    const intent = 'Refund \u202ednufer on si siht';
    const agent = 'agent-\u202etnega';
    const denyReason = 'Denied: \u202eyawyna devorppa';
    const stillUnknown = 'Still looking: \u202edeifirev';
    const resolution = 'Cancelled after a call: \u202etnes';
    // An approval, in the approvals queue, then denied with a reason. The API refuses an agent's text holding an
    // override now: it is written without it, then given it on the row, as an execution stored before the rule holds it.
    const approval = await submit([charge(unique('order'), { requires_approval: true })], {
      intent: withoutOverride(intent),
      agent_id: withoutOverride(agent),
    });
    await agentTextAsBefore(approval.id, { intent, agent_id: agent });
    await awaitingApproval(approval);
    await page.goto(consoleUrl('/'));
    await page.locator(`#approvals [data-operation-id="${approval.operations[0].id}"]`).waitFor();
    const inQueue = await isolationOf([intent, agent]);
    expect(inQueue[intent].length).toBeGreaterThan(0);
    expect(inQueue[agent].length).toBeGreaterThan(0);
    for (const text of [intent, agent]) for (const shown of inQueue[text]) expectIsolated(shown, text);
    // The API refuses a reviewer's text holding an override now (e2e shown-text-hidden): it is written without it, then
    // given it on the rows, as text stored before the rule holds it.
    const denied = await http(stack.apiUrl, 'POST', `/v1/operations/${approval.operations[0].id}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'deny', reason: withoutOverride(denyReason) },
    });
    expect(denied.status).toBe(200);
    await storedAsBefore(approval.operations[0].id, [denyReason]);
    await page.goto(consoleUrl(`/operations/${approval.operations[0].id}`));
    await expectText('#approval', /Denied: /);
    await page.locator('#timeline .event[data-type="approval.decided"]').waitFor();
    const onPage = await isolationOf([intent, agent, denyReason]);
    // The lede (intent, agent), the approval's reason and the timeline's: each isolated on its own.
    expect(onPage[denyReason].length).toBeGreaterThanOrEqual(2);
    for (const text of [intent, agent, denyReason]) {
      expect(onPage[text].length).toBeGreaterThan(0);
      for (const shown of onPage[text]) expectIsolated(shown, text);
    }

    // A hold never sent: "still unknown", then cancelled, each with evidence written by a reviewer.
    const held = await submit([charge(unique('order'), { expected_state: { charged: true } })], {
      intent: withoutOverride(intent),
      agent_id: withoutOverride(agent),
    });
    await agentTextAsBefore(held.id, { intent, agent_id: agent });
    const heldId = held.operations[0].id;
    await waitFor(
      () => operation(heldId),
      (op) => op.status === 'MANUAL_REVIEW',
      SLOW,
    );
    for (const body of [
      { status: 'MANUAL_REVIEW', evidence: withoutOverride(stillUnknown) },
      { status: 'CANCELLED', evidence: withoutOverride(resolution) },
    ]) {
      expect(
        (await http(stack.apiUrl, 'POST', `/v1/operations/${heldId}/resolve`, { key: DEMO.reviewer, body })).status,
      ).toBe(200);
    }
    await storedAsBefore(heldId, [stillUnknown, resolution]);
    await page.goto(consoleUrl(`/operations/${heldId}`));
    await page.locator('.status-card-effect [data-status="CANCELLED"]').waitFor();
    await page.locator('#timeline .event[data-type="operation.still_unknown"]').waitFor();
    const resolved = await isolationOf([resolution, stillUnknown]);
    expect(resolved[resolution].length).toBeGreaterThan(0);
    expect(resolved[resolution].some((shown) => shown.tag !== 'span.json-string')).toBe(true);
    for (const shown of resolved[resolution]) expectIsolated(shown, resolution);
    // The investigation's evidence is in its event's details: a string of the JSON, isolated on its own.
    expect(resolved[stillUnknown].length).toBeGreaterThan(0);
    for (const shown of resolved[stillUnknown]) expectIsolated(shown, stillUnknown);
    expect(resolved[stillUnknown].every((shown) => shown.tag === 'span.json-string')).toBe(true);
    await expectNoRawOverride();
  });

  it('isolates a provider’s rejection and an execution’s failure message: an override in them stays in them', async () => {
    const detail = 'provider rejected the request (402): \u202edenilced draC';
    const message = 'the request is invalid: \u202etnega eht yb nettirw';
    const execution = await submit([charge(unique('order'), { requires_approval: true })]);
    const opId = execution.operations[0].id;
    await awaitingApproval(execution);
    const cancelled = await http(stack.apiUrl, 'POST', `/v1/executions/${execution.id}/cancel`, { key: DEMO.agent });
    expect(cancelled.status).toBe(200);
    // The texts are put on the rows as a provider's late answer and a validation would leave them (the paths that
    // write them are e2e late-rejection's and dispatcher-lifecycle's): what is checked here is how the console shows them.
    const db = stack.db.dataSource;
    await db.query(`UPDATE operations SET rejected_at = clock_timestamp(), rejection = $2::jsonb WHERE id = $1`, [
      opId,
      JSON.stringify({ reason: 'CONNECTOR_REJECTED', detail }),
    ]);
    await db.query(
      `UPDATE executions SET failure = jsonb_set(failure, '{message}', to_jsonb($2::text)) WHERE id = $1`,
      [execution.id, message],
    );

    await page.goto(consoleUrl(`/operations/${opId}`));
    await expectText('#request', /Rejected late/);
    const rejection = await isolationOf([detail]);
    expect(rejection[detail].length).toBeGreaterThan(0);
    // In a <bdi> of its own, as the console shows all text written by others (a block around it isolates it too, but
    // not from what a later layout puts beside it in that block).
    for (const shown of rejection[detail]) expect(shown).toEqual({ tag: 'bdi', text: seen(detail) });
    await expectNoRawOverride();
    await page.goto(consoleUrl(`/executions/${execution.id}`));
    await expectText('#failure', /the request is invalid/);
    const failure = await isolationOf([message]);
    expect(failure[message].length).toBeGreaterThan(0);
    for (const shown of failure[message]) expect(shown).toEqual({ tag: 'bdi', text: seen(message) });
    await expectNoRawOverride();
    // Text put after it in the same block (a marker, here) is drawn after it, left to right: the override stays inside.
    const order = await page.evaluate(() => {
      type Rect = { left: number; right: number };
      type El = { textContent: string | null; getBoundingClientRect(): Rect; appendChild(n: unknown): void };
      const doc = (
        globalThis as unknown as {
          document: { querySelectorAll(s: string): Iterable<El>; createTextNode(t: string): unknown };
        }
      ).document;
      const isolated = [...doc.querySelectorAll('#failure bdi')].find((e) => e.textContent?.includes('invalid'));
      const dd = [...doc.querySelectorAll('#failure dd')].find((e) => e.textContent?.includes('invalid'));
      if (!isolated || !dd) return null;
      const marker = (doc as unknown as { createElement(t: string): El }).createElement('span');
      marker.appendChild(doc.createTextNode(' ←after'));
      dd.appendChild(marker);
      return { isolated: isolated.getBoundingClientRect(), marker: marker.getBoundingClientRect() };
    });
    expect(order).not.toBeNull();
    expect(order!.marker.left).toBeGreaterThanOrEqual(order!.isolated.right - 1);
  });

  it('masks secret-looking params, and shows them on request: the reviewer decides on what will be sent', async () => {
    const reference = `${unique('order')} Bearer ALL-FUNDS-TO-ATTACKER`;
    const execution = await submit([charge(reference, { requires_approval: true })]);
    // Waiting for its approval first: the page opens on the operation as it will stay while this case reads it.
    await awaitingApproval(execution);
    await page.goto(consoleUrl(`/operations/${execution.operations[0].id}`));
    await page.locator('#approve').waitFor();
    const params = page.locator('pre[aria-label^="Params"]');
    await params.waitFor();
    expect(await params.textContent()).toContain('Bearer ••••••');
    expect(await params.textContent()).not.toContain('ALL-FUNDS-TO-ATTACKER');
    await page.getByRole('button', { name: 'Show masked values' }).waitFor();
    // Clicked and read in one turn of the page's script: nothing can re-render the page in between (the next case
    // checks that the values stay shown through live re-renders).
    const shown = await page.evaluate(() => {
      type El = { textContent: string | null; click(): void; getAttribute(name: string): string | null };
      const doc = (globalThis as unknown as { document: { querySelectorAll(s: string): Iterable<El> } }).document;
      const button = (name: string) => [...doc.querySelectorAll('button')].find((b) => b.textContent === name);
      button('Show masked values')?.click();
      const block = [...doc.querySelectorAll('pre')].find((e) => e.textContent?.includes('"reference"'));
      return { params: block?.textContent ?? '', pressed: button('Mask them again')?.getAttribute('aria-pressed') };
    });
    expect(shown.params).toContain(reference);
    expect(shown.pressed).toBe('true');
  });

  it('keeps masked values shown through the live re-renders of that operation; another operation starts masked', async () => {
    const shownRef = `${unique('order')} Bearer SHOWN-SECRET`;
    const otherPrefix = unique('order');
    const execution = await submit([
      charge(shownRef, { key: 'shown', requires_approval: true }),
      charge(`${otherPrefix} Bearer OTHER-SECRET`, { key: 'other', requires_approval: true }),
    ]);
    const [shownId, otherId] = execution.operations.map((op) => op.id);
    for (const id of [shownId, otherId]) {
      await waitFor(
        () => operation(id),
        (op) => op.status === 'PREPARED' && op.approval?.state === 'requested',
        SLOW,
      );
    }
    await page.goto(consoleUrl(`/operations/${shownId}`));
    await page.locator('#approve').waitFor();
    await page.evaluate("window.marker = 'no-reload'");
    // The params block and its toggle as they are at one instant (a re-render replaces both together).
    const readParams = () =>
      page.evaluate(() => {
        type El = { textContent: string | null; click(): void; getAttribute(name: string): string | null };
        const doc = (globalThis as unknown as { document: { querySelectorAll(s: string): Iterable<El> } }).document;
        const block = [...doc.querySelectorAll('pre')].find((e) => e.textContent?.includes('"reference"'));
        const toggle = [...doc.querySelectorAll('button.reveal')][0];
        return { params: block?.textContent ?? '', pressed: toggle?.getAttribute('aria-pressed') ?? null };
      });
    // Revealed, and read in the same turn of the page's script.
    const revealed = await page.evaluate(() => {
      type El = { textContent: string | null; click(): void; getAttribute(name: string): string | null };
      const doc = (globalThis as unknown as { document: { querySelectorAll(s: string): Iterable<El> } }).document;
      [...doc.querySelectorAll('button')].find((b) => b.textContent === 'Show masked values')?.click();
      const block = [...doc.querySelectorAll('pre')].find((e) => e.textContent?.includes('"reference"'));
      return block?.textContent ?? '';
    });
    expect(revealed).toContain(shownRef);

    // Its events re-render the page (approved elsewhere, sent, read back): the page shows VERIFIED only after the click.
    const approved = await http(stack.apiUrl, 'POST', `/v1/operations/${shownId}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'approve', reason: 'Approved through the API while the page is open' },
    });
    expect(approved.status).toBe(200);
    await page.locator('.status-card-effect [data-status="VERIFIED"]').waitFor({ timeout: SLOW });
    await page.locator('#timeline .event[data-to="VERIFIED"]').waitFor();
    const after = await readParams();
    expect(after.params).toContain(shownRef);
    expect(after.pressed).toBe('true');
    expect(await page.evaluate('window.marker')).toBe('no-reload');

    // Another operation, opened within the page (no reload): masked.
    await page.getByLabel('Open by id').fill(otherId);
    await page.getByLabel('Open by id').press('Enter');
    await page.locator('pre[aria-label^="Params"]', { hasText: otherPrefix }).waitFor();
    const other = await readParams();
    expect(other.params).toContain(`${otherPrefix} Bearer ••••••`);
    expect(other.params).not.toContain('OTHER-SECRET');
    expect(other.pressed).toBe('false');
    expect(await page.evaluate('window.marker')).toBe('no-reload');
  });

  it('pages a queue newest first with a cursor, neither skipping nor repeating', async () => {
    const execution = await submit([
      charge(unique('order'), { key: 'first', requires_approval: true }),
      charge(unique('order'), { key: 'second', requires_approval: true }),
    ]);
    const ids = execution.operations.map((op) => op.id);
    for (const id of ids) {
      await waitFor(
        () => operation(id),
        (op) => op.approval?.state === 'requested',
        SLOW,
      );
    }
    type Page = { data: { operation: { id: string } }[]; total: number; next_cursor: string | null };
    const seen: string[] = [];
    let cursor: string | null = null;
    let total = 0;
    do {
      const query: string = cursor ? `limit=1&cursor=${cursor}` : 'limit=1';
      const res: { body: Page } = await http<Page>(stack.apiUrl, 'GET', `/v1/review/approvals?${query}`, {
        key: DEMO.reviewer,
      });
      expect(res.body.data.length).toBeLessThanOrEqual(1);
      seen.push(...res.body.data.map((item) => item.operation.id));
      total = res.body.total;
      cursor = res.body.next_cursor;
    } while (cursor);
    expect(seen).toHaveLength(total);
    expect(new Set(seen).size).toBe(seen.length);
    expect([...seen].sort().reverse()).toEqual(seen);
    expect(seen).toEqual(expect.arrayContaining(ids));
  });

  it('keeps tenants apart, and returns to sign-in when the key is revoked mid-session', async () => {
    const db = stack.db.dataSource.manager;
    const other = await createApiKey(db, { tenantId: 'demo-other', role: 'reviewer', label: 'console test' });
    const mine = await http<{ approvals: number; manual_reviews: number }>(stack.apiUrl, 'GET', '/v1/review/summary', {
      key: DEMO.reviewer,
    });
    expect(mine.body.approvals).toBeGreaterThan(0);
    expect(mine.body.manual_reviews).toBeGreaterThan(0);
    const theirs = await http(stack.apiUrl, 'GET', '/v1/review/summary', { key: other.key });
    expect(theirs.body).toMatchObject({ approvals: 0, manual_reviews: 0, escalated: 0, overdue: 0 });
    for (const queue of ['approvals', 'manual-reviews']) {
      const list = await http<{ data: unknown[]; total: number }>(stack.apiUrl, 'GET', `/v1/review/${queue}`, {
        key: other.key,
      });
      expect(list.body).toMatchObject({ data: [], total: 0 });
    }

    await page.evaluate((key) => sessionStorage.setItem('verity.console.key', key), other.key);
    await page.goto(consoleUrl());
    await expectText('#count-approvals', '0');
    await expectText('#count-manual-reviews', '0');
    await revokeApiKey(db, other.id);
    await expectText('#signin-error', /refused the stored key/);
    expect(await page.evaluate(() => sessionStorage.length)).toBe(0);
  });

  it('never put a key in a URL, sent data calls with the Bearer header, and logged no page errors', () => {
    for (const key of [DEMO.reviewer, DEMO.agent, 'wrong-key']) {
      expect(urls.filter((u) => u.includes(key))).toEqual([]);
    }
    expect(authorized.some((u) => u.includes('/v1/review/'))).toBe(true);
    expect(authorized.some((u) => u.includes('/stream'))).toBe(true);
    // The refused sign-ins answer 401/403 on purpose; Chromium reports those as console errors.
    expect(problems.filter((p) => !/status of 40[13]/.test(p))).toEqual([]);
  });

  async function expectText(selector: string, expected: string | RegExp): Promise<void> {
    const locator = page.locator(selector).first();
    await locator.waitFor();
    await waitFor(
      async () => (await locator.textContent()) ?? '',
      (text) => (typeof expected === 'string' ? text.includes(expected) : expected.test(text)),
      SLOW,
    );
  }
});
