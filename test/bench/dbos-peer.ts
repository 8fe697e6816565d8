/**
 * The peer in the benchmark: the job of one Verity operation — charge once at the sandbox provider, then confirm the
 * charge by reading it back — written as a DBOS Transact workflow, the durable-workflow library a team would pick
 * instead of Verity. Two steps: POST /v1/charges with the workflow id as the Idempotency-Key, then GET the charge
 * back by reference, judged by the same settle rule Verity's reconciler applies (`decideReadBack`, the same settle
 * window, backoff and read budget from the same configuration). The HTTP calls are Verity's own sandbox payments
 * connector code (`httpExchange`, `classifySend`, `readBack`), so the two systems differ in the engine only.
 *
 * Run by `npm run bench` as a process of its own (like Verity's apps, so its CPU can be measured): a small HTTP
 * server. POST /charges {amount, currency, reference[, wait]} starts the workflow (id `charge-<reference>`, so a
 * repeated submission starts nothing new) and answers 201 {id} once DBOS has recorded it — or, with `wait: true`,
 * 200 {id, outcome} once it ended. GET /stats counts the outcomes of the workflows this process ran.
 */
import { createServer, IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DBOS } from '@dbos-inc/dbos-sdk';
import { OperationStatus, decideReadBack } from '@verity/status-model';
import { DEFAULT_REJECTION_STATUSES, classifySend } from '../../libs/connectors/src/classify';
import type { ConnectorEnvironment } from '../../libs/connectors/src/connector';
import { httpExchange } from '../../libs/connectors/src/http-exchange';
import { SANDBOX_ACCOUNT_HEADER, SandboxPaymentsConnector } from '../../libs/connectors/src/sandbox-payments.connector';
import { VerityConfig, loadConfig } from '../../libs/platform/src/config';

export interface PeerCharge {
  amount: number;
  currency: string;
  reference: string;
}

/** How a workflow ended, in Verity's words: VERIFIED is the only outcome the benchmark counts as done. */
export type PeerOutcome =
  | { status: 'VERIFIED'; chargeId: string; reads: number }
  | { status: 'FAILED' | 'UNKNOWN' | 'MANUAL_REVIEW'; detail: string; reads: number };

interface Sent {
  ok: boolean;
  detail: string;
  providerRef: Record<string, unknown> | null;
  at: number;
}

interface Read {
  kind: 'found' | 'mismatch' | 'absent' | 'stale' | 'field_missing' | 'unreachable';
  chargeId: string | null;
  at: number;
}

const connector = new SandboxPaymentsConnector();
/** The peer's tenant, only to fill the connector's operation shape: the connector's read-back never uses it. */
const TENANT = 'dbos-peer';

function environment(config: VerityConfig): ConnectorEnvironment {
  return { sandboxUrl: config.SANDBOX_URL, timeoutMs: config.CONNECTOR_TIMEOUT_MS };
}

/** Verity's read-again backoff (reconciler): READ_BACKOFF_MS doubling per check, at most READ_BACKOFF_MAX_MS. */
function backoff(config: VerityConfig, checks: number): number {
  return Math.min(config.READ_BACKOFF_MAX_MS, config.READ_BACKOFF_MS * 2 ** Math.max(0, checks - 1));
}

function registerChargeWorkflow(config: VerityConfig) {
  const env = environment(config);

  async function sendCharge(charge: PeerCharge, idempotencyKey: string): Promise<Sent> {
    const exchange = await httpExchange({
      method: 'POST',
      url: `${env.sandboxUrl}/v1/charges`,
      // The account the connector's readBack reads (its tenant), as Verity's charges carry their tenant's.
      headers: { 'idempotency-key': idempotencyKey, [SANDBOX_ACCOUNT_HEADER]: TENANT },
      body: { amount: charge.amount, currency: charge.currency, reference: charge.reference },
      timeoutMs: env.timeoutMs,
    });
    // The connector's own classification and provider reference (id, version, reference).
    const outcome = classifySend(exchange, {
      rejectionStatuses: DEFAULT_REJECTION_STATUSES,
      providerRef: (body) => {
        const c = (body ?? {}) as { id?: string; version?: number; reference?: string };
        return { id: c.id, version: c.version, reference: c.reference };
      },
    });
    return outcome.status === OperationStatus.ACKNOWLEDGED
      ? { ok: true, detail: outcome.detail, providerRef: outcome.providerRef, at: Date.now() }
      : { ok: false, detail: `${outcome.status}: ${outcome.detail}`, providerRef: null, at: Date.now() };
  }

  async function readCharge(charge: PeerCharge, providerRef: Record<string, unknown>, id: string): Promise<Read> {
    const read = await connector.readBack(
      { id, tenantId: TENANT, action: 'charge', params: { ...charge }, expectedState: null, providerRef },
      env,
    );
    const record = read.evidence.record;
    return { kind: read.kind, chargeId: typeof record?.id === 'string' ? record.id : null, at: Date.now() };
  }

  async function chargeWorkflow(charge: PeerCharge): Promise<PeerOutcome> {
    const id = DBOS.workflowID ?? charge.reference;
    // Step 1. DBOS records the step's result after it returns: a crash during the call re-runs it on recovery, and
    // the provider's Idempotency-Key (the workflow id) is what keeps that from charging twice.
    const sent = await DBOS.runStep(() => sendCharge(charge, id), { name: 'charge' });
    if (!sent.ok || !sent.providerRef) return { status: 'UNKNOWN', detail: sent.detail, reads: 0 };
    // Step 2, repeated as Verity's verify job is: the first read at once (VERIFY_FIRST_DELAY_MS 0), then backoff.
    for (let checks = 0; ; checks += 1) {
      const read = await DBOS.runStep(() => readCharge(charge, sent.providerRef ?? {}, id), { name: 'readBack' });
      const decision = decideReadBack({
        status: OperationStatus.ACKNOWLEDGED,
        read: read.kind,
        absenceIsProof: read.kind === 'absent' && read.at - sent.at >= config.SETTLE_WINDOW_MS,
        acknowledged: true,
        checksBefore: checks,
        budget: config.RECONCILE_BUDGET,
        sourceProvesAbsence: false,
      });
      const reads = checks + 1;
      switch (decision.kind) {
        case 'verified':
          return { status: 'VERIFIED', chargeId: read.chargeId ?? '', reads };
        case 'read-again':
          await DBOS.sleep(backoff(config, reads));
          continue;
        case 'hold':
          return { status: 'MANUAL_REVIEW', detail: decision.reason, reads };
        case 'failed':
          return { status: 'FAILED', detail: decision.reason, reads };
        case 'unknown':
        case 'unknown-again':
          // Verity would go on reconciling; the peer stops here, and the benchmark counts it as not done.
          return { status: 'UNKNOWN', detail: `read ${read.kind} after the settle window`, reads };
      }
    }
  }

  return DBOS.registerWorkflow(chargeWorkflow, { name: 'chargeWorkflow' });
}

export interface DbosPeerOptions {
  /** The DBOS system database (created and migrated by DBOS on launch if missing). */
  systemDatabaseUrl: string;
  /** Verity's configuration variables (SANDBOX_URL, CONNECTOR_TIMEOUT_MS, SETTLE_WINDOW_MS, READ_BACKOFF_*...). */
  env: NodeJS.ProcessEnv;
  port: number;
  /** DBOS's own pool size; its default (10) unless set. */
  poolSize?: number;
}

export interface DbosPeer {
  url: string;
  server: Server;
  stop(): Promise<void>;
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function answer(res: ServerResponse, status: number, body: unknown): void {
  const payload = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) });
  res.end(payload);
}

function parseCharge(text: string): (PeerCharge & { wait: boolean }) | null {
  try {
    const body = JSON.parse(text) as Record<string, unknown>;
    const { amount, currency, reference, wait } = body;
    if (typeof amount !== 'number' || typeof currency !== 'string' || typeof reference !== 'string') return null;
    return { amount, currency, reference, wait: wait === true };
  } catch {
    return null;
  }
}

export async function startDbosPeer(options: DbosPeerOptions): Promise<DbosPeer> {
  const config = loadConfig(options.env);
  const chargeWorkflow = registerChargeWorkflow(config);
  DBOS.setConfig({
    name: 'verity-bench-peer',
    systemDatabaseUrl: options.systemDatabaseUrl,
    ...(options.poolSize ? { systemDatabasePoolSize: options.poolSize } : {}),
    logLevel: 'warn',
  });
  await DBOS.launch();
  const outcomes: Record<string, number> = {};
  const count = (outcome: PeerOutcome) => (outcomes[outcome.status] = (outcomes[outcome.status] ?? 0) + 1);

  const server = createServer((req, res) => {
    void (async () => {
      if (req.method === 'GET' && req.url === '/stats') return answer(res, 200, { outcomes });
      if (req.method !== 'POST' || req.url !== '/charges') return answer(res, 404, { error: 'not found' });
      const charge = parseCharge(await readBody(req));
      if (!charge) return answer(res, 400, { error: 'amount, currency and reference are required' });
      const { wait, ...input } = charge;
      try {
        const handle = await DBOS.startWorkflow(chargeWorkflow, { workflowID: `charge-${input.reference}` })(input);
        const result = handle.getResult().then(
          (outcome) => {
            count(outcome);
            return outcome;
          },
          (error: unknown) => {
            outcomes.ERROR = (outcomes.ERROR ?? 0) + 1;
            throw error;
          },
        );
        if (!wait) {
          result.catch(() => undefined);
          return answer(res, 201, { id: handle.workflowID });
        }
        return answer(res, 200, { id: handle.workflowID, outcome: await result });
      } catch (error) {
        return answer(res, 503, { error: error instanceof Error ? error.message : String(error) });
      }
    })().catch(() => res.destroy());
  });
  server.keepAliveTimeout = 65_000;
  await new Promise<void>((resolve) => server.listen(options.port, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    server,
    stop: async () => {
      // Keep-alive connections of the load client would hold close() open: the answers are all sent by now.
      server.close();
      server.closeAllConnections();
      await DBOS.shutdown({ workflowCompletionTimeoutMS: 5_000 });
    },
  };
}

if (require.main === module) {
  const systemDatabaseUrl = process.env.DBOS_SYSTEM_DATABASE_URL;
  if (!systemDatabaseUrl) throw new Error('DBOS_SYSTEM_DATABASE_URL is required');
  startDbosPeer({
    systemDatabaseUrl,
    env: process.env,
    port: Number(process.env.PORT ?? 0),
    poolSize: process.env.DBOS_POOL_SIZE ? Number(process.env.DBOS_POOL_SIZE) : undefined,
  }).then(
    (peer) => {
      process.stdout.write(`dbos peer listening on ${peer.url}\n`);
      process.on('SIGTERM', () => void peer.stop().then(() => process.exit(0)));
    },
    (error: unknown) => {
      process.stderr.write(`dbos peer failed to start: ${error instanceof Error ? error.stack : String(error)}\n`);
      process.exit(1);
    },
  );
}
