#!/usr/bin/env node
import { parseArgs } from 'node:util';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { Verity } from '../client';
import { createVerityMcpServer } from './server';
import { jsonRpcLines } from './stdio-lines';

const USAGE = `verity-mcp: the Verity MCP server over stdio, for desktop agents.

  verity-mcp --url http://localhost:3000 --key <api key>

  --url   the Verity API (or VERITY_URL)
  --key   a tenant's API key (or VERITY_API_KEY, preferred: arguments are visible to other local users)

Talks to Verity over its REST API with the key's tenant and role; stdout carries the protocol, stderr the messages.`;

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
  const lines = jsonRpcLines((message) => void transport.send(message));
  process.stdin.pipe(lines);
  const transport = new StdioServerTransport(lines);
  transport.onclose = () => {
    mcp.close();
    process.exit(0);
  };
  process.stdin.on('end', () => void mcp.server.close());
  await mcp.server.connect(transport);
}

if (require.main === module) {
  main().catch((error: unknown) => {
    process.stderr.write(`verity-mcp: ${(error as Error)?.message ?? String(error)}\n`);
    process.exit(1);
  });
}
