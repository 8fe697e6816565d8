import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import type { FormatterField } from '@bull-board/api/typings/app';
import { Job, type JobJson, type JobType, type Queue } from 'bullmq';
import { ExpressAdapter } from '@bull-board/express';
import type { INestApplication } from '@nestjs/common';
import { LOGGER, Logger, OutageLog, VerityConfig, isRedisCommandTimeout, isRedisUnreachable } from '@verity/platform';
import { JobProducer } from '@verity/queues';
import type { NextFunction, Request, Response } from 'express';
import { ApiKeyService } from './auth/api-key.service';
import { authenticateOperator, basicPassword, bearerToken } from './auth/auth.guard';
import type { OperatorPrincipal } from './auth/principal';
import { isDatabaseUnavailable } from '@verity/persistence';
import { refuseReadBody } from './http/no-body';
import { boardSecurityHeaders } from './http/security-headers';
import { Problem, ProblemCode, sendProblem } from './problem/problem';

export const BULL_BOARD_ROUTE = '/admin/queues';

/**
 * Bull Board has no auth of its own and shows every tenant's jobs: it sits behind the platform operator role (Bearer,
 * or Basic with the key as password so a browser can open it). Read-only in every mode unless BULL_BOARD_WRITABLE is
 * set explicitly: retries go through the API's rules, never around them.
 */
export async function mountBullBoard(app: INestApplication, config: VerityConfig): Promise<void> {
  const producer = app.get(JobProducer);
  const keys = app.get(ApiKeyService);
  const readOnlyMode = config.BULL_BOARD_WRITABLE !== true;
  const serverAdapter = new ExpressAdapter();
  serverAdapter.setBasePath(BULL_BOARD_ROUTE);
  // Every queue on every shard (named `<shard>.<queue>` when there are several).
  const queues = (await producer.everyQueue()).map(
    ({ queue, namePrefix }) => new BoardQueueAdapter(queue, { readOnlyMode, prefix: namePrefix }),
  );
  const queuesByName: BoardQueues = new Map(queues.map((adapter) => [adapter.getName(), adapter]));
  createBullBoard({ queues, serverAdapter });
  const guard = async (req: Request, res: Response, next: NextFunction) => {
    const crossSite = fromAnotherSite(req);
    if (crossSite) {
      sendProblem(req, res, new Problem(403, 'forbidden', 'Forbidden', crossSite));
      return;
    }
    const token = bearerToken(req) ?? basicPassword(req);
    try {
      const principal = await authenticateOperator(req, keys, 'Bull Board', token);
      (req as Request & { principal?: OperatorPrincipal }).principal = principal;
    } catch (error) {
      sendProblem(req, res, asProblem(error));
      return;
    }
    next();
  };
  // Its headers (the policy, Cache-Control) are set by boardAnswerHeaders, the API's second layer.
  app.use(
    BULL_BOARD_ROUTE,
    guard,
    ownResourcesOnly,
    refuseReadBody,
    refuseUndecodableQueueNames,
    refuseUnboundedPages,
    refuseUncleanableStatuses,
    boardErrorsAsProblems(app.get<Logger>(LOGGER)),
    ...(readOnlyMode ? [refuseEveryQueueWrites] : []),
    refuseUnknownQueuesInQuery(queuesByName),
    refuseLogsOfMissingJobs(queuesByName),
    serverAdapter.getRouter(),
  );
}

/**
 * A queue as the board reads it: a job whose stored fields BullMQ cannot parse (its data, options, progress or parent
 * not JSON) made BullMQ's read throw, so the list of its queue (every page that held it) and its own page answered 500
 * for as long as it stayed. Such a job is read here from its hash as it is: what parses is shown, what does not is
 * shown as its stored text (data, progress) or left out (options, parent). A job whose hash is gone is not listed.
 */
export class BoardQueueAdapter extends BullMQAdapter {
  constructor(
    private readonly source: Queue,
    options: ConstructorParameters<typeof BullMQAdapter>[1],
  ) {
    super(source, options);
  }

  /**
   * A job's data, return value or progress as the board answers it. One that parses but nests deeper than the answer's
   * JSON can be written (RangeError: a stored `[[[…]]]` 100,000 deep) made its queue's list 500 while it stayed: it is
   * answered as a note instead. Costs one more serialisation of what is answered.
   */
  override format(field: FormatterField, data: unknown, defaultValue: unknown = data): unknown {
    const value: unknown = super.format(field, data, defaultValue);
    if (field === 'name') return value;
    try {
      JSON.stringify(value);
      return value;
    } catch (error) {
      if (!(error instanceof RangeError)) throw error;
      return TOO_DEEP;
    }
  }

  override getJob(id: string): Promise<Job | undefined> {
    return readJob(this.source, id);
  }

  override async getJobs(...args: Parameters<BullMQAdapter['getJobs']>): Promise<Job[]> {
    try {
      return await super.getJobs(...args);
    } catch (error) {
      if (!unreadable(error)) throw error;
      // One of them does not parse: each is read on its own, as BullMQ reads them (its ids, then each hash).
      const [statuses, start, end] = args;
      const ids = [...new Set(await this.source.getRanges(statuses as JobType[], start, end, false))];
      const jobs = await Promise.all(ids.map((id) => readJob(this.source, id)));
      return jobs.filter((job): job is Job => job !== undefined);
    }
  }
}

/** A job as BullMQ reads it, or from its hash as it is when a stored field does not parse; undefined: not there. */
async function readJob(queue: Queue, id: string): Promise<Job | undefined> {
  try {
    return await queue.getJob(id);
  } catch (error) {
    if (!unreadable(error)) throw error;
    const raw = await (await queue.getBackend().client).hgetall(queue.toKey(id));
    if (Object.keys(raw).length === 0) return undefined;
    return Job.fromJSON(queue, unparsedJobJson(raw, id), id);
  }
}

/** What the board answers for a job's data, return value or progress that it cannot write as JSON. */
export const TOO_DEEP = '(not shown: nested deeper than the board can answer)';

/**
 * Whether BullMQ's read of a job threw on what is stored: a field that is no JSON (SyntaxError), or JSON that is not
 * what it stores there (TypeError: options `null`). A Redis error is neither, and is answered as one.
 */
function unreadable(error: unknown): boolean {
  return error instanceof SyntaxError || error instanceof TypeError;
}

/** What `text` holds as JSON, or `absent` when it is no JSON (or not there). */
function jsonOr(text: string | undefined, absent: unknown): unknown {
  if (text === undefined) return absent;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return absent;
  }
}

function isObject(value: unknown): boolean {
  return typeof value === 'object' && value !== null;
}

/** A job's hash as BullMQ's own read makes it (its field names), each field that does not parse made one that does. */
function unparsedJobJson(raw: Record<string, string>, id: string): JobJson {
  const number = (text: string | undefined) => (text === undefined ? undefined : parseInt(text, 10));
  const unparsed = Symbol('unparsed');
  return {
    id: raw.id ?? id,
    name: raw.name ?? '',
    // Data that is not JSON is shown as the text stored (a JSON string of it); progress likewise.
    data: raw.data === undefined ? '{}' : jsonOr(raw.data, unparsed) === unparsed ? JSON.stringify(raw.data) : raw.data,
    // Options that are no JSON object (not JSON, or `null`) are left out.
    opts: isObject(jsonOr(raw.opts, unparsed)) ? Job.optsFromJSON(raw.opts) : {},
    progress: jsonOr(raw.progress, raw.progress ?? 0) as JobJson['progress'],
    delay: number(raw.delay),
    priority: number(raw.priority),
    timestamp: number(raw.timestamp) as number,
    attemptsStarted: number(raw.ats) ?? 0,
    attemptsMade: number(raw.attemptsMade ?? raw.atm) ?? 0,
    stalledCounter: number(raw.stc) ?? 0,
    finishedOn: number(raw.finishedOn),
    processedOn: number(raw.processedOn),
    repeatJobKey: raw.rjk,
    deduplicationId: raw.deid,
    failedReason: raw.failedReason,
    deferredFailure: raw.defa,
    stacktrace: raw.stacktrace,
    returnvalue: raw.returnvalue,
    parentKey: raw.parentKey,
    parent: jsonOr(raw.parent, undefined) as JobJson['parent'],
    processedBy: raw.pb,
  };
}

/**
 * What every answer under the board's path says — its content policy and page headers (boardSecurityHeaders), and its
 * Cache-Control (boardCaching). Mounted by the API right after what every answer says, before its refusals of what no
 * route may receive: a body that is not JSON, a prototype key, a header given twice or a body in another charset sent
 * to the board were answered before the board's layers ran, with neither header.
 */
export function mountBullBoardHeaders(app: INestApplication): void {
  app.use(BULL_BOARD_ROUTE, boardSecurityHeaders, boardCaching);
}

/** The board's files (its scripts, stylesheets, images, translations), as its router serves them. */
const BOARD_FILES = /^\/static\//;

/**
 * What a cache may keep of the board's answers: its API answers list tenants' jobs and its page is the operator's, so
 * neither is kept anywhere (`no-store`); its files are the same for everyone but served only to an operator, so a
 * shared cache keeps none (`private`), and a browser asks again each time (`no-cache`: a 304 while they have not
 * changed). The board's file server said `public, max-age=0`; it keeps a Cache-Control already set. An error is
 * `no-store` wherever it is answered.
 */
export function boardCaching(req: Request, res: Response, next: NextFunction): void {
  if (!BOARD_FILES.test(req.path)) {
    res.setHeader('cache-control', 'no-store');
    return next();
  }
  res.setHeader('cache-control', 'private, no-cache');
  // An error under the files' path (no key, no such file) is no file: no-store, as every other answer (it said
  // `private, no-cache`). Decided when the status is written.
  const writeHead = res.writeHead;
  res.writeHead = function (this: Response, statusCode: number, ...rest: unknown[]) {
    if (statusCode >= 400) this.setHeader('cache-control', 'no-store');
    return (writeHead as (...args: unknown[]) => Response).call(this, statusCode, ...rest);
  } as Response['writeHead'];
  next();
}

/** A `<link>` of the page to another origin (an absolute or scheme-relative href), with the space after it. */
const LINK_ELSEWHERE = /<link\b[^>]*\bhref\s*=\s*["']?(?:[a-z][a-z0-9+.-]*:|\/\/)[^>]*>\s*/gi;

/**
 * The board's page linked a stylesheet of Google Fonts: each opening of the board told a third party that, and when,
 * an operator looked at the queues (and failed offline). The page is served without its links to another origin (the
 * board's own stylesheet falls back to the system's fonts); its content policy (BULL_BOARD_CSP) refuses whatever
 * else would load from one. The policy is the guard, the stripping only spares the browser's console a refusal at each
 * opening: a regex over the installed template, which misses a link HTML writes otherwise (an entity or a backslash in
 * its href, a `>` in an attribute before it) — the browser test "the content policy, not the stripping…" adds such
 * links and sees them refused.
 */
export function ownResourcesOnly(_req: Request, res: Response, next: NextFunction): void {
  const render = res.render.bind(res) as (view: string, options: object, done: RenderDone) => void;
  res.render = ((view: string, options?: object) => {
    render(view, options ?? {}, (error, html) => {
      if (error) return next(error);
      res.send(withoutLinksElsewhere(html));
    });
  }) as Response['render'];
  next();
}

type RenderDone = (error: Error | null, html: string) => void;

/** `html` without its `<link>`s to another origin. */
export function withoutLinksElsewhere(html: string): string {
  return html.replace(LINK_ELSEWHERE, '');
}

/** The query parameters whose value Bull Board decodes once more (decodeURIComponent) after express has. */
const BOARD_DECODED_QUERY = ['activeQueue', 'queueName'] as const;

/** What such a parameter must hold, in the 400 that refuses one. */
const QUEUE_NAME_ENCODING = 'a queue name, in which each % starts a percent-encoded byte (%25 for % itself)';

/**
 * `?activeQueue=` (the queue whose jobs a page lists) and `?queueName=` (the job schedulers' filter) are decoded by the
 * board a second time, unguarded: a value with a `%` that starts no escape (`%25ZZ`, which express has made `%ZZ`)
 * threw inside its handler, a 500 for a string. Refused here as a 400 naming the parameter. A repeated one is judged
 * as the board reads it (its values joined with commas).
 */
export function refuseUndecodableQueueNames(req: Request, res: Response, next: NextFunction): void {
  const query = req.query as Record<string, unknown>;
  const errors = BOARD_DECODED_QUERY.filter((name) => {
    const value = query[name];
    if (value === undefined) return false;
    try {
      decodeURIComponent(String(value));
      return false;
    } catch {
      return true;
    }
  }).map((field) => ({ field, rule: 'invalid_format', message: QUEUE_NAME_ENCODING }));
  if (errors.length > 0) {
    sendProblem(req, res, Problem.validation(errors));
    return;
  }
  next();
}

/** The board's queues by the name it knows them by (`<shard>.<queue>` on several shards). */
export type BoardQueues = ReadonlyMap<string, { getJob(id: string): Promise<unknown> }>;

/** What the board would answer for a queue or a job it does not have (made a problem by boardErrorsAsProblems). */
function boardNotFound(res: Response, key: 'ERRORS.QUEUE_NOT_FOUND' | 'ERRORS.JOB_NOT_FOUND'): void {
  res.status(404).json({ error: { key } });
}

/** The board's API (its router matches without regard to letter case); every other path serves its page. */
const BOARD_API = /^\/api(\/|$)/i;

/**
 * `?queueName=` naming no queue of this board (a typo, another deployment's prefix, another shard's name, 10 kB of
 * anything) was ignored: no scheduler answered 200 as if the queue were there and had none. A 404 as for such a name in
 * the path. `?activeQueue=` naming none is left to the board: its list answers every queue, none by that name, and
 * the board's page draws its menu and its "Queue not found" from that list (a stale link, another shard count) — a
 * 404 there emptied the menu and repeated an error at every poll. An empty one of either names nothing (400). Judged
 * as the board reads them (decoded once more, a repeated one joined with commas).
 */
export function refuseUnknownQueuesInQuery(queues: BoardQueues) {
  return (req: Request, res: Response, next: NextFunction): void => {
    // Only the board's API reads them: a page of the board (`/job-schedulers?queueName=…`, a stale link) is the page,
    // and the API call it makes is what says the queue is not there.
    if (!BOARD_API.test(req.path)) return next();
    const query = req.query as Record<string, unknown>;
    const named = BOARD_DECODED_QUERY.filter((name) => query[name] !== undefined).map((name) => ({
      name,
      // refuseUndecodableQueueNames has refused what does not decode.
      queue: decodeURIComponent(String(query[name])),
    }));
    const empty = named.filter(({ queue }) => queue === '');
    if (empty.length > 0) {
      const errors = empty.map(({ name }) => ({ field: name, rule: 'too_small', message: 'a queue name, not empty' }));
      sendProblem(req, res, Problem.validation(errors));
      return;
    }
    if (named.some(({ name, queue }) => name === 'queueName' && !queues.has(queue))) {
      return boardNotFound(res, 'ERRORS.QUEUE_NOT_FOUND');
    }
    next();
  };
}

/** `GET /api/queues/:queueName/:jobId/logs`, matched as the board's router matches it (letter case, trailing slash). */
const JOB_LOGS = /^\/api\/queues\/([^/]+)\/([^/]+)\/logs\/?$/i;

/**
 * The board reads a job's log without reading the job (BullMQ has an empty log for any id): the logs of a job that is
 * not there — never was, or was removed — answered 200 `[]`, where every other read of a job answers 404. Refused
 * as those are; an unknown queue, or a name that does not decode, is left to the board's own answer.
 */
export function refuseLogsOfMissingJobs(queues: BoardQueues) {
  return async (req: Request, res: Response, next: NextFunction): Promise<void> => {
    const match = req.method === 'GET' || req.method === 'HEAD' ? JOB_LOGS.exec(req.path) : null;
    if (!match) return next();
    let queue: ReturnType<BoardQueues['get']>;
    let jobId: string;
    try {
      queue = queues.get(decodeURIComponent(match[1]));
      jobId = decodeURIComponent(match[2]);
    } catch {
      return next();
    }
    if (!queue) return next();
    try {
      if (!(await queue.getJob(jobId))) return boardNotFound(res, 'ERRORS.JOB_NOT_FOUND');
    } catch {
      // Redis failing: the board's own read fails the same way, and answers it (a logged 5xx problem).
    }
    next();
  };
}

/** The statuses the board's page offers to clean (its STATUSES but `latest`, which is a view, not a set of jobs). */
const CLEANABLE_STATUSES = [
  'active',
  'waiting',
  'waiting-children',
  'prioritized',
  'completed',
  'failed',
  'delayed',
  'paused',
] as const;

/** `PUT /api/queues/:queueName/clean/:queueStatus`, matched as the board's router matches it. */
const CLEAN_ALL = /^\/api\/queues\/[^/]+\/clean\/([^/]+)\/?$/i;

/**
 * "Clean all" passes its status to BullMQ as the name of a Redis key of the queue, unchecked: `clean/x` answered 200
 * (and wrote a `cleaned` event), `clean/events` or `clean/meta` reached Redis as a command on the wrong type (a 500),
 * and `clean/repeat` removed the job schedulers that were due. Only the statuses the board's page offers are taken;
 * another is 400, on a read-only board too, before anything is read or written.
 */
export function refuseUncleanableStatuses(req: Request, res: Response, next: NextFunction): void {
  const match = req.method === 'PUT' ? CLEAN_ALL.exec(req.path) : null;
  let status: string | undefined;
  try {
    status = match ? decodeURIComponent(match[1]) : undefined;
  } catch {
    status = undefined; // the board's own 400 for a segment that does not decode
  }
  if (status !== undefined && !(CLEANABLE_STATUSES as readonly string[]).includes(status)) {
    const message = `one of ${CLEANABLE_STATUSES.join(', ')}`;
    sendProblem(req, res, Problem.validation([{ field: 'queueStatus', rule: 'invalid_value', message }]));
    return;
  }
  next();
}

/** The board's writes to every queue at once: each skips the read-only queues and answers 200 all the same. */
const EVERY_QUEUE_WRITES = new Set(['/api/queues/pause', '/api/queues/resume']);

/**
 * On a read-only board, "pause all" and "resume all" changed nothing and answered 200 `{}`: an operator who paused every
 * queue to stop the sends during an incident was told it was done. Refused as the board refuses a write to one queue
 * (405 QUEUE_READ_ONLY, made a problem by boardErrorsAsProblems).
 */
export function refuseEveryQueueWrites(req: Request, res: Response, next: NextFunction): void {
  // As the board's router matches it: letter case and a trailing slash aside.
  if (req.method === 'PUT' && EVERY_QUEUE_WRITES.has(req.path.toLowerCase().replace(/\/+$/, ''))) {
    res.status(405).json({ error: { key: 'ERRORS.QUEUE_READ_ONLY' } });
    return;
  }
  next();
}

/** The most jobs one list asks for: what the board's own settings page offers at most. */
export const BOARD_MAX_JOBS_PER_PAGE = 300;
/** Page × jobs per page stays a range Redis takes (below 2^53, written without an exponent). */
export const BOARD_MAX_PAGE = 1_000_000_000;

const BOARD_PAGING: Record<'page' | 'jobsPerPage', { max: number; message: string }> = {
  page: { max: BOARD_MAX_PAGE, message: `at most page ${BOARD_MAX_PAGE}` },
  jobsPerPage: {
    max: BOARD_MAX_JOBS_PER_PAGE,
    message: `at most ${BOARD_MAX_JOBS_PER_PAGE} jobs per page (what Bull Board’s own page asks for at most)`,
  },
};

/**
 * The board checks only that `?page=` and `?jobsPerPage=` are whole numbers from 1: jobsPerPage=1000000000 listed a
 * whole queue in one answer, and 1e300 in either went to Redis as a range it refused (a 500). A number past the bound is
 * refused here; anything that is no number is left to the board's own 400.
 */
export function refuseUnboundedPages(req: Request, res: Response, next: NextFunction): void {
  const query = req.query as Record<string, unknown>;
  const errors = (Object.keys(BOARD_PAGING) as (keyof typeof BOARD_PAGING)[])
    .filter((name) => query[name] !== undefined && Number(String(query[name])) > BOARD_PAGING[name].max)
    .map((field) => ({ field, rule: 'too_big', message: BOARD_PAGING[field].message }));
  if (errors.length > 0) {
    sendProblem(req, res, Problem.validation(errors));
    return;
  }
  next();
}

/**
 * A write sent by a page of another site (CSRF): a browser that opened Bull Board sends its Basic credentials with every
 * request to it, also a form's POST from any other page (no preflight for text/plain or form bodies). The browser says
 * where a request comes from (Sec-Fetch-Site, else Origin); a client that is no browser sends neither and is not judged.
 */
function fromAnotherSite(req: Request): string | null {
  if (req.method === 'GET' || req.method === 'HEAD') return null;
  const site = req.headers['sec-fetch-site'];
  if (typeof site === 'string' && site !== 'same-origin' && site !== 'none') {
    return `Bull Board takes writes from its own pages only (Sec-Fetch-Site: ${site})`;
  }
  const origin = req.headers.origin;
  if (site === undefined && origin !== undefined && !sameHost(origin, req.headers.host)) {
    return 'Bull Board takes writes from its own pages only (the Origin is another site)';
  }
  return null;
}

function sameHost(origin: string, host: string | undefined): boolean {
  try {
    return host !== undefined && new URL(origin).host === host.toLowerCase();
  } catch {
    return false;
  }
}

/** Bull Board's own error answer: `{ error: { key }, message?, code? }` (its page shows `error` and `message`). */
interface BoardError {
  error: { key?: unknown };
  message?: unknown;
  code?: unknown;
}

function isBoardError(body: unknown): body is BoardError {
  return typeof body === 'object' && body !== null && typeof (body as BoardError).error === 'object';
}

const BOARD_PROBLEMS: Record<number, [ProblemCode, string]> = {
  400: ['bad-request', 'Bad Request'],
  // Its uiConfig refusing a panel (hideRedisDetails, showWorkers: false).
  403: ['forbidden', 'Forbidden'],
  404: ['not-found', 'Not found'],
  // A write to a read-only board (BULL_BOARD_WRITABLE unset): no method changes anything here.
  405: ['method-not-allowed', 'Method not allowed'],
};

/**
 * Bull Board answers its own errors (an unknown job, a read-only queue, a bad page number, an undecodable id) as plain
 * JSON; every other error of the API is problem+json, and a client of the board must not need a second error format.
 * Its members stay as extensions, so the board's page still shows them.
 */
export function boardErrorsAsProblems(logger: Logger) {
  // Redis away: the board's page asks every few seconds, and each answer is the same outage.
  const queueOutage = new OutageLog();
  return (req: Request, res: Response, next: NextFunction): void => {
    const json = res.json.bind(res);
    res.json = (body: unknown) => {
      if (res.statusCode < 400 || !isBoardError(body)) return json(body);
      const key = typeof body.error.key === 'string' ? body.error.key.replace(/^ERRORS\./, '') : 'ERROR';
      const failure = { code: body.code, message: body.message };
      // A Redis that does not answer in time (stalled, or slow under load) is away for the board as much as one that
      // refuses: each poll of its page answered 500 internal and logged an error line while it lasted. A write may
      // have been made all the same, and its answer says so: one that timed out, and one refused part way (pause
      // all, retry all, clean, promote all are one command per queue or job, those sent before the refusal applied).
      if (res.statusCode >= 500 && (isRedisUnreachable(failure) || isRedisCommandTimeout(failure))) {
        const note = queueOutage.failed();
        if (note) {
          logger.error(
            { err: { message: body.message }, requestId: req.headers['x-request-id'], path: req.path, ...note },
            'job queue unavailable: answering 503 queue-unavailable (logged again at most once a minute while it lasts)',
          );
        }
        const write = req.method !== 'GET' && req.method !== 'HEAD';
        const consequence = write
          ? 'Bull Board could not tell whether the change was made; look at the queue before asking again'
          : 'Bull Board cannot show its queues; try again';
        sendProblem(req, res, Problem.queueUnavailable(consequence));
        return res;
      }
      if (res.statusCode >= 500) {
        // What was thrown (a Redis error, a stack) is for the log, not the answer, as everywhere in the API.
        logger.error(
          { err: { message: body.message, code: body.code }, requestId: req.headers['x-request-id'], path: req.path },
          `Bull Board request failed: ${key}`,
        );
        sendProblem(
          req,
          res,
          new Problem(res.statusCode, 'internal', 'Internal error', `Bull Board: ${key}`, { error: body.error }),
        );
        return res;
      }
      const [code, title] = BOARD_PROBLEMS[res.statusCode] ?? BOARD_PROBLEMS[400];
      const detail = `Bull Board: ${key}${typeof body.message === 'string' ? ` (${body.message})` : ''}`;
      // 405 must say what the resource allows: on a read-only board, nothing that writes.
      const allow: Record<string, string> = res.statusCode === 405 ? { allow: '' } : {};
      sendProblem(req, res, new Problem(res.statusCode, code, title, detail, { ...body }, allow));
      return res;
    };
    next();
  };
}

function asProblem(error: unknown): Problem {
  if (error instanceof Problem) {
    // A browser asks for the key only when told Basic works here.
    if (error.status !== 401) return error;
    return new Problem(401, error.code, error.title, 'Bull Board needs an operator API key', error.extras, {
      'www-authenticate': 'Basic realm="verity-operator", charset="UTF-8"',
    });
  }
  if (isDatabaseUnavailable(error)) return Problem.unavailable();
  return new Problem(500, 'internal', 'Internal error');
}
