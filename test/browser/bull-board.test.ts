import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Browser, Page, Response } from 'playwright-core';
import { JobName } from '@verity/queues';
import { CHROMIUM, launchChromium, SHOTS } from './chromium';
import { DEMO, Stack } from '../support/stack';

const SLOW = 30_000;
jest.setTimeout(120_000);

/** Bull Board's own page (real Chromium): what the board's UI asks for, the API answers as the page expects. */
(existsSync(CHROMIUM) ? describe : describe.skip)('Bull Board page (headless Chromium)', () => {
  let stack: Stack;
  let browser: Browser;
  let page: Page;

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    stack = await Stack.start({ label: 'board-page', dispatchers: 0, reconcilers: 0 });
    browser = await launchChromium();
  }, 90_000);

  beforeEach(async () => {
    const context = await browser.newContext({
      viewport: { width: 1280, height: 800 },
      extraHTTPHeaders: { authorization: `Bearer ${DEMO.operator}` },
    });
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

  /** The board's list of queues, as its page asks for it (`GET …/api/queues?activeQueue=…`). */
  const isQueueList = (response: Response) => new URL(response.url()).pathname === '/admin/queues/api/queues';

  it('a queue that is not there (a stale link, another shard count) shows "Queue not found" beside the real queues', async () => {
    const list = page.waitForResponse((response) => isQueueList(response));
    await page.goto(`${stack.apiUrl}/admin/queues/queue/${encodeURIComponent('7.dispatch')}`);
    const answer = await list;
    // The page names the queue it shows in activeQueue; the list of every queue is what it draws its menu from.
    expect(new URL(answer.url()).searchParams.get('activeQueue')).toBe('7.dispatch');
    expect(answer.status()).toBe(200);
    await page.getByText('Queue Not found', { exact: true }).waitFor();
    await page.screenshot({ path: join(SHOTS, 'bull-board-queue-not-found.png') });
    // The menu still lists the queues that are there, to go on from.
    await page.getByRole('link', { name: 'dispatch', exact: true }).first().waitFor();
  });

  it('the job schedulers page of a queue that is not there (a stale link) is the board page, its list 404', async () => {
    const schedulers = page.waitForResponse(
      (response) => new URL(response.url()).pathname === '/admin/queues/api/job-schedulers',
    );
    const opened = await page.goto(
      `${stack.apiUrl}/admin/queues/job-schedulers?queueName=${encodeURIComponent('7.dispatch')}`,
    );
    // The page itself, as for any other link into the board: its API call is what says the queue is not there.
    expect(opened?.status()).toBe(200);
    expect(opened?.headers()['content-type']).toMatch(/^text\/html/);
    const answer = await schedulers;
    expect(new URL(answer.url()).searchParams.get('queueName')).toBe('7.dispatch');
    expect(answer.status()).toBe(404);
    await page.getByRole('link', { name: 'dispatch', exact: true }).first().waitFor();
  });

  /**
   * The requests the page makes to another origin than the API's, as the browser would send them (data: URLs aside),
   * each refused (no network here): the list fills as they are made.
   */
  async function requestsElsewhere(): Promise<string[]> {
    const origin = new URL(stack.apiUrl).origin;
    const elsewhere: string[] = [];
    await page.context().route('**/*', async (route) => {
      const url = route.request().url();
      if (new URL(url).origin === origin || url.startsWith('data:')) return route.continue();
      elsewhere.push(url);
      await route.abort('blockedbyclient');
    });
    return elsewhere;
  }

  it('the board draws its queues, a queue’s page and a job’s offline: no request leaves for another origin, no rule of its content policy is broken', async () => {
    const elsewhere = await requestsElsewhere();
    const refused: string[] = [];
    page.on('console', (message) => {
      if (/Content Security Policy/i.test(message.text())) refused.push(message.text());
    });
    await page.exposeFunction('policyRefused', (what: string) => refused.push(what));
    await page.addInitScript(`document.addEventListener('securitypolicyviolation', (event) =>
      window.policyRefused(event.violatedDirective + ' ' + event.blockedURI))`);
    const jobs = page.waitForResponse(
      (response) => isQueueList(response) && new URL(response.url()).searchParams.get('activeQueue') === 'dispatch',
    );
    await page.goto(`${stack.apiUrl}/admin/queues/queue/dispatch`);
    expect((await jobs).status()).toBe(200);
    await page.getByRole('link', { name: 'dispatch', exact: true }).first().waitFor();
    await page.getByRole('link', { name: 'webhooks', exact: true }).first().click();
    await page.waitForURL(/\/admin\/queues\/queue\/webhooks$/);
    await page.getByRole('link', { name: 'webhooks', exact: true }).first().waitFor();
    // A job's own page (its data, options and log, highlighted): no reconciler runs, so the sweep job waits.
    const { producer } = await stack.queues();
    await producer.enqueue(JobName.SWEEP, {}, { jobId: 'board-offline' });
    await page.goto(`${stack.apiUrl}/admin/queues/queue/sweep/board-offline`);
    await page.getByText('board-offline', { exact: true }).first().waitFor();
    await page.getByText('jobData:', { exact: true }).first().waitFor();
    await page.getByText('Options', { exact: true }).first().click();
    await page.getByText('attempts:', { exact: true }).first().waitFor();
    await page.screenshot({ path: join(SHOTS, 'bull-board-offline.png') });
    // The page's styles applied (its own stylesheet, and the inline styles it sets): the layout is not the bare HTML.
    const background = await page.evaluate('getComputedStyle(document.body).backgroundColor');
    expect(background).not.toBe('rgba(0, 0, 0, 0)');
    expect({ elsewhere, refused }).toEqual({ elsewhere: [], refused: [] });
  });

  it('the content policy, not the stripping of links, is what keeps the page from another origin: what is added to it is refused', async () => {
    // withoutLinksElsewhere only spares the console a violation for the installed page's one font link (a regex over a
    // known template, not a guard): whatever reaches the page some other way — a link it does not recognise, an
    // upgraded board adding one, a script writing one — is refused by the browser under BULL_BOARD_CSP.
    const elsewhere = await requestsElsewhere();
    await page.addInitScript(`window.refused = [];
      document.addEventListener('securitypolicyviolation', (event) => window.refused.push(event.effectiveDirective))`);
    await page.goto(`${stack.apiUrl}/admin/queues/queue/dispatch`);
    await page.getByRole('link', { name: 'dispatch', exact: true }).first().waitFor();
    await page.evaluate(`(() => {
      const add = (html) => document.head.insertAdjacentHTML('beforeend', html);
      // Links the stripping would miss (an entity, a backslash the browser reads as a slash), and plain ones.
      add('<link rel="stylesheet" href="&#104;ttps://fonts.googleapis.com/css2?family=IBM+Plex+Sans">');
      add('<link rel="stylesheet" href="\\\\\\\\fonts.gstatic.example/x.css">');
      const script = document.createElement('script');
      script.src = 'https://cdn.example/x.js';
      document.head.append(script);
      const inline = document.createElement('script');
      inline.textContent = 'window.inlineRan = true';
      document.head.append(inline);
      const image = new Image();
      image.src = 'https://tracker.example/pixel.png';
      document.body.append(image);
      fetch('https://tracker.example/beacon').catch(() => undefined);
    })()`);
    await page.waitForFunction('window.refused.length >= 6');
    const refused = (await page.evaluate('window.refused')) as string[];
    expect({
      elsewhere,
      inlineRan: await page.evaluate('window.inlineRan === true'),
      refused: [...new Set(refused)].sort(),
    }).toEqual({
      elsewhere: [],
      inlineRan: false,
      refused: ['connect-src', 'img-src', 'script-src-elem', 'style-src-elem'],
    });
    expect(refused.filter((directive) => directive === 'style-src-elem')).toHaveLength(2);
  });

  it('a queue that is there is shown, with no "Queue not found"', async () => {
    const list = page.waitForResponse(
      (response) => isQueueList(response) && new URL(response.url()).searchParams.get('activeQueue') === 'dispatch',
    );
    await page.goto(`${stack.apiUrl}/admin/queues/queue/dispatch`);
    expect((await list).status()).toBe(200);
    await page.getByRole('link', { name: 'dispatch', exact: true }).first().waitFor();
    expect(await page.getByText('Queue Not found', { exact: true }).count()).toBe(0);
  });
});
