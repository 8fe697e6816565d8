import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Browser, Page, Route } from 'playwright-core';
import { charge, http, sms, submission, unique } from '../support/http';
import { CHROMIUM, launchChromium, SHOTS } from './chromium';
import { DEMO, DEMO_SANDBOX_ACCOUNT, Stack, waitFor } from '../support/stack';
import type { Execution } from '@verity/sdk';

const SLOW = 30_000;
jest.setTimeout(120_000);

interface Op {
  id: string;
  status: string;
  approval: { state: string; requested_at?: string } | null;
}

/** What the review console offers a key, and what it shows next to a decision (real Chromium, whole stack). */
(existsSync(CHROMIUM) ? describe : describe.skip)('review console decisions (headless Chromium)', () => {
  let stack: Stack;
  let browser: Browser;
  let page: Page;

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    stack = await Stack.start({ label: 'console-decisions' });
    browser = await launchChromium();
  }, 90_000);

  beforeEach(async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    page = await context.newPage();
    page.setDefaultTimeout(SLOW);
  });

  afterEach(async () => {
    await page?.context().close();
  });

  afterAll(async () => {
    await browser?.close();
    await stack?.stop();
  });

  const consoleUrl = (path = '') => `${stack.apiUrl}/console${path}`;

  async function awaitingApproval(operations: unknown[], extra: Record<string, unknown> = {}): Promise<string> {
    const created = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission(operations, extra),
    });
    expect(created.status).toBe(201);
    const id = created.body.operations[0].id;
    await waitFor(
      async () => (await http<Op>(stack.apiUrl, 'GET', `/v1/operations/${id}`, { key: DEMO.reviewer })).body,
      (op) => op.status === 'PREPARED' && op.approval?.state === 'requested',
      SLOW,
    );
    return id;
  }

  async function signIn(key: string): Promise<void> {
    await page.goto(consoleUrl());
    await page.getByLabel('Reviewer API key').fill(key);
    await page.getByRole('button', { name: 'Sign in' }).click();
  }

  it('offers an admin key no decision the API refuses it (403): no Approve, Deny or Resolve buttons', async () => {
    const opId = await awaitingApproval([charge(unique('order'), { requires_approval: true })]);
    // The API refuses an admin's decision: approve and deny are the reviewer's alone.
    const refused = await http(stack.apiUrl, 'POST', `/v1/operations/${opId}/approval`, {
      key: DEMO.admin,
      body: { decision: 'approve' },
    });
    expect(refused.status).toBe(403);
    await signIn(DEMO.admin);
    await page.getByRole('heading', { level: 1, name: 'Review queues' }).waitFor();
    await page.goto(consoleUrl(`/operations/${opId}`));
    // The page has loaded the operation (its request is shown) and rendered its actions panel.
    await page.locator('#request').waitFor();
    await page.locator('#actions h2').waitFor();
    await page
      .locator('#actions')
      .filter({ hasText: /reviewer/ })
      .waitFor();
    expect(await page.locator('#approve, #deny, [data-resolution]').count()).toBe(0);
  });

  it('shows what an approval sends (connector, action, amount) beside the Approve button, on a phone too', async () => {
    const reference = unique('order');
    const opId = await awaitingApproval([
      charge(reference, { requires_approval: true, params: { amount: 987654, currency: 'EUR', reference } }),
    ]);
    await signIn(DEMO.reviewer);
    await page.getByRole('heading', { level: 1, name: 'Review queues' }).waitFor();
    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto(consoleUrl(`/operations/${opId}`));
    await page.locator('#request').waitFor();
    const approve = page.locator('#approve');
    await approve.waitFor();
    await page.screenshot({ path: join(SHOTS, 'decision-approve-mobile.png') });
    // Whatever the layout, the Approve button's own panel says what it approves.
    const panel = page.locator('#actions');
    await expect(panel.textContent()).resolves.toContain('sandbox.payments');
    await expect(panel.textContent()).resolves.toContain('987654');
    // And on a phone, with the button on screen, so is the amount.
    await approve.scrollIntoViewIfNeeded();
    const amount = panel.getByText('987654').first();
    const viewport = page.viewportSize()!;
    const box = await amount.boundingBox();
    expect(box).not.toBeNull();
    expect(box!.y).toBeGreaterThanOrEqual(0);
    expect(box!.y + box!.height).toBeLessThanOrEqual(viewport.height);
  });
  it('shows a reviewer asked to approve a retry who denied the same request before, when and why', async () => {
    const original = await awaitingApproval([charge(unique('order'), { requires_approval: true })]);
    const denied = await http<Op & { approval: { decided_by: string } }>(
      stack.apiUrl,
      'POST',
      `/v1/operations/${original}/approval`,
      { key: DEMO.reviewer, body: { decision: 'deny', reason: 'customer disputes this order' } },
    );
    expect(denied.status).toBe(200);
    const retried = await http<{ operation: Op }>(stack.apiUrl, 'POST', `/v1/operations/${original}/retry`, {
      key: DEMO.agent,
    });
    expect(retried.status).toBe(201);
    const retry = retried.body.operation.id;
    await waitFor(
      async () => (await http<Op>(stack.apiUrl, 'GET', `/v1/operations/${retry}`, { key: DEMO.reviewer })).body,
      (op) => op.status === 'PREPARED' && op.approval?.state === 'requested',
      SLOW,
    );
    await signIn(DEMO.reviewer);
    // The approvals queue marks the retry as denied before, with the reason.
    const card = page.locator(`li.card[data-operation-id="${retry}"]`);
    await card.waitFor();
    await expect(card.textContent()).resolves.toMatch(/Denied before.*once.*customer disputes this order/);
    // Beside its Approve button: the earlier denial, by whom and why, linked to the denied operation.
    await page.goto(consoleUrl(`/operations/${retry}`));
    await page.locator('#approve').waitFor();
    const warning = page.locator('#actions #denied-before');
    await warning.waitFor();
    const text = await warning.textContent();
    expect(text).toContain('denied once before');
    expect(text).toContain(original);
    expect(text).toContain(denied.body.approval.decided_by);
    expect(text).toContain('customer disputes this order');
    await expect(warning.locator(`a[href="/console/operations/${original}"]`).count()).resolves.toBe(1);
    // And the earlier attempts, with how each ended.
    await expect(page.locator('#earlier-attempts').textContent()).resolves.toMatch(/CANCELLED.*DENIED/);
    await page.screenshot({ path: join(SHOTS, 'decision-denied-before.png') });
  });

  it('shows a value with right-to-left letters beside the Approve button also in the order it is sent', async () => {
    // No hidden character: a Hebrew letter alone lays the groups of digits after it out right to left.
    const body = 'Pay to \u05D0 1111 2222';
    const opId = await awaitingApproval([
      sms(unique('rtl'), { requires_approval: true, params: { to: '+15550100', body } }),
    ]);
    await signIn(DEMO.reviewer);
    await page.getByRole('heading', { level: 1, name: 'Review queues' }).waitFor();
    await page.goto(consoleUrl(`/operations/${opId}`));
    const subject = page.locator('#decision-subject');
    await subject.waitFor();
    await page.locator('#approve').waitFor();
    /** Where each of the two groups of digits is drawn, left to right, in the text of `selector` that holds them. */
    const drawn = (selector: string): Promise<{ first: number; second: number }> =>
      page.evaluate(`(() => {
        const element = [...document.querySelectorAll(${JSON.stringify(selector)})].find((e) => e.textContent.includes('1111'));
        const node = element.firstChild;
        const x = (part) => {
          const range = document.createRange();
          const at = node.data.indexOf(part);
          range.setStart(node, at);
          range.setEnd(node, at + part.length);
          return range.getBoundingClientRect().x;
        };
        return { first: x('1111'), second: x('2222') };
      })()`);
    // As written, the value reads "2222 1111 א"...
    const written = await drawn('#decision-subject dd > code');
    expect(written.second).toBeLessThan(written.first);
    // ...so it is also shown in the order it is sent: 1111 before 2222.
    await expect(subject.textContent()).resolves.toContain('in the order it is sent');
    const sent = await drawn('#decision-subject code.logical');
    expect(sent.first).toBeLessThan(sent.second);
  });

  it('shows a string with right-to-left letters in the Request JSON isolated and also in the order it is sent', async () => {
    // The Request's params (and the evidence read back, the history's event data: the same JSON blocks).
    const body = 'Pay to \u05D0 1111 2222';
    const opId = await awaitingApproval([
      sms(unique('rtl'), { requires_approval: true, params: { to: '+15550100', body } }),
    ]);
    await signIn(DEMO.reviewer);
    await page.getByRole('heading', { level: 1, name: 'Review queues' }).waitFor();
    await page.goto(consoleUrl(`/operations/${opId}`));
    await page.locator('#request pre.json').waitFor();
    /** Where each group of digits is drawn, left to right, in every element of `selector` whose text holds them. */
    const drawn = (selector: string): Promise<Array<{ first: number; second: number }>> =>
      page.evaluate(`(() => {
        const elements = [...document.querySelectorAll(${JSON.stringify(selector)})].filter((e) => e.textContent.includes('1111'));
        return elements.map((element) => {
          const node = [...element.childNodes].find((n) => n.nodeType === 3 && n.data.includes('1111'));
          const x = (part) => {
            const range = document.createRange();
            const at = node.data.indexOf(part);
            range.setStart(node, at);
            range.setEnd(node, at + part.length);
            return range.getBoundingClientRect().x;
          };
          return { first: x('1111'), second: x('2222') };
        });
      })()`);
    for (const block of ['#request pre.json']) {
      // As written, the string reads "2222 1111 א"...
      const written = await drawn(`${block} .json-string:not(.logical)`);
      expect(written.length).toBeGreaterThan(0);
      for (const w of written) expect(w.second).toBeLessThan(w.first);
      // ...and is isolated, so its digits cannot join those of the value beside it...
      const isolated = await page.evaluate(
        `[...document.querySelectorAll(${JSON.stringify(`${block} .json-string`)})].every((e) => getComputedStyle(e).unicodeBidi.startsWith('isolate'))`,
      );
      expect(isolated).toBe(true);
      // ...and it is also shown in the order it is sent: 1111 before 2222.
      const sent = await drawn(`${block} code.logical`);
      expect(sent.length).toBeGreaterThan(0);
      for (const s of sent) expect(s.first).toBeLessThan(s.second);
    }
  });

  it('an approval answers the request the page shows: one asked for again meanwhile is not approved unseen', async () => {
    const reference = unique('order');
    const opId = await awaitingApproval([charge(reference, { requires_approval: true })]);
    const read = async () =>
      (await http<Op>(stack.apiUrl, 'GET', `/v1/operations/${opId}`, { key: DEMO.reviewer })).body;
    const shown = (await read()).approval!.requested_at!;
    await signIn(DEMO.reviewer);
    await page.getByRole('heading', { level: 1, name: 'Review queues' }).waitFor();
    await page.goto(consoleUrl(`/operations/${opId}`));
    await page.locator('#approve').waitFor();
    // While this reviewer's click is on its way, the source changes and another reviewer approves: the dispatcher
    // finds the grant stale and asks for approval again. The click then arrives.
    let sent: Record<string, unknown> | null = null;
    await page.route(`**/v1/operations/${opId}/approval`, async (route) => {
      sent = route.request().postDataJSON() as Record<string, unknown>;
      const direct = await stack.sandbox('/v1/charges', {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'idempotency-key': unique('elsewhere'),
          ...DEMO_SANDBOX_ACCOUNT,
        },
        body: JSON.stringify({ amount: 999, currency: 'EUR', reference }),
      });
      expect(direct.status).toBe(201);
      const other = await http(stack.apiUrl, 'POST', `/v1/operations/${opId}/approval`, {
        key: DEMO.reviewer,
        body: { decision: 'approve', reason: 'the other reviewer' },
      });
      expect(other.status).toBe(200);
      await waitFor(read, (op) => op.approval?.state === 'requested' && op.approval.requested_at !== shown, SLOW);
      await route.continue();
    });
    await page.locator('#approve').click();
    await page
      .locator('p.result')
      .filter({ hasText: /Refused \(409\)/ })
      .waitFor();
    expect(sent).toMatchObject({ decision: 'approve', requested_at: shown });
    await expect(page.locator('p.result').textContent()).resolves.toMatch(/already granted/);
    // The request asked for again still waits for a decision by someone who sees it; nothing was sent.
    const now = await read();
    expect(now.approval).toMatchObject({ state: 'requested' });
    expect(now.approval!.requested_at).not.toBe(shown);
    expect((await stack.effects()).charges[reference]).toMatchObject({ count: 1, amounts: [999] });
  });

  it('after that refusal, the request asked for again (shown by the reloaded page) is the one its Approve answers', async () => {
    const reference = unique('order');
    const opId = await awaitingApproval([charge(reference, { requires_approval: true })]);
    const read = async () =>
      (await http<Op>(stack.apiUrl, 'GET', `/v1/operations/${opId}`, { key: DEMO.reviewer })).body;
    const first = (await read()).approval!.requested_at!;
    await signIn(DEMO.reviewer);
    await page.getByRole('heading', { level: 1, name: 'Review queues' }).waitFor();
    await page.goto(consoleUrl(`/operations/${opId}`));
    await page.locator('#approve').waitFor();
    // As above: while the click is on its way, another reviewer's grant is found stale and approval is asked again.
    const approval = `**/v1/operations/${opId}/approval`;
    await page.route(approval, async (route) => {
      const direct = await stack.sandbox('/v1/charges', {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'idempotency-key': unique('elsewhere'),
          ...DEMO_SANDBOX_ACCOUNT,
        },
        body: JSON.stringify({ amount: 999, currency: 'EUR', reference }),
      });
      expect(direct.status).toBe(201);
      const other = await http(stack.apiUrl, 'POST', approval.slice(2), {
        key: DEMO.reviewer,
        body: { decision: 'approve', reason: 'the other reviewer' },
      });
      expect(other.status).toBe(200);
      await waitFor(read, (op) => op.approval?.state === 'requested' && op.approval.requested_at !== first, SLOW);
      await route.continue();
    });
    await page.locator('#approve').click();
    await page
      .locator('p.result')
      .filter({ hasText: /Refused \(409\)/ })
      .waitFor();
    await page.unroute(approval);
    const second = (await read()).approval!.requested_at!;
    expect(second).not.toBe(first);
    // The reloaded page shows the request asked for again, and offers Approve on it.
    await page.locator(`#approval time[datetime="${second}"]`).waitFor();
    const answered = page.waitForResponse(
      (response) =>
        response.request().method() === 'POST' && response.url().endsWith(`/v1/operations/${opId}/approval`),
    );
    await page.locator('#approve').click();
    // Its Approve answers what it shows: the second request, not the first one again (a 409 at every click).
    const answer = await answered;
    expect(answer.request().postDataJSON()).toMatchObject({ decision: 'approve', requested_at: second });
    expect(answer.status()).toBe(200);
    await page
      .locator('p.result')
      .filter({ hasText: /^Approved\./ })
      .waitFor();
  });

  it('a decision from the page of a first hold is not applied to a second one: 412, shown as "changed since you opened it"', async () => {
    const reference = unique('order');
    const created = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(reference, { expected_state: { charged: true } })]),
    });
    expect(created.status).toBe(201);
    const opId = created.body.operations[0].id;
    const read = async () => {
      const res = await http<Op & { attempt: number; recovery_obligation?: { resolution?: unknown } }>(
        stack.apiUrl,
        'GET',
        `/v1/operations/${opId}`,
        {
          key: DEMO.reviewer,
        },
      );
      return { ...res.body, etag: res.headers.get('etag') };
    };
    const first = await waitFor(read, (op) => op.status === 'MANUAL_REVIEW', SLOW);
    await signIn(DEMO.reviewer);
    await page.getByRole('heading', { level: 1, name: 'Review queues' }).waitFor();
    await page.goto(consoleUrl(`/operations/${opId}`));
    const cancel = page.locator('[data-resolution="CANCELLED"]');
    await cancel.waitFor();
    // While this reviewer's click is on its way, another releases the operation; its send's answer is lost and the
    // source cannot be read, so it is held again: another hold, which this page never showed. The click then arrives.
    let sentIfMatch: string | undefined;
    await page.route(`**/v1/operations/${opId}/resolve`, async (route) => {
      sentIfMatch = route.request().headers()['if-match'];
      await stack.setFaults({
        rules: [{ method: 'POST', path: '/v1/charges', fault: 'reset_after_commit', count: 1 }],
        read_fault: 'unavailable',
      });
      const released = await http(stack.apiUrl, 'POST', `/v1/operations/${opId}/resolve`, {
        key: DEMO.reviewer,
        body: { status: 'SENT', evidence: 'the other reviewer: send it' },
      });
      expect(released.status).toBe(200);
      await waitFor(read, (op) => op.status === 'MANUAL_REVIEW' && op.attempt === 1, SLOW);
      await route.continue();
    });
    try {
      await page.locator('#resolution-evidence').fill('never send it');
      await cancel.click();
      await page
        .locator('p.result')
        .filter({ hasText: /changed since you opened it/ })
        .waitFor();
    } finally {
      await stack.setFaults({ rules: [], read_fault: null });
    }
    expect(sentIfMatch).toBe(first.etag);
    // Still held, the second time, and undecided: the click wrote nothing.
    const now = await read();
    expect(now).toMatchObject({ status: 'MANUAL_REVIEW', attempt: 1 });
    expect(now.recovery_obligation?.resolution).toBeUndefined();
    expect(now.etag).not.toBe(first.etag);
  });

  /**
   * A charge held before it was ever sent (its expected state differs from the source), its page open for a reviewer:
   * the release it offers is a plain one (no approval rule yet). `read` reads the operation with its ETag.
   */
  async function openHeldRelease() {
    const created = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('order'), { expected_state: { charged: true } })]),
    });
    expect(created.status).toBe(201);
    const opId = created.body.operations[0].id;
    const read = async () => {
      const res = await http<Op & { attempt: number; recovery_obligation?: { resolution?: unknown } }>(
        stack.apiUrl,
        'GET',
        `/v1/operations/${opId}`,
        { key: DEMO.reviewer },
      );
      return { ...res.body, etag: res.headers.get('etag') };
    };
    const shown = await waitFor(read, (op) => op.status === 'MANUAL_REVIEW' && op.attempt === 0, SLOW);
    await signIn(DEMO.reviewer);
    await page.getByRole('heading', { level: 1, name: 'Review queues' }).waitFor();
    await page.goto(consoleUrl(`/operations/${opId}`));
    const release = page.locator('[data-resolution="SENT"]');
    await release.waitFor();
    await expect(release.textContent()).resolves.not.toMatch(/grants that approval/);
    return { opId, read, shown, release };
  }

  /** The tenant's approval rules, as its admin writes them (PUT /v1/admin/policy). */
  const policy = async (rules: unknown) => {
    const res = await http(stack.apiUrl, 'PUT', '/v1/admin/policy', {
      key: DEMO.admin,
      body: { approval_rules: rules },
    });
    expect(res.status).toBe(200);
  };

  it('a reloaded page says what its release does now: one that also grants approval (the policy asks since) says so', async () => {
    const { opId, release } = await openHeldRelease();
    // The tenant's admin has every sandbox payment approved from now on: a release of this one grants its approval.
    await policy([{ connector: 'sandbox.payments' }]);
    try {
      const options = await http<{ resolution_options: { status: string; why: string }[] }>(
        stack.apiUrl,
        'GET',
        `/v1/operations/${opId}`,
        { key: DEMO.reviewer },
      );
      const why = options.body.resolution_options.find((o) => o.status === 'SENT')!.why;
      expect(why).toMatch(/grants that approval/);
      // Another reviewer's "still unknown" is an event of the operation: the open page loads it again (its new due).
      const investigated = await http<{ recovery_obligation: { due_at: string } }>(
        stack.apiUrl,
        'POST',
        `/v1/operations/${opId}/resolve`,
        { key: DEMO.reviewer, body: { status: 'MANUAL_REVIEW', evidence: 'asked the provider' } },
      );
      expect(investigated.status).toBe(200);
      await page.locator(`#obligation time[datetime="${investigated.body.recovery_obligation.due_at}"]`).waitFor();
      // The button the reviewer clicks says what the API will do with it now, not what it did when the page opened.
      await expect(release.locator('.button-sub').textContent()).resolves.toBe(why);
    } finally {
      await policy(null);
    }
  });

  it('a release clicked on a page opened before an admin added an approval rule is refused: it would also grant it', async () => {
    const { opId, read, shown, release } = await openHeldRelease();
    // The page reloads once its timeline's first events come in, which on a loaded machine can be after the rule below:
    // such a reload would show the page the rule (a release that grants) before the click this case is about. The
    // page's reads of the operation are held from here until the click's request is sent, then let through.
    const heldReads: Route[] = [];
    let holdReads = true;
    await page.route(`**/v1/operations/${opId}`, async (route) => {
      if (holdReads && route.request().method() === 'GET') heldReads.push(route);
      else await route.continue();
    });
    // The admin's rule writes nothing on the operation: the open page is not loaded again and still shows a plain
    // release. Its click carries the ETag of that page, which the rule changed: nothing is released, nothing granted.
    await policy([{ connector: 'sandbox.payments' }]);
    try {
      let sentIfMatch: string | undefined;
      await page.route(`**/v1/operations/${opId}/resolve`, async (route) => {
        sentIfMatch = route.request().headers()['if-match'];
        holdReads = false;
        for (const held of heldReads.splice(0)) await held.continue();
        await route.continue();
      });
      await page.locator('#resolution-evidence').fill('the conflict is understood');
      await release.click();
      await page
        .locator('p.result')
        .filter({ hasText: /changed since you opened it/ })
        .waitFor();
      expect(sentIfMatch).toBe(shown.etag);
      const now = await read();
      expect(now).toMatchObject({ status: 'MANUAL_REVIEW', attempt: 0, approval: null });
      expect(now.recovery_obligation?.resolution).toBeUndefined();
      expect(now.etag).not.toBe(shown.etag);
    } finally {
      await page.unroute(`**/v1/operations/${opId}/resolve`);
      await policy(null);
    }
  });

  it('an earlier load that fails after a later one was shown changes nothing: the later one stands', async () => {
    const created = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('order'), { expected_state: { charged: true } })]),
    });
    expect(created.status).toBe(201);
    const opId = created.body.operations[0].id;
    await waitFor(
      () => http<Op>(stack.apiUrl, 'GET', `/v1/operations/${opId}`, { key: DEMO.reviewer }),
      (res) => res.body.status === 'MANUAL_REVIEW',
      SLOW,
    );
    const investigate = async (n: number) => {
      const res = await http<{ recovery_obligation: { due_at: string } }>(
        stack.apiUrl,
        'POST',
        `/v1/operations/${opId}/resolve`,
        { key: DEMO.reviewer, body: { status: 'MANUAL_REVIEW', evidence: `asked the provider (${n})` } },
      );
      expect(res.status).toBe(200);
      return res.body.recovery_obligation.due_at;
    };
    await signIn(DEMO.reviewer);
    await page.getByRole('heading', { level: 1, name: 'Review queues' }).waitFor();
    await page.goto(consoleUrl(`/operations/${opId}`));
    const cancel = page.locator('[data-resolution="CANCELLED"]');
    await cancel.waitFor();
    // The next load's answer is held until a later load has been shown, then arrives without its ETag (an
    // intermediary that strips it once, a load that failed late).
    let held: Route | null = null;
    await page.route(`**/v1/operations/${opId}`, async (route) => {
      if (held === null) held = route;
      else await route.continue();
    });
    await investigate(1);
    await waitFor(
      async () => held,
      (route) => route !== null,
      SLOW,
    );
    const later = await investigate(2);
    await page.locator(`#obligation time[datetime="${later}"]`).waitFor();
    const response = await held!.fetch();
    const headers = Object.fromEntries(Object.entries(response.headers()).filter(([name]) => name !== 'etag'));
    const finished = page.waitForEvent('requestfinished', (request) => request === held!.request());
    await held!.fulfill({ response, headers });
    await finished;
    // The answer has reached the page; a task queued after it runs once the page has read it.
    await page.evaluate(() => new Promise((resolve) => setTimeout(resolve, 0)));
    // The page shows the later load, which had its version: its decisions stay, and no message says it had none.
    await expect(page.locator('p.result').textContent()).resolves.not.toMatch(/without the operation’s version/);
    await expect(cancel.isVisible()).resolves.toBe(true);
  });

  it('a page whose answers lose their ETag on the way offers no decision: none is taken without a version', async () => {
    const opId = await awaitingApproval([charge(unique('order'), { requires_approval: true })]);
    await signIn(DEMO.reviewer);
    await page.getByRole('heading', { level: 1, name: 'Review queues' }).waitFor();
    // An intermediary that strips the ETag from the API's answers about this operation.
    await page.route(`**/v1/operations/${opId}`, async (route) => {
      const response = await route.fetch();
      const headers = Object.fromEntries(Object.entries(response.headers()).filter(([name]) => name !== 'etag'));
      await route.fulfill({ response, headers });
    });
    const decisions: string[] = [];
    page.on('request', (request) => {
      if (request.method() === 'POST' && request.url().includes(`/v1/operations/${opId}/`))
        decisions.push(request.url());
    });
    await page.goto(consoleUrl(`/operations/${opId}`));
    await page
      .locator('p.result')
      .filter({ hasText: /without the operation’s version/ })
      .waitFor();
    await expect(page.locator('#approve').count()).resolves.toBe(0);
    await expect(page.locator('#deny').count()).resolves.toBe(0);
    expect(decisions).toEqual([]);
    const now = await http<Op>(stack.apiUrl, 'GET', `/v1/operations/${opId}`, { key: DEMO.reviewer });
    expect(now.body.approval).toMatchObject({ state: 'requested' });
  });

  it('once a later load has the ETag again, the decisions return and the message that it was missing goes', async () => {
    const created = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('order'), { expected_state: { charged: true } })]),
    });
    expect(created.status).toBe(201);
    const opId = created.body.operations[0].id;
    await waitFor(
      () => http<Op>(stack.apiUrl, 'GET', `/v1/operations/${opId}`, { key: DEMO.reviewer }),
      (res) => res.body.status === 'MANUAL_REVIEW',
      SLOW,
    );
    // Each "still unknown" record is an event of the operation: the open page loads it again.
    let investigations = 0;
    const investigate = async () => {
      const res = await http(stack.apiUrl, 'POST', `/v1/operations/${opId}/resolve`, {
        key: DEMO.reviewer,
        body: { status: 'MANUAL_REVIEW', evidence: `asked the provider (${++investigations})` },
      });
      expect(res.status).toBe(200);
    };
    await signIn(DEMO.reviewer);
    await page.getByRole('heading', { level: 1, name: 'Review queues' }).waitFor();
    await page.goto(consoleUrl(`/operations/${opId}`));
    const cancel = page.locator('[data-resolution="CANCELLED"]');
    await cancel.waitFor();
    const missing = page.locator('p.result').filter({ hasText: /without the operation’s version/ });
    // For one load, an intermediary strips the ETag: the decisions go, and the page says why.
    const operationUrl = `**/v1/operations/${opId}`;
    const stripETag = async (route: Route) => {
      const response = await route.fetch();
      const headers = Object.fromEntries(Object.entries(response.headers()).filter(([name]) => name !== 'etag'));
      await route.fulfill({ response, headers });
    };
    await page.route(operationUrl, stripETag);
    await investigate();
    await missing.waitFor();
    await cancel.waitFor({ state: 'hidden' });
    // The ETag is back: the next load shows the decisions again, and no longer that there is no version. A load still
    // in the handler (the page reloads on each event) is let finish first: unrouted mid-handler, its request went on
    // unhandled and the handler's fulfil threw "Route is already handled", failing every test of the file.
    await page.unrouteAll({ behavior: 'wait' });
    await investigate();
    await cancel.waitFor();
    await expect(missing.count()).resolves.toBe(0);
  });
});
