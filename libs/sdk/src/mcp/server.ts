import { McpServer, ResourceTemplate } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import {
  type CallToolResult,
  ErrorCode,
  ListResourcesRequestSchema,
  McpError,
  type ServerNotification,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { textPrefix } from '@verity/status-model';
// The one home of the rule (free of imports, as the console's bundle takes it too): compiled into the package's dist.
import { escapeHiddenCharacters } from '../../../platform/src/text-issue';
import { z } from 'zod';
import type { Verity } from '../client';
import { VerityError, VerityNetworkError, VerityTimeoutError } from '../errors';
import { isExecutionSettled } from '../settled';
import type { Execution } from '../types';
import { ignoreTaskAugmentation, refuseInheritedToolNames, refuseInvalidParams } from './invalid-params';
import { SubmitExecutionInput, text, wholeNumber } from './schema';
import {
  RULES,
  connectorLimitations,
  describeExecution,
  describeOperation,
  executionReport,
  operationHistories,
  operationVerdict,
} from './words';

export const MCP_SERVER_NAME = 'verity';
export const MCP_SERVER_VERSION = '0.1.0';
export const EXECUTION_URI_TEMPLATE = 'verity://executions/{id}';
/** Below the MCP clients' usual 60 s request timeout, so a wait answers before the client gives up on it. */
export const MAX_WAIT_SECONDS = 50;
/**
 * The tools whose call changes something (an execution submitted, a cancel): stopped mid-call, their caller would not
 * know whether it was carried out. A server that matches cancellations loosely (over stateless HTTP, by key and
 * request id only) leaves these to finish.
 */
export const STATE_CHANGING_TOOLS: readonly string[] = ['submit_execution', 'cancel_execution'];
const DEFAULT_WAIT_SECONDS = 25;

export function executionUri(id: string): string {
  return `verity://executions/${encodeURIComponent(id)}`;
}

export interface VerityMcpOptions {
  /** The client every tool calls; it carries the caller's key, so the key's tenant and role apply. */
  client: Verity;
  /**
   * Offer `resources/subscribe` (update notifications for `verity://executions/{id}`). Only where the session
   * outlives one request: the stdio entry point. Stateless Streamable HTTP has no channel to send them on.
   */
  subscriptions?: boolean;
  /**
   * The most executions followed at once for `resources/subscribe` (default MAX_SUBSCRIPTIONS): each follows the
   * execution's event stream, and the API holds at most MAX_STREAMS_PER_KEY (20 by default) per key. Past it a
   * subscription is refused (-32600) until one ends (settled) or is unsubscribed.
   */
  maxSubscriptions?: number;
  /**
   * Events asked for per request when a history is built (1–1000, the API's largest page; default 1000). Every page
   * is read, by the events cursor, up to `maxHistoryEvents`.
   */
  historyPageSize?: number;
  /**
   * At most this many events of one execution are read for its histories (default 100 000, a hundred pages). Past
   * it the answer says the histories were cut and where the rest starts: never a history that silently stops early.
   */
  maxHistoryEvents?: number;
  /**
   * How long submit_execution waits for the API, all attempts included (default 50 s, below the MCP clients' usual
   * 60 s request timeout): past it the tool answers that the submission may have been accepted and gives the key to
   * repeat it with, instead of leaving the client to give up with no key.
   */
  submitTimeoutMs?: number;
  /**
   * How long every other tool and resource read waits for the API, all requests, attempts and history pages included
   * (default 50 s, for the same reason): past it the tool answers that there was no answer — for a cancel, that it may
   * have been carried out. A client's cancellation of its request aborts the calls too.
   */
  readTimeoutMs?: number;
  /**
   * How long wait_for_execution may then take to read the state it answers with (default 8 s, and never more than
   * readTimeoutMs): the wait itself takes up to timeout_seconds (50 s at most), and the whole answer must come before
   * the MCP clients' usual 60 s. Past it the tool answers that there was no answer (nothing was changed).
   */
  waitReadTimeoutMs?: number;
}

/** What wait_for_execution's read after the wait may take by default: 50 s of waiting + 8 s, below 60 s. */
export const WAIT_READ_TIMEOUT_MS = 8_000;

/** Below the MCP clients' usual 60 s request timeout, like MAX_WAIT_SECONDS. */
export const SUBMIT_TIMEOUT_MS = 50_000;
/** The same bound for the reads (and the cancel): the SDK's own bounds, 30 s a request and 3 attempts, outlast it. */
export const READ_TIMEOUT_MS = 50_000;

/** Subscriptions followed at once by default: the streams a key may hold by default (the API's MAX_STREAMS_PER_KEY). */
export const MAX_SUBSCRIPTIONS = 20;

export const HISTORY_PAGE_SIZE = 1000;
export const MAX_HISTORY_EVENTS = 100_000;

export interface VerityMcp {
  server: McpServer;
  /** Stops following subscribed executions. */
  close(): void;
  /**
   * The server is stopping: every wait_for_execution in flight (and any started after) ends now and answers with the
   * execution's current state, saying why, instead of holding the stop for up to its 50 s and being cut off unanswered.
   * Resolves once those in flight have their answers (the read of the state is bounded by waitReadTimeoutMs).
   */
  stopWaits(): Promise<void>;
}

/**
 * The MCP server, with requests whose params do not fit their method refused -32602 (see refuseInvalidParams), and a
 * tool name every object inherits answered as the unknown tool it is (refuseInheritedToolNames); a request for
 * task-augmented execution is served as an ordinary one (ignoreTaskAugmentation: the server declares no tasks).
 */
class VerityMcpServer extends McpServer {
  override async connect(transport: Transport): Promise<void> {
    await super.connect(transport);
    refuseInvalidParams(transport, (method) => hasRequestHandler(this.server, method));
    refuseInheritedToolNames(transport);
    // Last installed, so first to run: the params checked above are those without the member.
    ignoreTaskAugmentation(transport);
  }
}

/** Whether the server answers this method (the SDK says so only by refusing a second handler for it). */
function hasRequestHandler(server: Server, method: string): boolean {
  try {
    server.assertCanSetRequestHandler(method);
    return false;
  } catch {
    return true;
  }
}

type ToolExtra = {
  signal: AbortSignal;
  _meta?: { progressToken?: string | number };
  sendNotification: (notification: ServerNotification) => Promise<void>;
};

const GRAPHEMES = new Intl.Segmenter(undefined, { granularity: 'grapheme' });

/**
 * An intent (or its start, cut from `intent`) as a resource's title shows it: what the hidden-character rule refuses in
 * text of lines, escaped. Its direction marks are the whole intent's: writing where it holds right-to-left letters,
 * after the cut too (the start of an Arabic sentence's Latin preamble), as the API took them.
 */
const shownTitle = (text: string, intent = text) => escapeHiddenCharacters(text, { lines: true, within: intent });

/**
 * The first `max` UTF-16 units of `text`, cut between two characters as a reader sees them: an emoji of several people,
 * a flag, a letter with its marks and joiners stays whole or goes. Cut inside one, what was left of it (a joiner, a
 * flag's first tags) no longer stood where the hidden-character rule takes it, and the title showed it as escapes
 * though the intent held nothing hidden. So is a character the rule takes only before what follows it, when the cut
 * leaves that out: a zero-width space before the next Thai word (a character of its own), a Persian non-joiner before
 * the next letter (part of the letter before it): the cut goes back a character or two, to where the prefix is shown
 * as the start of the whole text is (shownTitle). A first character longer than `max` alone is cut as textPrefix cuts.
 */
function titlePrefix(text: string, max: number): string {
  if (text.length <= max) return text;
  const ends: number[] = [];
  for (const { index, segment } of GRAPHEMES.segment(text)) {
    if (index + segment.length > max) break;
    ends.push(index + segment.length);
  }
  if (ends.length === 0) return textPrefix(text, max);
  const whole = shownTitle(text);
  // Only the last few characters can stand where the cut changes how they are judged: look no further back.
  for (const end of ends.slice(-4).reverse()) {
    if (whole.startsWith(shownTitle(text.slice(0, end), text))) return text.slice(0, end);
  }
  return text.slice(0, ends[ends.length - 1]);
}

/**
 * The Verity MCP server: the tools, the execution resources and (optionally) their update notifications. The one
 * implementation behind both the API's `/mcp` endpoint and the `verity-mcp` stdio entry point; every call goes
 * through the typed SDK client, so MCP callers meet exactly the REST API's rules.
 */
export function createVerityMcpServer(options: VerityMcpOptions): VerityMcp {
  const dx = options.client;
  const historyBounds = {
    pageSize: Math.min(Math.max(Math.trunc(options.historyPageSize ?? HISTORY_PAGE_SIZE), 1), HISTORY_PAGE_SIZE),
    maxEvents: Math.max(Math.trunc(options.maxHistoryEvents ?? MAX_HISTORY_EVENTS), 1),
  };
  const histories = (executionId: string, signal: AbortSignal) => readHistories(dx, executionId, historyBounds, signal);
  const submitTimeoutMs = Math.max(Math.trunc(options.submitTimeoutMs ?? SUBMIT_TIMEOUT_MS), 1);
  const readTimeoutMs = Math.max(Math.trunc(options.readTimeoutMs ?? READ_TIMEOUT_MS), 1);
  const waitReadTimeoutMs = Math.min(
    Math.max(Math.trunc(options.waitReadTimeoutMs ?? WAIT_READ_TIMEOUT_MS), 1),
    readTimeoutMs,
  );
  /** A read's calls under the read bound and the client's signal; past the bound, "no answer" (nothing was changed). */
  const read = (
    callerSignal: AbortSignal,
    run: (signal: AbortSignal) => Promise<CallToolResult>,
    callAgain: string = CALL_AGAIN.read,
    boundMs = readTimeoutMs,
  ) =>
    guarded(
      () =>
        withinBound(boundMs, callerSignal, run, (why) =>
          unanswered(why, `no answer in time: nothing was changed; read again`, undefined, callAgain),
        ),
      callAgain,
    );
  const stopping = new AbortController();
  /** The answers of the waits in flight, which stopWaits awaits. */
  const waits = new Set<Promise<unknown>>();
  const server = new VerityMcpServer(
    { name: MCP_SERVER_NAME, version: MCP_SERVER_VERSION, title: 'Verity' },
    {
      instructions:
        'Verity carries out operations in the outside world (charges, messages, HTTP calls) and reports honestly ' +
        `whether each effect happened. ${RULES}`,
      capabilities: { logging: {} },
    },
  );

  server.registerTool(
    'list_connectors',
    {
      title: 'List connectors and their limitations',
      description:
        'Every connector you can submit operations to: its actions with their params schema, and its limitations ' +
        '(can it read back — without read-back an operation ends ACKNOWLEDGED, which is not proof; does the ' +
        'provider honour an idempotency key; is the effect reversible). Read this before submitting. ' +
        RULES,
      inputSchema: z.strictObject({}),
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    async (_input, extra) =>
      read(extra.signal, async (signal) => {
        const connectors = await dx.connectors({ signal });
        const described = connectors.map((c) => ({ ...c, limitations: connectorLimitations(c) }));
        const text = described
          .map(
            (c) =>
              `${c.name}: ${c.description}\n  actions: ${c.actions.map((a) => a.name).join(', ')}\n` +
              c.limitations.map((l) => `  - ${l}`).join('\n'),
          )
          .join('\n');
        return result(text, { connectors: described });
      }),
  );

  server.registerTool(
    'submit_execution',
    {
      title: 'Submit an execution',
      description:
        'Submits operations for Verity to carry out (the body of POST /v1/executions). An Idempotency-Key is always ' +
        'sent: yours (idempotency_key) or a generated one, returned in the result; repeating the call with the same ' +
        'key and body returns the same execution, never a second one. The answer is the accepted execution: its ' +
        'operations have not happened yet — follow them with wait_for_execution. ' +
        RULES,
      inputSchema: SubmitExecutionInput,
      annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true },
    },
    async (input, extra) =>
      guarded(async () => {
        const { idempotency_key, ...submission } = input;
        const idempotencyKey = idempotency_key ?? globalThis.crypto.randomUUID();
        // The SDK's own bounds (a request, its retries) can outlast the client's patience: the answer comes first.
        return withinBound(
          submitTimeoutMs,
          extra.signal,
          async (signal) => {
            const created = await dx.executions.createWithMeta(submission, { idempotencyKey, signal });
            const head =
              `Accepted (idempotency key ${created.idempotencyKey}${created.replayed ? '; a replay: this key was used before, this is the execution it created' : ''}). ` +
              'Nothing below has necessarily happened yet; use wait_for_execution to follow it.';
            return executionResult(created.execution, undefined, head, {
              idempotency_key: created.idempotencyKey,
              replayed: created.replayed,
            });
          },
          (why) => unanswered(why, 'POST /v1/executions: no answer in time', idempotencyKey),
        );
      }),
  );

  server.registerTool(
    'get_execution',
    {
      title: 'Read an execution',
      description:
        'The execution’s status and, separately, each operation’s effect in the world with its history. ' + RULES,
      inputSchema: z.strictObject({ execution_id: resourceId('exe') }),
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    async ({ execution_id }, extra) =>
      read(extra.signal, async (signal) => {
        const execution = await dx.get(execution_id, { signal });
        return executionResult(execution, await histories(execution_id, signal));
      }),
  );

  server.registerTool(
    'wait_for_execution',
    {
      title: 'Wait for an execution to settle',
      description:
        `Waits up to timeout_seconds (default ${DEFAULT_WAIT_SECONDS}, at most ${MAX_WAIT_SECONDS}) until the ` +
        'execution and every operation have settled, then returns the state — or returns the current state when ' +
        'time runs out (settled: false): call it again to keep waiting. Never resubmit while you wait. Sends ' +
        'progress notifications (each status change) when the request carries a progress token. ' +
        RULES,
      inputSchema: z.strictObject({
        execution_id: resourceId('exe'),
        timeout_seconds: wholeNumber(1, MAX_WAIT_SECONDS).optional(),
      }),
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    async ({ execution_id, timeout_seconds }, extra) => {
      const answer = guarded(async () => {
        const timeoutMs = (timeout_seconds ?? DEFAULT_WAIT_SECONDS) * 1000;
        const progress = progressReporter(extra as ToolExtra);
        let execution: Execution;
        let timedOut = false;
        let stopped = false;
        try {
          execution = await dx.waitForSettled(execution_id, {
            timeoutMs,
            signal: AbortSignal.any([extra.signal, stopping.signal]),
            onEvent: (event) => {
              if (event.type !== 'operation.status_changed' && event.type !== 'execution.status_changed') return;
              const subject = event.operation_id ? `operation ${event.operation_id}` : 'execution';
              progress(`${subject}: ${event.from_status ?? '—'} → ${event.to_status}`);
            },
          });
        } catch (error) {
          if (error instanceof VerityTimeoutError) timedOut = true;
          // Ended by the server's stop, not by the client: the current state, read below, is the answer.
          else if (stopping.signal.aborted && !extra.signal.aborted) stopped = true;
          else throw error;
        }
        // The state and its histories, read after the wait under a bound of their own that the wait leaves room for:
        // under the read bound (50 s) on top of a 50 s wait, the answer came after the client had given up.
        return read(
          extra.signal,
          async (signal) => {
            const current = timedOut || stopped ? await dx.get(execution_id, { signal }) : execution;
            // Settled by the time of this read (after the wait ran out): what was waited for, answered as such — not
            // "Not settled" and `timed_out` beside a report that says settled.
            const notSettled = timedOut && !isExecutionSettled(current);
            const head = stopped
              ? 'The MCP server is stopping, so the wait ended early; this is the current state. If it is not settled, ' +
                'call wait_for_execution again once the server runs to keep waiting; never submit the execution again.'
              : notSettled
                ? `Not settled after ${timeoutMs / 1000} s; this is the current state. Call wait_for_execution again to keep waiting; do not resubmit.`
                : undefined;
            return executionResult(current, await histories(execution_id, signal), head, {
              timed_out: notSettled,
              ...(stopped ? { stopped: true } : {}),
            });
          },
          CALL_AGAIN.wait,
          waitReadTimeoutMs,
        );
      }, CALL_AGAIN.wait);
      waits.add(answer);
      void answer.catch(() => undefined).finally(() => waits.delete(answer));
      return answer;
    },
  );

  server.registerTool(
    'cancel_execution',
    {
      title: 'Cancel an execution',
      description:
        'Cancels the execution: operations not yet sent (PREPARED) become CANCELLED; anything already sent keeps ' +
        'being reconciled, because cancelling cannot undo an effect that may have happened. Read the result: an ' +
        'operation that is UNKNOWN or ACKNOWLEDGED after a cancel may still have happened. ' +
        RULES,
      inputSchema: z.strictObject({
        execution_id: resourceId('exe'),
        reason: text(0, 1000).optional(),
      }),
      annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    },
    async ({ execution_id, reason }, extra) =>
      guarded(() =>
        withinBound(
          readTimeoutMs,
          extra.signal,
          async (signal) => {
            const execution = await dx.executions.cancel(execution_id, {
              ...(reason !== undefined ? { reason } : {}),
              signal,
            });
            return executionResult(execution, await histories(execution_id, signal), 'Cancel accepted.');
          },
          (why) =>
            unanswered(
              `${why}; the cancel may have been carried out: read the execution before repeating it`,
              `POST /v1/executions/${execution_id}/cancel: no answer in time`,
              undefined,
            ),
        ),
      ),
  );

  server.registerTool(
    'get_operation',
    {
      title: 'Read one operation',
      description:
        'One operation with its effect in words, its evidence, its retry rule and any recovery obligation ' +
        '(who must act, by when, with what evidence). ' +
        RULES,
      inputSchema: z.strictObject({ operation_id: resourceId('op') }),
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    async ({ operation_id }, extra) =>
      read(extra.signal, async (signal) => {
        const operation = await dx.operations.get(operation_id, { signal });
        const all = await histories(operation.execution_id, signal);
        const history = all.get(operation.id);
        return result(withCutNote(describeOperation(operation, history), all.cut), {
          report: operationVerdict(operation, history),
          operation,
          ...(all.cut ? { history_cut: all.cut } : {}),
        });
      }),
  );

  server.registerResource(
    'execution',
    // Listed by the handler below, page by page: a template's list callback has no cursor to read or give.
    new ResourceTemplate(EXECUTION_URI_TEMPLATE, { list: undefined }),
    {
      title: 'Execution state',
      description:
        'An execution with its operations as JSON: `report` states the execution status and each operation’s ' +
        'effect separately, in words; `execution` is the API’s JSON. ' +
        (options.subscriptions
          ? 'Subscribe to be notified of every change; a warning (logging message) says when updates stop before ' +
            'it settled (its deadline, a revoked key).'
          : 'Re-read it (or call wait_for_execution) to see changes.'),
      mimeType: 'application/json',
    },
    async (uri, variables, extra) => {
      const id = decodedId(String(variables.id), uri.href);
      const body = await withinBound(
        readTimeoutMs,
        extra.signal,
        async (signal) => {
          const execution = await dx.get(id, { signal }).catch(notFoundAsResourceError(uri.href));
          const history = await histories(id, signal);
          return {
            summary: withCutNote(describeExecution(execution, history), history.cut),
            report: executionReport(execution, history),
            execution,
            ...(history.cut ? { history_cut: history.cut } : {}),
          };
        },
        (why) => {
          throw new McpError(ErrorCode.InternalError, `${uri.href}: no answer from Verity (${why}); read it again`);
        },
      );
      return { contents: [{ uri: uri.href, mimeType: 'application/json', text: JSON.stringify(body, null, 2) }] };
    },
  );

  // resources/list: the executions newest first, 50 a page, with the API's cursor as MCP's — the newest 50 alone
  // would read as all there is.
  server.server.setRequestHandler(ListResourcesRequestSchema, async (request, extra) => {
    const cursor = request.params?.cursor;
    // A cursor of this list is a next_cursor the API gave: an execution id. Anything else (a lone surrogate, which no
    // URL can carry; one longer than the API's request line) was answered -32603, as if the server had failed.
    if (cursor && (cursor.length > 200 || !idPattern('exe').test(cursor))) {
      throw new McpError(ErrorCode.InvalidParams, `not a cursor of this list: ${JSON.stringify(cursor.slice(0, 200))}`);
    }
    const page = await withinBound(
      readTimeoutMs,
      extra.signal,
      (signal) => dx.executions.list({ limit: 50, ...(cursor ? { cursor } : {}) }, { signal }),
      (why) => {
        throw new McpError(ErrorCode.InternalError, `resources/list: no answer from Verity (${why}); list again`);
      },
    ).catch((error: unknown) => {
      if (error instanceof VerityError && error.status === 400) {
        throw new McpError(ErrorCode.InvalidParams, `not a cursor of this list: ${JSON.stringify(cursor)}`);
      }
      throw error;
    });
    return {
      resources: page.data.map((e) => ({
        uri: executionUri(e.id),
        name: e.id,
        // Not inside a character (titlePrefix): half an emoji is no Unicode, and a strict JSON reader refuses the whole
        // page for it.
        // Shown to a person in the client's list: a character that would hide or reorder it (an intent stored before
        // the API refused them) is written as its escape, as the review console shows it; what an intent may hold now
        // (line breaks, emoji, right-to-left text with its marks) is shown as written.
        title: shownTitle(titlePrefix(e.intent, 200), e.intent),
        mimeType: 'application/json',
      })),
      ...(page.next_cursor ? { nextCursor: page.next_cursor } : {}),
    };
  });

  const followers = new Map<string, AbortController>();
  const maxSubscriptions = options.maxSubscriptions ?? MAX_SUBSCRIPTIONS;
  if (options.subscriptions) {
    server.server.registerCapabilities({ resources: { subscribe: true } });
    server.server.setRequestHandler(SubscribeRequestSchema, async (request) => {
      const uri = request.params.uri;
      const id = executionIdOf(uri);
      await dx.get(id).catch(notFoundAsResourceError(uri)); // another tenant's or no such execution: refused
      if (!followers.has(uri) && followers.size >= maxSubscriptions) {
        // Unbounded, each one held a stream of the key: past the API's streams per key, the next ones (and every other
        // stream of the key: an SDK's, the console's) were refused 429, and a subscription's updates stopped.
        throw new McpError(
          ErrorCode.InvalidRequest,
          `at most ${maxSubscriptions} subscriptions at once (each follows a stream of the execution, and the API ` +
            `holds a limited number per key): unsubscribe from one first (resources/unsubscribe), or re-read ${uri} ` +
            'or call wait_for_execution instead',
        );
      }
      if (!followers.has(uri)) {
        const controller = new AbortController();
        followers.set(uri, controller);
        void follow(dx, server, id, uri, controller.signal).finally(() => {
          if (followers.get(uri) === controller) followers.delete(uri);
        });
      }
      return {};
    });
    server.server.setRequestHandler(UnsubscribeRequestSchema, async (request) => {
      followers.get(request.params.uri)?.abort();
      followers.delete(request.params.uri);
      return {};
    });
  }

  return {
    server,
    close() {
      for (const controller of followers.values()) controller.abort();
      followers.clear();
    },
    async stopWaits() {
      stopping.abort();
      await Promise.allSettled([...waits]);
    },
  };
}

/**
 * Follows the execution's event stream and tells the client after each event; ends once it has settled. A stream
 * that ends while the execution can still change (its deadline passed with a hold awaiting a reviewer, the key was
 * revoked) or that fails is said to have stopped: the subscriber is never left waiting for an update that cannot come.
 */
async function follow(dx: Verity, server: McpServer, id: string, uri: string, signal: AbortSignal): Promise<void> {
  let stopped: string;
  try {
    const stream = dx.stream(id, { signal });
    for await (const event of stream) {
      void event;
      await server.server.sendResourceUpdated({ uri });
    }
    if (stream.endReason === 'settled') return;
    stopped =
      stream.endReason === 'deadline'
        ? 'the stream ended at the execution’s deadline (reason deadline) while it could still change, e.g. a reviewer’s resolution'
        : 'the stream ended with reason key_revoked: the API key was revoked';
  } catch (error) {
    if (signal.aborted) return;
    stopped = (error as Error).message;
  }
  await server
    .sendLoggingMessage({
      level: 'warning',
      logger: 'verity',
      data: `updates of ${uri} stopped (${stopped}); re-read the resource or call wait_for_execution`,
    })
    .catch(() => undefined);
}

/**
 * An execution the key cannot see (another tenant's, or none) is a resource that is not found — answered as the MCP
 * SDK answers an unknown resource (invalid params), not as an internal error of the server.
 */
function notFoundAsResourceError(uri: string): (error: unknown) => never {
  return (error: unknown) => {
    if (error instanceof VerityError && error.status === 404) {
      throw new McpError(ErrorCode.InvalidParams, `Resource ${uri} not found`);
    }
    throw error;
  };
}

function executionIdOf(uri: string): string {
  const match = /^verity:\/\/executions\/([^/?#]+)$/.exec(uri);
  if (!match) {
    throw new McpError(
      ErrorCode.InvalidParams,
      `not an execution resource: ${uri} (expected ${EXECUTION_URI_TEMPLATE})`,
    );
  }
  return decodedId(match[1], uri);
}

/** The id in a resource URI: a malformed percent-encoding or a non-id is the caller's mistake, not the server's. */
function decodedId(encoded: string, uri: string): string {
  let id: string;
  try {
    id = decodeURIComponent(encoded);
  } catch {
    throw new McpError(ErrorCode.InvalidParams, `Resource ${uri} not found (malformed percent-encoding)`);
  }
  // Not an id (`..`, a slash once decoded): nothing to ask the API for, and no other path to ask it instead.
  if (id.length > 200 || !idPattern('exe').test(id)) {
    throw new McpError(ErrorCode.InvalidParams, `Resource ${uri} not found (not an execution id)`);
  }
  return id;
}

/** Where the histories stop when the events read reached the bound: what was read, and where the rest starts. */
export interface HistoryCut {
  events_read: number;
  /** How many events were left out is not known without reading them: at least one page more. */
  events_left_out: 'unknown (at least one)';
  /** `after` for GET /v1/executions/{id}/events: the first event left out comes after this one. */
  next_cursor: string;
}

/** Each operation's status path, from every event of the execution, page by page (`cut` when the bound stopped it). */
type Histories = Map<string, string[]> & { cut?: HistoryCut };

async function readHistories(
  dx: Verity,
  executionId: string,
  bounds: { pageSize: number; maxEvents: number },
  signal: AbortSignal,
): Promise<Histories> {
  // Folded page by page: only the paths are kept, never the events themselves.
  const histories: Histories = new Map();
  let read = 0;
  let after: string | undefined;
  do {
    const limit = Math.min(bounds.pageSize, bounds.maxEvents - read);
    const page = await dx.executions.events(executionId, after === undefined ? { limit } : { after, limit }, {
      signal,
    });
    operationHistories(page.data, histories);
    read += page.data.length;
    after = page.next_cursor ?? undefined;
    if (after !== undefined && read >= bounds.maxEvents) {
      // A full last page may have nothing after it: only an event beyond the bound makes the histories cut.
      const more = await dx.executions.events(executionId, { after, limit: 1 }, { signal });
      if (more.data.length > 0) {
        histories.cut = { events_read: read, events_left_out: 'unknown (at least one)', next_cursor: after };
      }
      return histories;
    }
  } while (after !== undefined);
  return histories;
}

/** The words of an answer whose histories were cut: said, never left for the reader to miss. */
function withCutNote(text: string, cut: HistoryCut | undefined): string {
  if (!cut) return text;
  return (
    `${text}\nHistory cut: only the first ${cut.events_read} events of this execution were read; the events after ` +
    `${cut.next_cursor} were left out (how many is not known without reading them), so a history above may stop ` +
    'before the current status (the status itself is current). Read the rest with GET /v1/executions/{id}/events?after=' +
    `${cut.next_cursor}.`
  );
}

function executionResult(
  execution: Execution,
  history: Histories | undefined,
  head?: string,
  extra: Record<string, unknown> = {},
): CallToolResult {
  const text = withCutNote([head, describeExecution(execution, history)].filter(Boolean).join('\n'), history?.cut);
  return result(text, {
    ...extra,
    report: executionReport(execution, history),
    execution,
    ...(history?.cut ? { history_cut: history.cut } : {}),
  });
}

function result(text: string, structured: Record<string, unknown>): CallToolResult {
  return {
    content: [
      { type: 'text', text },
      { type: 'text', text: JSON.stringify(structured) },
    ],
    structuredContent: structured,
  };
}

function progressReporter(extra: ToolExtra): (message: string) => void {
  const token = extra._meta?.progressToken;
  let progress = 0;
  return (message) => {
    if (token === undefined) return;
    progress += 1;
    void extra
      .sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress, message } })
      .catch(() => undefined);
  };
}

/**
 * A tool's id argument: the prefix and the id alphabet only, so no argument can become a path of its own (`..`, a
 * slash) in the request the tool makes.
 */
function resourceId(prefix: 'exe' | 'op') {
  return text(0, 200).regex(idPattern(prefix), `an id that starts with ${prefix}_`).describe(`${prefix}_…`);
}

/** Verity's ids: a prefix, then the lowercase base-32 alphabet its ids are written in. */
function idPattern(prefix: 'exe' | 'op'): RegExp {
  return new RegExp(`^${prefix}_[0-9a-z]+$`);
}

/**
 * What an agent may do after a call that changes nothing got no answer, or an answer that says nothing (a 5xx while
 * the API restarts): call again. Said in words, because an agent left with "no answer" to a wait may otherwise try
 * the one thing it must not: submit the execution again.
 */
const CALL_AGAIN = {
  read: 'Nothing was changed by this call: call it again.',
  wait:
    'Nothing was changed by this call: call wait_for_execution again to keep waiting; never submit the execution ' +
    'again.',
} as const;

/**
 * The API's refusals become tool errors the agent can read (problem code, detail, field errors), not crashes. For a
 * call that changes nothing, `callAgain` says what to do when the API did not answer or answered a 5xx.
 */
async function guarded(run: () => Promise<CallToolResult>, callAgain?: string): Promise<CallToolResult> {
  try {
    return await run();
  } catch (error) {
    if (callAgain && error instanceof VerityError && error.status >= 500) {
      // A read the API could not answer now (restarting, its database away): not a refusal of anything.
      const text = `Verity could not answer now (${error.status} ${error.code}: ${error.detail ?? error.title}). ${callAgain}`;
      return { isError: true, content: [{ type: 'text', text }], structuredContent: { error: error.body } };
    }
    if (error instanceof VerityError && error.outcomeUnknown) {
      // A 5xx (or an answer after a lost one) says nothing about whether the request was carried out: not "refused".
      const answer = `${error.status} ${error.code}: ${error.detail ?? error.title}`;
      const text = error.idempotencyKey
        ? `No conclusive answer from Verity (${answer}). The submission may have been accepted: repeat ` +
          `submit_execution with idempotency_key "${error.idempotencyKey}" and the same body to learn its outcome; ` +
          'never with a new key.'
        : `No conclusive answer from Verity (${answer}). The request may have been carried out: read the execution ` +
          'before repeating it.';
      return {
        isError: true,
        content: [{ type: 'text', text }],
        structuredContent: {
          error: { ...error.body, outcome_unknown: true, idempotency_key: error.idempotencyKey ?? null },
        },
      };
    }
    if (error instanceof VerityError) {
      const fields = error.errors.map((e) => `${e.field}: ${e.message} (${e.rule})`);
      const text = [`Refused: ${error.status} ${error.code}: ${error.detail ?? error.title}`, ...fields].join('\n');
      return { isError: true, content: [{ type: 'text', text }], structuredContent: { error: error.body } };
    }
    if (error instanceof VerityNetworkError) {
      return unanswered(error.message, error.message, error.idempotencyKey, callAgain);
    }
    throw error;
  }
}

/**
 * `run` with a signal that aborts after `timeoutMs` or with the client's request. Past the bound the answer is
 * `onTimeout`'s, not the abort error: the SDK's own bounds (a request, its retries, every page) can outlast the
 * client's patience, and the client must hear something before it gives up.
 */
async function withinBound<T>(
  timeoutMs: number,
  callerSignal: AbortSignal,
  run: (signal: AbortSignal) => Promise<T>,
  onTimeout: (why: string) => T,
): Promise<T> {
  const bound = AbortSignal.timeout(timeoutMs);
  try {
    return await run(AbortSignal.any([bound, callerSignal]));
  } catch (error) {
    if (!bound.aborted || callerSignal.aborted) throw error;
    return onTimeout(`no answer within ${timeoutMs / 1000} s`);
  }
}

/**
 * No answer from the API: for a submission, it may have been accepted, and the key tells which; for a call that
 * changes nothing, `callAgain` says so.
 */
function unanswered(
  why: string,
  message: string,
  idempotencyKey: string | undefined,
  callAgain?: string,
): CallToolResult {
  const text = idempotencyKey
    ? `No answer from Verity (${why}). The submission may have been accepted: repeat submit_execution ` +
      `with idempotency_key "${idempotencyKey}" and the same body to learn its outcome; never with a new key.`
    : `No answer from Verity (${why}).${callAgain ? ` ${callAgain}` : ''}`;
  return {
    isError: true,
    content: [{ type: 'text', text }],
    structuredContent: { error: { code: 'network', message, idempotency_key: idempotencyKey ?? null } },
  };
}
