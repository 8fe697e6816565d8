import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport, getDefaultEnvironment } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CallToolResultSchema,
  type CallToolResult,
  ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { Verity, type Execution, type OperationDetail } from '@verity/sdk';
import { type ExecutionReport, type HistoryCut, type OperationVerdict, createVerityMcpServer } from '@verity/sdk/mcp';
import { charge, http } from '../support/http';
import { DEMO, DIST, Stack } from '../support/stack';
import { type Event, resetSandbox, statusPath, submit, waitForOp } from './dispatcher-helpers';
import { MCP_TOOLS } from '../support/mcp-tools';

/**
 * The MCP server, driven by the MCP SDK's own client: over Streamable HTTP at the API's /mcp, and through the
 * `verity-mcp` stdio entry point (the compiled bin) talking to the same stack over REST.
 */
const STDIO_BIN = join(DIST, 'libs', 'sdk', 'src', 'mcp', 'stdio.js');

const unique = (prefix: string) => `${prefix}-${randomUUID()}`;

function chargeSubmission(reference: string) {
  return {
    agent_id: 'mcp-e2e',
    intent: `charge ${reference}`,
    operations: [charge(reference)],
  };
}

interface ExecutionResult {
  idempotency_key?: string;
  replayed?: boolean;
  timed_out?: boolean;
  report: ExecutionReport;
  execution: Execution;
}

function textOf(result: CallToolResult): string {
  return result.content.map((c) => (c.type === 'text' ? c.text : '')).join('\n');
}

async function call<T = ExecutionResult>(
  client: Client,
  name: string,
  args: Record<string, unknown>,
  onprogress?: (message: string) => void,
): Promise<{ result: CallToolResult; text: string; data: T }> {
  const result = (await client.callTool({ name, arguments: args }, CallToolResultSchema, {
    onprogress: onprogress ? (p) => onprogress(p.message ?? '') : undefined,
    timeout: 58_000,
  })) as CallToolResult;
  return { result, text: textOf(result), data: result.structuredContent as T };
}

let stack: Stack;
const clients: Client[] = [];

async function httpClient(key: string): Promise<Client> {
  const client = new Client({ name: 'verity-mcp-e2e', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(`${stack.apiUrl}/mcp`), {
    requestInit: { headers: { authorization: `Bearer ${key}` } },
  });
  await client.connect(transport);
  clients.push(client);
  return client;
}

async function stdioClient(key: string): Promise<Client> {
  const client = new Client({ name: 'verity-mcp-e2e-stdio', version: '1.0.0' });
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [STDIO_BIN, '--url', stack.apiUrl],
    env: { ...getDefaultEnvironment(), VERITY_API_KEY: key },
    stderr: 'pipe',
  });
  await client.connect(transport);
  clients.push(client);
  return client;
}

beforeAll(async () => {
  stack = await Stack.start({ label: 'mcp' });
}, 120_000);

afterAll(async () => {
  await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
  await stack?.stop();
});

describe('MCP over Streamable HTTP at /mcp', () => {
  it('lists the six tools, each description carrying the rules, and the execution resource template', async () => {
    const client = await httpClient(DEMO.agent);
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(MCP_TOOLS);
    for (const tool of tools) {
      expect(tool.description).toContain('never retry them');
      expect(tool.description).toContain('ACKNOWLEDGED means the provider accepted the request; it is not proof');
      expect(tool.description).toContain('Only FAILED and CANCELLED operations may be retried');
    }
    // The input schema is the submission's, plus the idempotency key.
    const submit = tools.find((t) => t.name === 'submit_execution')!;
    expect(Object.keys(submit.inputSchema.properties ?? {}).sort()).toEqual(
      ['agent_id', 'criteria', 'deadline_seconds', 'idempotency_key', 'intent', 'operations'].sort(),
    );
    expect(submit.inputSchema.required).toEqual(expect.arrayContaining(['agent_id', 'intent', 'operations']));
    const { resourceTemplates } = await client.listResourceTemplates();
    expect(resourceTemplates.map((t) => t.uriTemplate)).toContain('verity://executions/{id}');
    // Stateless HTTP offers no subscriptions (nothing would carry the notifications).
    expect(client.getServerCapabilities()?.resources?.subscribe).toBeFalsy();
  });

  it('lists each connector with its limitations in words and as JSON', async () => {
    const client = await httpClient(DEMO.agent);
    const { text, data } = await call<{ connectors: { name: string; limitations: string[] }[] }>(
      client,
      'list_connectors',
      {},
    );
    const sms = data.connectors.find((c) => c.name === 'sandbox.sms')!;
    expect(sms.limitations.join('\n')).toContain('cannot read back');
    expect(sms.limitations.join('\n')).toContain('no provider idempotency');
    expect(text).toContain('sandbox.payments');
    expect(text).toContain('cannot read back: its operations end ACKNOWLEDGED at best');
  });

  it('tells the UNKNOWN → VERIFIED story of a charge whose answer was lost, charged once', async () => {
    const client = await httpClient(DEMO.agent);
    const reference = unique('mcp-order');
    // The provider commits the charge, then the answer never arrives: UNKNOWN, reconciled from the source.
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/charges', fault: 'timeout_after_commit', count: 1 }],
    });
    const submitted = await call(client, 'submit_execution', chargeSubmission(reference));
    expect(submitted.result.isError).toBeFalsy();
    const key = submitted.data.idempotency_key!;
    expect(key).toMatch(/^[0-9a-f-]{36}$/); // none given: one was generated and sent
    expect(submitted.text).toContain(`idempotency key ${key}`);
    const id = submitted.data.execution.id;

    const progress: string[] = [];
    const waited = await call(client, 'wait_for_execution', { execution_id: id, timeout_seconds: 45 }, (m) =>
      progress.push(m),
    );
    expect(waited.data.timed_out).toBe(false);
    expect(waited.data.report).toMatchObject({ execution_id: id, execution_status: 'completed', settled: true });
    const charge = waited.data.report.operations[0];
    expect(charge.status).toBe('VERIFIED');
    expect(charge.history).toEqual(['PREPARED', 'SENT', 'UNKNOWN', 'RECONCILING', 'VERIFIED']);
    // The words: the execution status apart from the effect, the effect confirmed from the source.
    expect(waited.text).toContain(`Execution ${id} status: completed (where the agent’s work stands`);
    expect(waited.text).toContain('is VERIFIED: confirmed by reading it back from the source');
    expect(waited.text).toContain('history: PREPARED → SENT → UNKNOWN → RECONCILING → VERIFIED');
    // Progress notifications told the same story as it unfolded (the stream replays from the first event).
    expect(progress.some((m) => m.endsWith('SENT → UNKNOWN'))).toBe(true);
    expect(progress.some((m) => m.endsWith('RECONCILING → VERIFIED'))).toBe(true);

    const op = await call<{ report: OperationVerdict; operation: OperationDetail }>(client, 'get_operation', {
      operation_id: charge.id,
    });
    expect(op.data.operation.evidence).not.toBeNull();
    expect(op.text).toContain('History: PREPARED → SENT → UNKNOWN → RECONCILING → VERIFIED');
    expect(op.text).toContain('Retry rule: not_needed');

    // The same key and body: the same execution, no second charge.
    const again = await call(client, 'submit_execution', { ...chargeSubmission(reference), idempotency_key: key });
    expect(again.data).toMatchObject({ replayed: true, idempotency_key: key });
    expect(again.data.execution.id).toBe(id);
    expect((await stack.effects()).charges[reference].count).toBe(1);

    // The resource holds the same state.
    const read = await client.readResource({ uri: `verity://executions/${id}` });
    const body = JSON.parse((read.contents[0] as { text: string }).text) as { report: ExecutionReport };
    expect(body.report.operations[0]).toMatchObject({ status: 'VERIFIED', history: charge.history });
  });

  it('states an UNKNOWN operation in words that forbid a retry, and cancel does not claim it did not happen', async () => {
    const client = await httpClient(DEMO.agent);
    const reference = unique('mcp-unknown');
    // The answer is lost and the source cannot be read: the charge stays UNKNOWN / RECONCILING for a while.
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/charges', fault: 'timeout_after_commit', count: 1 }],
      read_fault: 'unavailable',
    });
    try {
      const { data } = await call(client, 'submit_execution', chargeSubmission(reference));
      const id = data.execution.id;
      let seen: { text: string; data: ExecutionResult };
      do {
        seen = await call(client, 'get_execution', { execution_id: id });
      } while (!['UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW'].includes(seen.data.report.operations[0].status));
      // UNKNOWN, or mid-check RECONCILING, or (budget spent) MANUAL_REVIEW: each says it may have happened.
      expect(seen.text).toMatch(/is (UNKNOWN|RECONCILING|MANUAL_REVIEW): .*may have happened[.;] do not retry it/i);
      expect(seen.data.report.operations[0].retry).toMatch(/forbidden|wait|console/);

      const cancelled = await call(client, 'cancel_execution', { execution_id: id, reason: 'mcp e2e' });
      expect(cancelled.data.execution.status).toBe('cancelled');
      const after = cancelled.data.report.operations[0];
      expect(['UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW']).toContain(after.status);
      expect(after.effect).toMatch(/may have happened/);
    } finally {
      await stack.setFaults({ rules: [], read_fault: null });
    }
  });

  it('returns the current state, not an error, when the wait runs out before the execution settles', async () => {
    const client = await httpClient(DEMO.agent);
    const submission = chargeSubmission(unique('held'));
    // Held for a reviewer's approval that never comes: it cannot settle within the wait.
    Object.assign(submission.operations[0], { requires_approval: true });
    const { data } = await call(client, 'submit_execution', submission);
    const waited = await call(client, 'wait_for_execution', { execution_id: data.execution.id, timeout_seconds: 1 });
    expect(waited.result.isError).toBeFalsy();
    expect(waited.data.timed_out).toBe(true);
    expect(waited.data.report).toMatchObject({ settled: false });
    expect(waited.data.report.operations[0].status).toBe('PREPARED');
    expect(waited.text).toContain('Not settled after 1 s; this is the current state');
    expect(waited.text).toContain('PREPARED: recorded, not sent yet');
  });

  it('passes the API’s refusals through as tool errors naming the field and the rule', async () => {
    const client = await httpClient(DEMO.agent);
    const submission = chargeSubmission(unique('bad'));
    submission.operations[0].connector = 'no.such.connector';
    const { result, text } = await call(client, 'submit_execution', submission);
    expect(result.isError).toBe(true);
    expect(text).toContain('400 validation-error');
    expect(text).toContain('operations[0].connector');
  });

  it('refuses an id argument that is not an id (a dot segment would make the tool ask another route)', async () => {
    const client = await httpClient(DEMO.agent);
    for (const [tool, args] of [
      ['get_execution', { execution_id: '..' }],
      ['cancel_execution', { execution_id: '.' }],
      ['wait_for_execution', { execution_id: '../events', timeout_seconds: 1 }],
      ['get_operation', { operation_id: '..' }],
    ] as const) {
      const outcome = await call(client, tool, args).then(
        ({ result, text }) => ({ isError: result.isError, text }),
        (error: Error) => ({ isError: true, text: error.message }),
      );
      expect(outcome.isError).toBe(true);
      expect(outcome.text).toMatch(/an id that starts with (exe|op)_/);
      expect(outcome.text).not.toContain('no route');
    }
    // A URL parser resolves `..` (also written %2E%2E) before the request; an encoded slash it keeps, and once decoded
    // it is no execution id either: refused before any call to the API.
    const uri = 'verity://executions/exe_1%2F..%2F..%2Fevents';
    await expect(client.readResource({ uri })).rejects.toMatchObject({
      code: -32602,
      message: expect.stringContaining(`Resource ${uri} not found (not an execution id)`),
    });
  });

  it('refuses a wrong key and an operator key, exactly as /v1 does', async () => {
    await expect(httpClient('not-a-real-key')).rejects.toThrow(/401/);
    await expect(httpClient(DEMO.operator)).rejects.toThrow(/403/);
    const res = await fetch(`${stack.apiUrl}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    expect(res.status).toBe(401);
    expect(res.headers.get('content-type')).toContain('application/problem+json');
    // GET and DELETE are no operation of /mcp: 405 with Allow, key or none (as the document and the transport's spec
    // say), not a 401 the document does not describe for them. Nor PUT and PATCH (they answered 404 "no route").
    for (const method of ['GET', 'DELETE', 'PUT', 'PATCH']) {
      for (const headers of [
        {} as Record<string, string>,
        { authorization: 'Bearer not-a-real-key' },
        { authorization: `Bearer ${DEMO.agent}` },
      ]) {
        const refused = await fetch(`${stack.apiUrl}/mcp`, {
          method,
          headers: { accept: 'text/event-stream', ...headers },
        });
        expect([method, refused.status, refused.headers.get('allow')]).toEqual([method, 405, 'OPTIONS, POST']);
      }
    }
  });

  it('shows no execution of another tenant, as a tool or as a resource', async () => {
    const mine = await httpClient(DEMO.agent);
    const { data } = await call(mine, 'submit_execution', chargeSubmission(unique('mine')));
    const id = data.execution.id;
    const theirs = await httpClient(DEMO.otherAgent);
    for (const tool of ['get_execution', 'wait_for_execution', 'cancel_execution']) {
      const { result, text } = await call(theirs, tool, { execution_id: id });
      expect(result.isError).toBe(true);
      expect(text).toContain('404 not-found');
    }
    const op = await call(theirs, 'get_operation', { operation_id: data.execution.operations[0].id });
    expect(op.text).toContain('404 not-found');
    // Not found, as the MCP SDK answers an unknown resource — not an internal error of the server.
    await expect(theirs.readResource({ uri: `verity://executions/${id}` })).rejects.toMatchObject({
      code: -32602,
      message: expect.stringContaining(`Resource verity://executions/${id} not found`),
    });
    const { resources } = await theirs.listResources();
    expect(resources.map((r) => r.uri)).not.toContain(`verity://executions/${id}`);
  });

  it('lists an execution whose intent has an emoji at the title’s cut without half of it (valid Unicode)', async () => {
    // The title is the intent's first 200 UTF-16 units: the 200th is here the first half of 😀. Cut there, the
    // answer carried `"\ud83d"`, which strict JSON readers (Rust's serde_json, a UTF-8 encode in Python) refuse:
    // the whole page of resources became unreadable to such a client.
    const intent = `${'a'.repeat(199)}\u{1F600} and more`;
    const created = await submit(stack, [chargeSubmission(unique('emoji-title')).operations[0]], { intent });
    const mine = await httpClient(DEMO.agent);
    const { resources } = await mine.listResources();
    const listed = resources.find((r) => r.uri === `verity://executions/${created.id}`);
    expect(listed?.title).toBe('a'.repeat(199));
  });
});

describe('MCP through the verity-mcp stdio entry point', () => {
  it('lists the tools and notifies updates of a subscribed execution; an SMS ends ACKNOWLEDGED, not proof', async () => {
    const client = await stdioClient(DEMO.agent);
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(MCP_TOOLS);
    expect(client.getServerCapabilities()?.resources?.subscribe).toBe(true);

    const { data } = await call(client, 'submit_execution', {
      agent_id: 'mcp-e2e',
      intent: 'notify',
      operations: [
        {
          key: 'notify',
          connector: 'sandbox.sms',
          action: 'send',
          params: { to: '+15550100', body: 'hi', client_ref: unique('sms') },
        },
      ],
    });
    const uri = `verity://executions/${data.execution.id}`;
    const updated = new Promise<string>((resolve) =>
      client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => resolve(n.params.uri)),
    );
    await client.subscribeResource({ uri });
    expect(await updated).toBe(uri);

    const waited = await call(client, 'wait_for_execution', { execution_id: data.execution.id, timeout_seconds: 45 });
    expect(waited.data.report.settled).toBe(true);
    expect(waited.data.report.operations[0].status).toBe('ACKNOWLEDGED');
    expect(waited.text).toContain(
      'ACKNOWLEDGED: the provider accepted the request, nothing confirms the effect, and nothing ever will',
    );
    expect(waited.text).toContain('ACKNOWLEDGED is not proof');
  });

  it('refuses a subscription to another tenant’s execution, and malformed resource URIs, as not found', async () => {
    const mine = await stdioClient(DEMO.agent);
    const { data } = await call(mine, 'submit_execution', chargeSubmission(unique('sub-mine')));
    const theirs = await stdioClient(DEMO.otherAgent);
    const notFound = (uri: string) => ({ code: -32602, message: expect.stringContaining(uri) });
    const uri = `verity://executions/${data.execution.id}`;
    await expect(theirs.subscribeResource({ uri })).rejects.toMatchObject(notFound(`Resource ${uri} not found`));
    for (const malformed of ['verity://executions/%ZZ', 'verity://executions/exe_1%E0%A4%A']) {
      await expect(theirs.subscribeResource({ uri: malformed })).rejects.toMatchObject(notFound(malformed));
      await expect(theirs.readResource({ uri: malformed })).rejects.toMatchObject(notFound(malformed));
    }
    await expect(theirs.subscribeResource({ uri: 'verity://other/x' })).rejects.toMatchObject(
      notFound('not an execution resource: verity://other/x'),
    );
  });

  it('answers with the API’s refusal when the key is wrong', async () => {
    const client = await stdioClient('not-a-real-key');
    const { result, text } = await call(client, 'list_connectors', {});
    expect(result.isError).toBe(true);
    expect(text).toContain('401 unauthorized');
  });
});

/**
 * The histories the tools show are built from every event of the execution, page after page, not from the first page
 * only. An MCP server in this process, with a small page size, against the same stack: an operation held for review,
 * many "still unknown" investigations (events), then resolved — its history must reach its current status.
 */
describe('MCP histories read every page of events', () => {
  const PAGE = 5;
  let executionId: string;
  let operationId: string;
  let log: Event[];

  async function inProcessClient(options: { historyPageSize: number; maxHistoryEvents?: number }): Promise<Client> {
    const mcp = createVerityMcpServer({
      client: new Verity({ baseUrl: stack.apiUrl, apiKey: DEMO.agent }),
      ...options,
    });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await mcp.server.connect(serverSide);
    const client = new Client({ name: 'verity-mcp-e2e-paging', version: '1.0.0' });
    await client.connect(clientSide);
    clients.push(client);
    return client;
  }

  async function allEvents(id: string): Promise<Event[]> {
    const out: Event[] = [];
    let after = '';
    for (;;) {
      const page = await http<{ data: Event[]; next_cursor: string | null }>(
        stack.apiUrl,
        'GET',
        `/v1/executions/${id}/events?limit=1000${after ? `&after=${after}` : ''}`,
        { key: DEMO.agent },
      );
      out.push(...page.body.data);
      if (!page.body.next_cursor) return out;
      after = page.body.next_cursor;
    }
  }

  beforeAll(async () => {
    // Held: the charge is made, its read-back lacks the field, so a person must decide (MANUAL_REVIEW).
    await stack.setFaults({ read_fault: 'field_missing' });
    const created = await submit(stack, [chargeSubmission(unique('mcp-pages')).operations[0]]);
    executionId = created.id;
    const held = await waitForOp(stack, executionId, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    operationId = held.id;
    await resetSandbox(stack);
    const resolve = (body: unknown) =>
      http(stack.apiUrl, 'POST', `/v1/operations/${operationId}/resolve`, { key: DEMO.reviewer, body });
    // Many "still unknown after investigation" records: events after the hold, none a status change.
    for (let i = 0; i < 4 * PAGE; i += 1) {
      expect((await resolve({ status: 'MANUAL_REVIEW', evidence: `still unknown, look ${i}` })).status).toBe(200);
    }
    expect((await resolve({ status: 'VERIFIED', evidence: 'the provider confirmed the charge' })).status).toBe(200);
    log = await allEvents(executionId);
    expect(log.length).toBeGreaterThan(5 * PAGE);
    expect(statusPath(log, operationId).slice(-2)).toEqual(['MANUAL_REVIEW', 'VERIFIED']);
  }, 120_000);

  it('get_operation shows the whole history, up to the current status, however many pages it takes', async () => {
    const client = await inProcessClient({ historyPageSize: PAGE });
    const op = await call<{ report: OperationVerdict; operation: OperationDetail; history_cut?: HistoryCut }>(
      client,
      'get_operation',
      { operation_id: operationId },
    );
    expect(op.result.isError).toBeFalsy();
    expect(op.data.operation.status).toBe('VERIFIED');
    expect(op.data.report.history).toEqual(statusPath(log, operationId));
    expect(op.data.report.history!.slice(-2)).toEqual(['MANUAL_REVIEW', 'VERIFIED']);
    expect(op.text).toContain(`History: ${statusPath(log, operationId).join(' → ')}`);
    expect(op.text).not.toContain('History cut');
    expect(op.data.history_cut).toBeUndefined();
    // The execution's tools read the same way.
    const got = await call(client, 'get_execution', { execution_id: executionId });
    expect(got.data.report.operations[0].history).toEqual(statusPath(log, operationId));
  });

  it('past its bound it says the history was cut and where the rest starts, never silently', async () => {
    const bound = 2 * PAGE + 2;
    const client = await inProcessClient({ historyPageSize: PAGE, maxHistoryEvents: bound });
    const op = await call<{ report: OperationVerdict; history_cut?: HistoryCut }>(client, 'get_operation', {
      operation_id: operationId,
    });
    expect(op.data.history_cut).toEqual({
      events_read: bound,
      events_left_out: 'unknown (at least one)',
      next_cursor: log[bound - 1].id,
    });
    expect(op.text).toContain(`History cut: only the first ${bound} events of this execution were read`);
    expect(op.text).toContain(`?after=${log[bound - 1].id}`);
    const got = await call<ExecutionResult & { history_cut?: HistoryCut }>(client, 'get_execution', {
      execution_id: executionId,
    });
    expect(got.data.history_cut).toMatchObject({ events_read: bound });
    expect(got.text).toContain('History cut');
    // A bound the log fits in exactly is no cut.
    const exact = await inProcessClient({ historyPageSize: PAGE, maxHistoryEvents: log.length });
    const whole = await call<{ history_cut?: HistoryCut }>(exact, 'get_operation', { operation_id: operationId });
    expect(whole.data.history_cut).toBeUndefined();
    expect(whole.text).not.toContain('History cut');
  });
});
