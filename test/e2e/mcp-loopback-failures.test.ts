import { request } from 'node:http';
import { createApiKey, revokeApiKey } from '@verity/persistence/api-keys';
import { DEMO, Stack } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import { expectDescribed } from '../support/openapi-validator';

interface ToolAnswer {
  status: number;
  isError: boolean;
  text: string;
}

/**
 * The MCP endpoint's tools call the REST API over loopback with the caller's key. Those calls come from 127.0.0.1, and
 * failed authentications are counted per client address: a key revoked while its MCP calls were under way made their
 * next loopback calls fail as 127.0.0.1's, and once the address had AUTH_FAILURES_PER_MINUTE of them every MCP tool
 * call of every tenant was refused (429 too-many-failed-authentications) for the minute. A loopback call made for a
 * client is that client's: counted against the address the client came from.
 */
describe('MCP loopback calls and the failed-authentication count', () => {
  let stack: Stack;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'mcp-loopback', env: { AUTH_FAILURES_PER_MINUTE: '1' } });
  }, 120_000);

  afterAll(async () => {
    await stack?.stop();
  });

  /** One JSON-RPC tools/call to /mcp from `from` (a loopback address of its own, as a client host would have). */
  function callTool(
    from: string,
    key: string,
    name: string,
    args: Record<string, unknown>,
    onProgress?: () => void,
  ): Promise<ToolAnswer> {
    const url = new URL(`${stack.apiUrl}/mcp`);
    const params = { name, arguments: args, ...(onProgress ? { _meta: { progressToken: 'p' } } : {}) };
    const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params });
    return new Promise((resolve, reject) => {
      const req = request(
        {
          host: url.hostname,
          port: url.port,
          path: '/mcp',
          method: 'POST',
          localAddress: from,
          headers: {
            authorization: `Bearer ${key}`,
            'content-type': 'application/json',
            accept: 'application/json, text/event-stream',
            'mcp-protocol-version': '2025-06-18',
          },
        },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => {
            text += chunk;
            if (text.includes('notifications/progress')) onProgress?.();
          });
          res.on('end', () => {
            void expectDescribed('POST', url.href, { status: res.statusCode ?? 0, headers: res.headers, body: text })
              .then(() => {
                // The answer is the last message (progress notifications come before it).
                const data = [...text.matchAll(/^data: (.*)$/gm)].map((m) => m[1]).pop();
                const message = data
                  ? (JSON.parse(data) as { result?: { isError?: boolean; content: { text: string }[] } })
                  : undefined;
                resolve({
                  status: res.statusCode ?? 0,
                  isError: message?.result?.isError === true,
                  text: message?.result?.content.map((c) => c.text).join('\n') ?? text,
                });
              })
              .catch(reject);
          });
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  }

  it('a key revoked under its waits does not lock every other tenant out of the MCP tools', async () => {
    const attacker = await createApiKey(stack.db.dataSource.manager, {
      tenantId: 'demo',
      role: 'agent',
      label: unique('to-revoke'),
    });
    const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: attacker.key,
      body: submission([charge(unique('held'), { requires_approval: true })]),
    });
    expect(created.status).toBe(201);
    // Waits that read the execution again when their stream ends: after the revocation, over loopback, as the key's.
    // Each has its stream once it has sent a progress notification (the stream replays the execution's events).
    const streaming: Promise<void>[] = [];
    const waits = Array.from({ length: 5 }, () => {
      let started!: () => void;
      streaming.push(new Promise<void>((resolve) => (started = resolve)));
      return callTool(
        '127.0.0.5',
        attacker.key,
        'wait_for_execution',
        { execution_id: created.body.id, timeout_seconds: 30 },
        () => started(),
      );
    });
    await Promise.all(streaming);
    expect(await revokeApiKey(stack.db.dataSource.manager, attacker.id)).toBe(true);
    const ended = await Promise.all(waits);
    // Each wait ended refused (401, or 429 once the first failure had blocked the address), as a tool error.
    expect(ended.every((w) => w.status === 200 && w.isError)).toBe(true);
    // Another tenant's agent on another host: its MCP calls still work.
    const other = await callTool('127.0.0.6', DEMO.otherAgent, 'list_connectors', {});
    expect(other.text).not.toContain('too-many-failed-authentications');
    expect(other).toMatchObject({ status: 200, isError: false });
    expect(other.text).toContain('sandbox.payments');
    // The failures are the revoked key's client's: that address is the one held back, whatever key it shows now.
    const attackerAgain = await callTool('127.0.0.5', DEMO.agent, 'list_connectors', {});
    expect(attackerAgain.status).toBe(429);
    expect(attackerAgain.text).toContain('too-many-failed-authentications');
  });
});
