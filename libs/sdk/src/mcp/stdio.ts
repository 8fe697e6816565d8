#!/usr/bin/env node
import { parseArgs } from 'node:util';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { Verity } from '../client';
import { createVerityMcpServer } from './server';
import { jsonRpcLines } from './stdio-lines';

const USAGE = `verity-mcp: the Verity MCP server over stdio, for desktop agents.

  verity-mcp --url http://localhost:3000 --key <api key>

  --url   the Verity API (or VERITY_URL)
  --key   a tenant's API key (or VERITY_API_KEY, preferred: arguments are visible to other local users)

Talks to Verity over its REST API with the key's tenant and role; stdout carries the protocol, stderr the messages.`;

/** How long the requests in flight at SIGTERM, SIGINT or the end of stdin may take to answer before the exit. */
export const SHUTDOWN_GRACE_MS = 10_000;

/**
 * The ids of the client's requests not answered yet, kept by wrapping a connected transport (outermost): `idle()`
 * resolves once none is left. A request the client cancels is answered by nobody, so it leaves the set too. Once
 * `readable()` says nobody reads the output any more, an answer is not written: its request is done all the same.
 */
function trackAnswers(
  transport: Transport,
  readable: () => boolean,
): { count: () => number; idle: () => Promise<void> } {
  const pending = new Set<string | number>();
  let wake: (() => void) | undefined;
  const forget = (id: unknown) => {
    if (pending.delete(id as string | number) && pending.size === 0) wake?.();
  };
  const deliver = transport.onmessage;
  transport.onmessage = (message, extra) => {
    const m = message as { id?: unknown; method?: unknown; params?: { requestId?: unknown } };
    if (typeof m.method === 'string' && (typeof m.id === 'string' || typeof m.id === 'number')) pending.add(m.id);
    if (m.method === 'notifications/cancelled') forget(m.params?.requestId);
    deliver?.(message, extra);
  };
  const send = transport.send.bind(transport);
  transport.send = async (message, options) => {
    if (readable()) await send(message, options);
    const m = message as { id?: unknown; method?: unknown };
    if (m.method === undefined && m.id !== undefined) forget(m.id);
  };
  return {
    count: () => pending.size,
    idle: () => (pending.size === 0 ? Promise.resolve() : new Promise<void>((resolve) => (wake = resolve))),
  };
}

/** Reads the options; the key may come from the environment so it stays out of the process list. */
export function parseOptions(argv: string[], env: NodeJS.ProcessEnv): { url: string; key: string } | string {
  const { values } = parseArgs({
    args: argv,
    options: { url: { type: 'string' }, key: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
    strict: true,
  });
  if (values.help) return USAGE;
  const url = values.url ?? env.VERITY_URL;
  const key = values.key ?? env.VERITY_API_KEY;
  if (!url || !key) return `missing ${!url ? '--url (or VERITY_URL)' : '--key (or VERITY_API_KEY)'}\n\n${USAGE}`;
  try {
    new URL(url);
  } catch {
    return `--url is not a URL: ${url}`;
  }
  return { url, key };
}

/**
 * A promise nothing awaits (a callback's, the stop's): should it reject, that is said on stderr as every other failure
 * here and the process exits 1 — what Node's unhandled rejection would end in, with a stack instead of the message.
 */
function exitOnRejection(promise: Promise<unknown>, what: string): void {
  promise.catch((error: unknown) => {
    process.stderr.write(`verity-mcp: ${what}: ${(error as Error)?.message ?? String(error)}\n`);
    process.exit(1);
  });
}

async function main(): Promise<void> {
  let options: ReturnType<typeof parseOptions>;
  try {
    options = parseOptions(process.argv.slice(2), process.env);
  } catch (error) {
    options = `${(error as Error).message}\n\n${USAGE}`;
  }
  if (typeof options === 'string') {
    process.stderr.write(`${options}\n`);
    process.exit(options === USAGE ? 0 : 2);
  }
  const client = new Verity({ baseUrl: options.url, apiKey: options.key, userAgent: 'verity-mcp' });
  const mcp = createVerityMcpServer({ client, subscriptions: true });
  // Lines that are no JSON-RPC message are answered by jsonRpcLines; the transport reads the rest.
  const lines = jsonRpcLines((message) => exitOnRejection(transport.send(message), 'answering a line'));
  process.stdin.pipe(lines);
  const transport = new StdioServerTransport(lines);
  transport.onclose = () => {
    mcp.close();
    process.exit(0);
  };
  await mcp.server.connect(transport);
  let outputClosed = false;
  const answers = trackAnswers(transport, () => !outputClosed);
  // SIGTERM, SIGINT or the end of stdin (how an MCP host ends a stdio server): no request is read any more, those in
  // flight answer (a submission's answer carries the execution and its idempotency key) for up to SHUTDOWN_GRACE_MS,
  // then the process exits 0 — or 1 if the grace ran out first, saying how many went unanswered. Node's default for the signals killed it at once, answers and all.
  let stopping = false;
  const stop = (why: string) => {
    if (stopping) return;
    stopping = true;
    process.stdin.pause();
    // A wait changes nothing and could hold the stop for up to 50 s, past the grace, unanswered: it answers now with
    // the current state. A submission or a cancel is given the grace to answer.
    void mcp.stopWaits();
    const inFlight = answers.count();
    if (inFlight > 0) process.stderr.write(`verity-mcp: ${why}: answering ${inFlight} request(s) in flight first\n`);
    const grace = new Promise<'grace'>((resolve) => setTimeout(() => resolve('grace'), SHUTDOWN_GRACE_MS).unref());
    const stopped = Promise.race([answers.idle(), grace]).then((ended) => {
      if (ended !== 'grace') return mcp.server.close();
      // The grace ran out with requests unanswered: a forced exit, 1, as every Verity process's (closing the server
      // exited 0 as if all had been answered, and the host could not tell).
      process.stderr.write(
        `verity-mcp: ${why}: the grace (${SHUTDOWN_GRACE_MS / 1000} s) ran out; ${answers.count()} request(s) in ` +
          'flight went unanswered (a submission among them may have been made: read the executions before ' +
          'submitting again)\n',
      );
      process.exit(1);
    });
    exitOnRejection(stopped, `${why}: closing`);
  };
  // A host that quits closes our output with our input: an answer written then (a wait stopped above answers at once)
  // failed with EPIPE, unheard, and the process crashed with exit 1. Nobody reads the answers any more: it stops as at
  // the end of its input, the requests in flight end without writing theirs, and it exits 0.
  process.stdout.on('error', (error: NodeJS.ErrnoException) => {
    outputClosed = true;
    stop(`output closed (${error.code ?? error.message})`);
  });
  // A signal once stopping (a second signal, or one after the end of input: how an MCP host that will not wait for the
  // grace asks again) stops it at once with exit 1, as the API's CLIs do, saying what went unanswered: ignored, the
  // process ran on for the grace whatever the host asked.
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) {
      process.stderr.write(
        `verity-mcp: ${signal}: stopped at once; ${answers.count()} request(s) in flight went unanswered ` +
          '(a submission among them may have been made: read the executions before submitting again)\n',
      );
      process.exit(1);
    }
    stop(signal);
  };
  process.on('SIGTERM', () => onSignal('SIGTERM'));
  process.on('SIGINT', () => onSignal('SIGINT'));
  process.stdin.on('end', () => stop('end of input'));
}

if (require.main === module) {
  main().catch((error: unknown) => {
    process.stderr.write(`verity-mcp: ${(error as Error)?.message ?? String(error)}\n`);
    process.exit(1);
  });
}
