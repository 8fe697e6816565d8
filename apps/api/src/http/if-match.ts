import { CanActivate, ExecutionContext, Injectable, SetMetadata, applyDecorators } from '@nestjs/common';
import { ApiHeader } from '@nestjs/swagger';
import { InjectDataSource } from '@nestjs/typeorm';
import type { Request, Response } from 'express';
import type { VersionCondition } from '@verity/persistence';
import type { DataSource } from 'typeorm';
import type { Principal } from '../auth/principal';
import { MCP_PATH } from '../mcp/json-rpc-error';
import { Problem } from '../problem/problem';

/**
 * An entity tag (RFC 9110 §8.8.3: strong, or weak with `W/`) where a list element starts (sticky). A quoted tag is read
 * to its closing quote: a comma inside it (etagc allows one) is part of the tag, not a separator.
 */
const ENTITY_TAG = /(W\/)?"[\x21\x23-\x7e]*"/y;
/** What may come after a tag in a list (sticky): spaces, then a comma or the end. */
const AFTER_TAG = /[ \t]*(,|$)/y;
/** What may come before a tag in a list (sticky): spaces and commas (empty elements). */
const BEFORE_TAG = /[ \t,]*/y;

/** The `ETag` of a resource's answers, in the OpenAPI document. */
export const VERSION_ETAG = {
  ETag: {
    description: 'the version of what is shown: send it as `If-Match` to change it only if it is still this one',
    required: true,
    schema: { type: 'string' as const },
  },
};

/** The `If-Match` request header, in the OpenAPI document. */
export const IF_MATCH_HEADER = {
  name: 'If-Match',
  required: false,
  description:
    'the ETag of the GET the change is based on: made only if the resource is still that version, else 412 ' +
    '`precondition-failed` and nothing is written (without it, the last change wins)',
};

const TAKES_IF_MATCH = 'verity:takes-if-match';
const ACTS_ON = 'verity:acts-on';

/** Whether the resource a write's path names exists for the caller's tenant (ActsOn). */
export type ResourceLookup = (db: DataSource, principal: Principal, params: Record<string, string>) => Promise<boolean>;

/**
 * A write of one resource its path names (an execution's cancel, an operation's retry, a webhook endpoint's): how
 * RefuseUnmatchableIfMatch finds whether it exists, which decides `If-None-Match: *`. A write without it acts on what
 * always exists (its collection, for a create).
 */
export const ActsOn = (exists: ResourceLookup) => SetMetadata(ACTS_ON, exists);

/**
 * A write that compares `If-Match` and `If-None-Match` with its resource's version (`ifMatchOf`, `ifNoneMatchOf`):
 * documented, and let through the guard.
 */
export const TakesIfMatch = () => applyDecorators(ApiHeader(IF_MATCH_HEADER), SetMetadata(TAKES_IF_MATCH, true));

/**
 * RFC 9110 §13.1.1: an If-Match naming entity tags holds only if one of them is the resource's current ETag. The writes
 * that compare one are marked `TakesIfMatch` (the admin settings; an operation's approval, resolve and recheck); the
 * others (an execution's cancel, a retry, a webhook endpoint's) have no version to compare, so such a condition can
 * never hold — and a write sent with it (a cancel made conditional on a version its client believed it
 * had) was carried out whatever had happened since. Refused 412 before the handler runs, nothing written; `*` (the
 * resource exists) asks nothing and passes, a header that is no entity tag is 400 as everywhere.
 *
 * RFC 9110 §13.1.2 likewise for If-None-Match on those writes: `*` holds only where there is no current
 * representation: 412, nothing written, where the write acts on one that exists (its collection, for a create; the
 * resource its path names, looked up by its `ActsOn`). Where that resource does not exist, `*` holds and the request
 * goes on to its 404 (until 2026-12-07 it was 412, telling a client that a resource existed which did not). A list of
 * tags holds (none can be the version of what has none) and passes; a header that is no entity tag is 400. Until
 * 2026-12-06 the header was not read on these writes (nor on an operation's decisions): a cancel or a submission sent
 * with `If-None-Match: *` was carried out.
 */
@Injectable()
export class RefuseUnmatchableIfMatch implements CanActivate {
  constructor(@InjectDataSource() private readonly db: DataSource) {}

  async canActivate(context: ExecutionContext): Promise<boolean> {
    const req = context.switchToHttp().getRequest<Request & { principal?: Principal }>();
    const conditional = req.headers['if-match'] !== undefined || req.headers['if-none-match'] !== undefined;
    if (!conditional || ['GET', 'HEAD', 'OPTIONS'].includes(req.method)) return true;
    // A POST to /mcp too: it carries writes (a submission, a cancel) and has no ETag either (until 2026-12-07 it was
    // not judged, and a submission sent with `If-Match: "…"` was carried out). Its other methods answer 405 whatever.
    const mcpPost = req.path === MCP_PATH && req.method === 'POST';
    if (!/^\/v1(\/|$)/.test(req.path) && !mcpPost) return true;
    if (Reflect.getMetadata(TAKES_IF_MATCH, context.getHandler()) === true) return true;
    if (ifMatchOf(req) !== undefined) throw unmatchableIfMatch(req.method, req.path);
    if (ifNoneMatchOf(req) !== '*') return true;
    // `*` on a resource that does not exist holds (it has no current representation): the handler answers its 404.
    // Read before the write, not in it: no write creates a resource under an id its client names, so one found missing
    // here is missing for the handler too, and one found here existed when the request was judged.
    const exists = Reflect.getMetadata(ACTS_ON, context.getHandler()) as ResourceLookup | undefined;
    if (exists && req.principal && !(await exists(this.db, req.principal, req.params as Record<string, string>))) {
      return true;
    }
    throw existingForIfNoneMatch(req.method, req.path);
  }
}

/** 412 for `If-None-Match: *` on a write of what exists, a resource with no ETag (RefuseUnmatchableIfMatch). */
export function existingForIfNoneMatch(method: string, path: string): Problem {
  return new Problem(
    412,
    'precondition-failed',
    'Precondition failed',
    `If-None-Match: * holds only where nothing exists yet, and ${method} ${path} acts on what exists; nothing was ` +
      'written (send it without If-None-Match)',
  );
}

/** 412 for an If-Match on a write whose resource has no ETag (RefuseUnmatchableIfMatch; the OpenAPI example). */
export function unmatchableIfMatch(method: string, path: string): Problem {
  return new Problem(
    412,
    'precondition-failed',
    'Precondition failed',
    `${method} ${path} has no ETag, so the version If-Match names can never be its current one; nothing was ` +
      'written (send it without If-Match, or with If-Match: *)',
  );
}

/** Sets the `ETag` of a version of a resource (the one a later If-Match names). */
export function setETag(res: Pick<Response, 'setHeader'>, version: string): void {
  res.setHeader('etag', `"${version}"`);
}

/**
 * A read answered with the version of its resource as its `ETag` (what a later If-Match names: an operation, the
 * policy, a connector's settings). That tag is no cache validator: what the answer shows also changes while the version
 * does not (an operation's resolution options with time, a connector's spending usage with every send and every
 * passing hour, the policy's defaults with the platform's configuration). So the answer is never a `304` to an
 * If-None-Match (Express would give one to a tag naming the version, or to `*`, and a browser would then show what it
 * cached), and nothing stores it. `no-transform`: a proxy that compresses an answer weakens its ETag (`W/"…"`), and a
 * weak tag never matches the strong comparison of If-Match.
 */
export function answerVersioned(
  req: Pick<Request, 'headers'>,
  res: Pick<Response, 'setHeader'>,
  version: string,
): void {
  delete req.headers['if-none-match'];
  res.setHeader('cache-control', 'no-store, no-transform');
  setETag(res, version);
}

/** A read of a versioned resource answered (answerVersioned): its view, its version as the `ETag`. */
export async function answerRead<T>(
  req: Pick<Request, 'headers'>,
  res: Pick<Response, 'setHeader'>,
  answer: Promise<{ view: T; version: string }>,
): Promise<T> {
  const { view, version } = await answer;
  answerVersioned(req, res, version);
  return view;
}

/** A write of a versioned resource answered: the view after it, its new version as the `ETag` (setETag). */
export async function answerWrite<T>(
  res: Pick<Response, 'setHeader'>,
  answer: Promise<{ view: T; version: string }>,
): Promise<T> {
  const { view, version } = await answer;
  setETag(res, version);
  return view;
}

/**
 * The entity tags a conditional header lists as sent (`W/` kept), `*`, or undefined without the header. A header that is
 * no list of entity tags is 400 naming it, never taken for "no precondition". Empty elements of the list (`"a",,"b"`,
 * a trailing comma) are ignored, as RFC 9110 §5.6.1.2 has a recipient do (they were 400); a list with no tag left is
 * still 400. A quoted tag is kept whole: `"a,b"` is one tag (until 2026-12-07 the list was split at every comma, and
 * such a tag was 400); no version of ours has a comma, so it names none of them.
 */
function entityTagsOf(req: Pick<Request, 'headers'>, header: 'If-Match' | 'If-None-Match'): string[] | '*' | undefined {
  const raw = req.headers[header.toLowerCase()];
  if (raw === undefined) return undefined;
  const value = (Array.isArray(raw) ? raw.join(', ') : raw).trim();
  if (value === '*') return '*';
  const tags = entityTagList(value);
  if (tags === null || tags.length === 0) {
    throw Problem.validation([
      {
        field: header,
        rule: 'invalid_format',
        message: 'the ETag of a GET (e.g. "5d41402abc4b2a76b9719d911017c592"), several separated by commas, or *',
      },
    ]);
  }
  return tags;
}

/** The entity tags of a `#entity-tag` list (RFC 9110 §5.6.1, §8.8.3), in order; null when it is no such list. */
function entityTagList(value: string): string[] | null {
  const tags: string[] = [];
  let at = 0;
  for (;;) {
    BEFORE_TAG.lastIndex = at;
    BEFORE_TAG.exec(value);
    at = BEFORE_TAG.lastIndex;
    if (at === value.length) return tags;
    ENTITY_TAG.lastIndex = at;
    const tag = ENTITY_TAG.exec(value);
    if (!tag) return null;
    // Each tag is followed by a comma or the end: `"a" "b"` and `"a"b` are no list.
    AFTER_TAG.lastIndex = ENTITY_TAG.lastIndex;
    if (!AFTER_TAG.exec(value)) return null;
    tags.push(tag[0]);
    at = AFTER_TAG.lastIndex;
  }
}

/**
 * The versions a request's If-Match header names (RFC 9110 §13.1.1): undefined without one, or with `*` (the settings
 * always exist: it asks nothing). Compared strongly: a weak tag (`W/"…"`) matches no version. A header that is no list
 * of entity tags is 400 naming it.
 */
export function ifMatchOf(req: Pick<Request, 'headers'>): string[] | undefined {
  const tags = entityTagsOf(req, 'If-Match');
  if (tags === undefined || tags === '*') return undefined;
  return tags.filter((tag) => !tag.startsWith('W/')).map((tag) => tag.slice(1, -1));
}

/**
 * The versions a write's If-None-Match header names (RFC 9110 §13.1.2), compared weakly (`W/"v"` names `v`), or `*`
 * (any version: the admin settings always have one, so it never holds); undefined without one. A header that is no
 * list of entity tags is 400 naming it. Read by the writes of the admin settings (versionConditionOf).
 */
export function ifNoneMatchOf(req: Pick<Request, 'headers'>): string[] | '*' | undefined {
  const tags = entityTagsOf(req, 'If-None-Match');
  if (tags === undefined || tags === '*') return tags;
  return tags.map((tag) => tag.replace(/^W\//, '').slice(1, -1));
}

/** A write's If-Match and If-None-Match, as the versioned admin settings compare them where the write is made. */
export function versionConditionOf(req: Pick<Request, 'headers'>): VersionCondition {
  return { ifMatch: ifMatchOf(req), ifNoneMatch: ifNoneMatchOf(req) };
}

/**
 * 412 for a write of versioned admin settings whose If-Match or If-None-Match does not hold (versionConditionOf);
 * preconditionFailed when only If-Match was sent.
 */
export function versionConditionFailed(what: string, condition: VersionCondition): Problem {
  if (condition.ifNoneMatch === undefined) return preconditionFailed(what);
  return new Problem(
    412,
    'precondition-failed',
    'Precondition failed',
    `${what} is at a version If-None-Match names (\`*\` names any, and there always is one)` +
      `${condition.ifMatch === undefined ? '' : ', or no longer at one If-Match names'}; nothing was written`,
  );
}

/**
 * 412: the resource is no longer at a version the request was made against; nothing was written. Given the current
 * version, it is named (member `current_etag`, and the answer's `ETag`): what the resource is now.
 */
export function preconditionFailed(what: string, currentVersion?: string): Problem {
  const current = currentVersion === undefined ? undefined : `"${currentVersion}"`;
  return new Problem(
    412,
    'precondition-failed',
    'Precondition failed',
    `${what} changed since the version If-Match names${current ? ` (it is now ${current})` : ''}; nothing was ` +
      'written: read it again (GET, its ETag), apply your change to what it is now, and send it with the new ETag',
    current ? { current_etag: current } : {},
    current ? { etag: current } : {},
  );
}
