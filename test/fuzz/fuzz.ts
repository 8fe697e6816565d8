/**
 * The OpenAPI-driven fuzz: a real API (with Postgres and Redis) is started, a few executions are driven to real states
 * (verified, waiting for approval, manual review, another tenant's), the workers are then stopped so the API is the
 * only writer, and requests generated from /docs-json (see requests.ts) are sent one at a time. Each one must:
 * - be answered (no hang: a bound per request; a stream is aborted right after its first bytes),
 * - never be a 5xx,
 * - if it is a 4xx, be problem+json and leave every table exactly as it was (row count and the newest row version,
 *   xmin, of each table: an insert, an update or a delete each moves one of them),
 * and the API must still be ready at the end. Shared by the jest test (a bounded, seeded run) and `npm run fuzz`.
 */
import { request as httpRequest } from 'node:http';
import fc from 'fast-check';
import { createApiKey, revokeApiKey, rows } from '@verity/persistence';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, sms, submission, unique } from '../support/http';
import { Fixtures, FuzzRequest, OpenApiDocument, RequestFactory, operationsOf } from './requests';
import type { Execution } from '@verity/sdk';

export interface FuzzOptions {
  runs: number;
  seed: number;
  /** fast-check's replay path of a failure, with FUZZ_SEED. */
  path?: string;
  requestTimeoutMs?: number;
  log?: (line: string) => void;
}

export interface FuzzReport {
  requests: number;
  unsendable: number;
  byStatus: Record<string, number>;
  byOperation: Record<string, Record<string, number>>;
  operations: number;
  seconds: number;
  failure: string | null;
  readyAfter: boolean;
}

interface Answer {
  status: number;
  contentType: string;
  body: string;
}

const STREAM_ABORT_MS = 150;
/** Node's default --max-http-header-size (16 KiB), request line included. */
const MAX_HEADER_BYTES = 16 * 1024;

function headerBytes(req: FuzzRequest): number {
  return (
    req.method.length +
    req.path.length +
    Object.entries(req.headers).reduce(
      (n, [name, value]) => n + name.length + Buffer.byteLength(value, 'latin1') + 4,
      0,
    )
  );
}

/** One request on its own connection; resolves with the answer, rejects when there is none in `timeoutMs`. */
export function send(base: URL, req: FuzzRequest, timeoutMs: number): Promise<Answer | 'unsendable'> {
  const payload =
    req.bodyHex !== undefined
      ? Buffer.from(req.bodyHex, 'hex')
      : req.body !== undefined
        ? Buffer.from(req.body, 'utf8')
        : undefined;
  return new Promise((resolve, reject) => {
    let settled = false;
    const finish = (fn: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      fn();
    };
    let client: ReturnType<typeof httpRequest>;
    try {
      client = httpRequest({
        host: base.hostname,
        port: base.port,
        method: req.method,
        path: req.path,
        agent: false,
        headers: { ...req.headers, ...(payload ? { 'content-length': String(payload.length) } : {}) },
      });
    } catch (error) {
      // Node refuses to put some generated headers or paths on the wire; the server never sees them.
      const code = (error as { code?: string }).code ?? '';
      if (/ERR_INVALID_CHAR|ERR_UNESCAPED_CHARACTERS|ERR_INVALID_HTTP_TOKEN/.test(code)) {
        resolve('unsendable');
        return;
      }
      reject(error as Error);
      return;
    }
    const timer = setTimeout(() => {
      finish(() => reject(new Error(`no complete answer within ${timeoutMs} ms (a hang)`)));
      client.destroy();
    }, timeoutMs);
    client.on('error', (error) => {
      const code = (error as { code?: string }).code ?? '';
      if (['ECONNRESET', 'EPIPE'].includes(code) && headerBytes(req) > MAX_HEADER_BYTES) {
        // Node's parser answers 431 to headers over its limit and closes the socket at once; a client still sending
        // its body sees the reset before it can read the 431. Nothing of ours ran.
        finish(() => resolve({ status: 431, contentType: '', body: `(${code} while sending: headers too large)` }));
        return;
      }
      finish(() => reject(new Error(`request failed: ${error.message}`)));
    });
    client.on('response', (res) => {
      const contentType = String(res.headers['content-type'] ?? '');
      const status = res.statusCode ?? 0;
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (chunk: Buffer) => {
        if (size < 64 * 1024) chunks.push(chunk);
        size += chunk.length;
      });
      const done = () => finish(() => resolve({ status, contentType, body: Buffer.concat(chunks).toString('utf8') }));
      if (contentType.startsWith('text/event-stream')) {
        // A stream stays open by design: what matters is that it answered; the client goes away right after.
        setTimeout(() => {
          done();
          client.destroy();
        }, STREAM_ABORT_MS);
        return;
      }
      res.on('end', done);
      res.on('error', (error) => finish(() => reject(new Error(`response failed: ${error.message}`))));
    });
    client.end(payload);
  });
}

/**
 * /mcp speaks JSON-RPC 2.0: the MCP transport's own refusals (a missing Accept, a batch it cannot take) are JSON-RPC
 * error objects, the format MCP clients read, not problem+json.
 */
export function isJsonRpcError(operation: string, answer: Answer): boolean {
  if (!operation.endsWith(' /mcp') || !answer.contentType.startsWith('application/json')) return false;
  try {
    const body = JSON.parse(answer.body) as { jsonrpc?: unknown; error?: unknown };
    return body.jsonrpc === '2.0' && typeof body.error === 'object' && body.error !== null;
  } catch {
    return false;
  }
}

/** The names of the application's tables (schema public), for tableSignature. */
export async function publicTables(stack: Stack): Promise<string[]> {
  const found = (await stack.db.dataSource.query(`SELECT tablename FROM pg_tables WHERE schemaname = 'public'`)) as {
    tablename: string;
  }[];
  return found.map((t) => t.tablename);
}

/** Row count and newest row version of every table but the migrations log. */
export async function tableSignature(stack: Stack, tables: string[]): Promise<Record<string, string>> {
  const sql = tables
    .map(
      (t) => `SELECT '${t}' AS t, count(*)::text || '/' || coalesce(max(xmin::text::bigint), 0)::text AS s FROM ${t}`,
    )
    .join(' UNION ALL ');
  // A prepared statement (the same one query): parsing and planning a union over every table cost Postgres more
  // than reading them, and a sweep runs it after each of thousands of requests.
  const found = await rows<{ t: string; s: string }>(stack.db.dataSource.manager, sql);
  return Object.fromEntries(found.map((r) => [r.t, r.s]));
}

interface Op {
  id: string;
  status: string;
}

async function submitAs(stack: Stack, key: string, operations: unknown[]): Promise<Execution> {
  const res = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', { key, body: submission(operations) });
  if (res.status !== 201) throw new Error(`fixture submission refused: ${res.status} ${res.text}`);
  return res.body;
}

async function waitForStatus(stack: Stack, key: string, opId: string, statuses: string[]): Promise<void> {
  await waitFor(
    async () => (await http<Op>(stack.apiUrl, 'GET', `/v1/operations/${opId}`, { key })).body.status,
    (status) => statuses.includes(status),
    60_000,
  );
}

/** The executions buildFixtures drove to their states, by state. */
export interface FixtureStates {
  /** A charge VERIFIED and an SMS ACKNOWLEDGED. */
  verified: Execution;
  /** Three charges held for approval (waiting_for_approval). */
  waiting: Execution;
  /** Cancelled while its charge waited for approval. */
  cancelled: Execution;
  /** A charge in MANUAL_REVIEW (its read-back disagreed). */
  held: Execution;
  /** Another tenant's, waiting for approval. */
  foreign: Execution;
}

/** Real ids in real states, then the workers stop: from here on only the API can write. */
export async function buildFixtures(stack: Stack): Promise<Fixtures & { states: FixtureStates }> {
  const verified = await submitAs(stack, DEMO.agent, [charge(unique('fz-ok')), sms(unique('fz-sms'))]);
  // Three held for approval: the first decision the fuzz makes on one uses it up (later ones are 409s).
  const waiting = await submitAs(
    stack,
    DEMO.agent,
    ['a', 'b', 'c'].map((k) => ({
      ...charge(unique(`fz-appr-${k}`), { requires_approval: true }),
      key: `charge-${k}`,
    })),
  );
  const cancelled = await submitAs(stack, DEMO.agent, [charge(unique('fz-cancel'), { requires_approval: true })]);
  const foreign = await submitAs(stack, DEMO.otherAgent, [charge(unique('fz-other'), { requires_approval: true })]);
  // A charge is read back (VERIFIED); an SMS has no read-back and stays ACKNOWLEDGED.
  for (const op of verified.operations) await waitForStatus(stack, DEMO.agent, op.id, ['VERIFIED', 'ACKNOWLEDGED']);
  await waitFor(
    async () =>
      (await http<{ status: string }>(stack.apiUrl, 'GET', `/v1/executions/${waiting.id}`, { key: DEMO.agent })).body
        .status,
    (status) => status === 'waiting_for_approval',
    60_000,
  );
  const cancel = await http(stack.apiUrl, 'POST', `/v1/executions/${cancelled.id}/cancel`, {
    key: DEMO.agent,
    body: { reason: 'fixture' },
  });
  if (cancel.status !== 200) throw new Error(`fixture cancel refused: ${cancel.status} ${cancel.text}`);

  await stack.setFaults({ read_fault: 'amount_mismatch' });
  const held = await submitAs(stack, DEMO.agent, [charge(unique('fz-held'))]);
  await waitForStatus(stack, DEMO.agent, held.operations[0].id, ['MANUAL_REVIEW']);
  await stack.setFaults({ rules: [], replica_lag_ms: 0, read_fault: null });

  const settings = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
    key: DEMO.admin,
    body: {
      allow_hosts: [{ host: 'api.example.com', secrets: ['TOKEN'] }],
      secrets: { TOKEN: 'fuzz-secret-value-1' },
    },
  });
  if (settings.status !== 200) throw new Error(`fixture settings refused: ${settings.status} ${settings.text}`);

  for (const app of [...stack.running('dispatcher'), ...stack.running('reconciler')]) await stack.kill(app, 'SIGTERM');

  const manager = stack.db.dataSource.manager;
  const operator = await createApiKey(manager, { tenantId: null, role: 'operator', label: 'fuzz-operator' });
  const revoked = await createApiKey(manager, { tenantId: 'demo', role: 'admin', label: 'fuzz-revoked' });
  await revokeApiKey(manager, revoked.id);

  type Listed = { name: string; actions?: { name: string }[] };
  const listed = await http<{ data: Listed[] }>(stack.apiUrl, 'GET', '/v1/connectors', { key: DEMO.agent });
  const list = listed.body.data;
  const actions = [...new Set(list.flatMap((c) => (c.actions ?? []).map((a) => a.name)))];

  const own = [verified, waiting, cancelled, held];
  const reference = unique('fz-tpl');
  return {
    states: { verified, waiting, cancelled, held, foreign },
    keys: {
      agent: DEMO.agent,
      reviewer: DEMO.reviewer,
      admin: DEMO.admin,
      other: DEMO.otherAgent,
      operator: operator.key,
      revoked: revoked.key,
    },
    ownExecutions: own.map((e) => e.id),
    ownOperations: own.flatMap((e) => e.operations.map((o) => o.id)),
    otherExecutions: [foreign.id],
    otherOperations: foreign.operations.map((o) => o.id),
    connectors: list.map((c) => c.name),
    actions: actions.length ? actions : ['charge', 'send', 'request'],
    operationKeys: ['charge', 'notify', 'a', 'b.c-d_e'],
    secretNames: ['TOKEN', 'OTHER'],
    templates: {
      Submission: [
        submission([charge(reference)]),
        submission([charge(`${reference}-a`, { requires_approval: true })]),
        submission([charge(`${reference}-b`), sms(`${reference}-c`, { depends_on: ['charge'] })], {
          criteria: [{ key: 'paid', operation: 'charge', expect_status: 'VERIFIED' }],
          deadline_seconds: 600,
        }),
        submission([
          {
            key: 'call',
            connector: 'http',
            action: 'request',
            params: {
              method: 'POST',
              url: 'https://api.example.com/x',
              headers: { authorization: '{{secret:TOKEN}}' },
            },
          },
        ]),
      ],
      'POST /mcp': [
        { jsonrpc: '2.0', id: 1, method: 'tools/list' },
        { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'list_connectors', arguments: {} } },
        {
          jsonrpc: '2.0',
          id: 3,
          method: 'tools/call',
          params: { name: 'get_execution', arguments: { execution_id: verified.id } },
        },
        { jsonrpc: '2.0', id: 4, method: 'resources/read', params: { uri: `verity://executions/${verified.id}` } },
      ],
      'PUT /v1/admin/connector-settings/{connector}': [
        { allow_hosts: [{ host: 'api.example.com', ports: [443], secrets: ['TOKEN'] }] },
        { spending_caps: [{ period: 'day', max_operations: 1000, max_amount: 100000, amount_field: 'amount' }] },
        { secrets: { TOKEN: 'fuzz-secret-value-2', OTHER: null } },
        {},
      ],
    },
  };
}

/** Starts everything, runs the property, stops everything. Never throws for a property failure: see `failure`. */
export async function runFuzz(options: FuzzOptions): Promise<FuzzReport> {
  const log = options.log ?? (() => undefined);
  const timeoutMs = options.requestTimeoutMs ?? 10_000;
  const stack = await Stack.start({
    label: 'fuzz',
    dispatchers: 1,
    reconcilers: 1,
    // One client sends thousands of requests, many with wrong keys: the limits would answer 429 to most of them.
    env: { RATE_LIMIT_PER_MINUTE: '100000000', AUTH_FAILURES_PER_MINUTE: '100000000' },
  });
  const report: FuzzReport = {
    requests: 0,
    unsendable: 0,
    byStatus: {},
    byOperation: {},
    operations: 0,
    seconds: 0,
    failure: null,
    readyAfter: false,
  };
  try {
    const fixtures = await buildFixtures(stack);
    const doc = (await (await fetch(`${stack.apiUrl}/docs-json`)).json()) as OpenApiDocument;
    const specs = operationsOf(doc);
    report.operations = specs.length;
    log(`fuzz: ${specs.length} operations from /docs-json, ${options.runs} runs, seed ${options.seed}`);
    const tables = (
      (await stack.db.dataSource.query(
        `SELECT table_name AS t FROM information_schema.tables
         WHERE table_schema = 'public' AND table_type = 'BASE TABLE' AND table_name <> 'migrations' ORDER BY 1`,
      )) as { t: string }[]
    ).map((r) => r.t);
    const base = new URL(stack.apiUrl);
    const factory = new RequestFactory(doc, fixtures);
    // The detector must see a write, an update that changes nothing included, or its silence proves nothing.
    const unchanged = await tableSignature(stack, tables);
    await stack.db.dataSource.query(`UPDATE tenants SET name = name WHERE id = 'demo'`);
    const touched = await tableSignature(stack, tables);
    if (touched.tenants === unchanged.tenants) throw new Error('the row check cannot see an update of tenants');
    let before = touched;
    const started = Date.now();

    const property = fc.asyncProperty(factory.any(specs), async (req) => {
      const answer = await send(base, req, timeoutMs);
      if (answer === 'unsendable') {
        report.unsendable += 1;
        return;
      }
      report.requests += 1;
      report.byStatus[answer.status] = (report.byStatus[answer.status] ?? 0) + 1;
      const perOp = (report.byOperation[req.operation] ??= {});
      perOp[answer.status] = (perOp[answer.status] ?? 0) + 1;
      const after = await tableSignature(stack, tables);
      const previous = before;
      before = after;
      const said = `${answer.status} ${answer.contentType} ${answer.body.slice(0, 600)}`;
      if (answer.status >= 500) throw new Error(`5xx: ${said}`);
      if (answer.status >= 400) {
        // 431 comes from Node's HTTP parser (headers too large), before any code of ours runs.
        if (
          answer.status !== 431 &&
          !answer.contentType.startsWith('application/problem+json') &&
          !isJsonRpcError(req.operation, answer)
        ) {
          throw new Error(`4xx that is not problem+json: ${said}`);
        }
        const changed = tables.filter((t) => previous[t] !== after[t]);
        if (changed.length > 0) {
          throw new Error(
            `a ${answer.status} wrote rows: ${changed.map((t) => `${t} ${previous[t]} -> ${after[t]}`).join(', ')}; ${said}`,
          );
        }
      }
      if (report.requests % 500 === 0) {
        log(`fuzz: ${report.requests} requests, ${Math.round((Date.now() - started) / 1000)} s`);
        const ready = await http(stack.apiUrl, 'GET', '/health/ready');
        if (ready.status !== 200) throw new Error(`not ready after ${report.requests} requests: ${ready.text}`);
      }
    });
    try {
      await fc.assert(property, {
        numRuns: options.runs,
        seed: options.seed,
        ...(options.path ? { path: options.path } : {}),
        // The shrunk request, and what the API answered to it, in the report.
        includeErrorInReport: true,
      });
    } catch (error) {
      report.failure = (error as Error).message;
    }
    report.seconds = Math.round((Date.now() - started) / 100) / 10;
    const ready = await http(stack.apiUrl, 'GET', '/health/ready');
    report.readyAfter = ready.status === 200;
    if (!report.readyAfter) log(`not ready after the run: ${ready.status} ${ready.text}`);
    // Every stream the fuzz aborted gave its slot back: the agent can still open one.
    const stream = await send(
      base,
      {
        operation: 'check',
        role: 'agent',
        method: 'GET',
        path: `/v1/executions/${fixtures.ownExecutions[0]}/stream`,
        headers: { authorization: `Bearer ${DEMO.agent}` },
        stream: true,
      },
      timeoutMs,
    );
    if (stream === 'unsendable' || stream.status !== 200) {
      report.readyAfter = false;
      log(`a stream could not be opened after the run: ${JSON.stringify(stream)}`);
    }
    if (report.failure) log(`API log tail:\n${stack.logs('api').split('\n').slice(-40).join('\n')}`);
  } finally {
    await stack.stop();
  }
  return report;
}

export function formatReport(report: FuzzReport, seed: number): string {
  const statuses = Object.entries(report.byStatus)
    .sort(([a], [b]) => Number(a) - Number(b))
    .map(([s, n]) => `${s}: ${n}`)
    .join(', ');
  const perOperation = Object.entries(report.byOperation)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(
      ([op, counts]) =>
        `  ${op.padEnd(62)} ${Object.entries(counts)
          .map(([s, n]) => `${s}×${n}`)
          .join(' ')}`,
    )
    .join('\n');
  return [
    `fuzz seed ${seed} (replay: FUZZ_SEED=${seed}): ${report.requests} requests over ${report.operations} operations in ${report.seconds} s`,
    `statuses: ${statuses}${report.unsendable ? `; ${report.unsendable} generated requests Node would not send` : ''}`,
    perOperation,
    `ready after: ${report.readyAfter ? 'yes' : 'NO'}`,
    report.failure ? `FAILURE:\n${report.failure}` : 'no 5xx, no hang, no 4xx that wrote a row',
  ].join('\n');
}
