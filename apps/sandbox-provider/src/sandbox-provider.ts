/**
 * A stand-in third-party provider (payments + SMS) with exact fault injection (docs/contract.md §8).
 *
 * It exists so that every row of the outcome classification (docs/contract.md §2) can be produced on demand: an effect that
 * happened but was never answered (timeout, reset, 5xx), a request that never took effect (drop, reject), and a
 * read-back that lies by omission (lagging replica, missing field, wrong amount). `/__effects` is the ground truth
 * the tests and chaos runs compare Verity's claims against, so it always reads the primary.
 *
 * Plain `node:http` on purpose: the sandbox must behave at the socket level (hold, reset, drop), which a framework
 * would hide, and it must stay cheap enough not to distort benchmarks.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { performance } from 'node:perf_hooks';

export const DEFAULT_SANDBOX_PORT = 4010;
export const DEFAULT_SANDBOX_HOST = '127.0.0.1';
export const MAX_BODY_BYTES = 1024 * 1024;

export const FAULT_KINDS = [
  'timeout_after_commit',
  'reset_after_commit',
  'error_after_commit',
  'drop_before_commit',
  'reject',
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

export const READ_FAULTS = ['unavailable', 'field_missing', 'amount_mismatch'] as const;
export type ReadFault = (typeof READ_FAULTS)[number];

export interface FaultRule {
  method: string;
  path: string;
  fault: FaultKind;
  /** Chance in [0, 1] that a matching request triggers the rule. */
  probability: number;
  /** Remaining number of times the rule may fire; `null` = unlimited. */
  count: number | null;
}

export interface FaultConfig {
  rules: FaultRule[];
  replica_lag_ms: number;
  read_fault: ReadFault | null;
}

export interface Charge {
  id: string;
  reference: string;
  amount: number;
  currency: string;
  status: 'succeeded';
  version: number;
}

export interface Message {
  id: string;
  to: string;
  body: string;
  client_ref: string | null;
  status: 'queued';
  version: number;
}

export interface ChargeList {
  data: Partial<Charge>[];
  as_of_version: number;
}

export interface EffectsReport {
  total: number;
  charges: Record<string, { count: number; ids: string[]; amounts: number[] }>;
  messages: Record<string, { count: number; ids: string[]; to: string[] }>;
  duplicates: { kind: 'charge' | 'message'; key: string; count: number }[];
}

/**
 * What became of one request, as the provider saw it: `applied` committed a new effect, `replayed` answered with an
 * earlier effect stored under the same Idempotency-Key (no new effect), `rejected` was refused with no effect (a
 * decline or an injected `reject`), `dropped` arrived and was closed unanswered before anything happened
 * (`drop_before_commit`), `invalid` was malformed or unrouted, `read` changed nothing. An after-commit fault shows as
 * `fault` next to the outcome of what did commit.
 */
export const WIRE_OUTCOMES = ['applied', 'replayed', 'rejected', 'dropped', 'invalid', 'read'] as const;
export type WireOutcome = (typeof WIRE_OUTCOMES)[number];

/** One request as it reached the provider (GET /__requests): every request, including the ones it deduplicated. */
export interface WireRequest {
  /** Arrival order, from 1; not reset by /__reset, so a request is never confused with one from before a reset. */
  seq: number;
  /** Arrival time (ISO 8601, the provider's clock). */
  at: string;
  method: string;
  path: string;
  /** The raw query string without `?`, or null. */
  query: string | null;
  idempotency_key: string | null;
  /** The charge reference: from the body of a POST, from `?reference=` of a list read. */
  reference: string | null;
  /** A message's client_ref, from the body of a POST /v1/messages. */
  client_ref: string | null;
  outcome: WireOutcome;
  /** The injected fault that hit this request, if any. */
  fault: FaultKind | null;
  /** The status answered, or null when nothing was (timeout, reset, drop). */
  status: number | null;
  /** The effect created (applied) or answered again (replayed). */
  effect_id: string | null;
  /** For reads: the ids of the charges the read returned (what a client can have seen). */
  returned_ids: string[] | null;
}

export interface WireLog {
  /** Requests recorded since the last reset, including any no longer kept. */
  total: number;
  /** Oldest requests no longer kept because the log reached its bound: a log with `dropped > 0` is incomplete. */
  dropped: number;
  requests: WireRequest[];
}

/** The default bound on the wire log; the oldest entries go first. */
export const DEFAULT_MAX_WIRE_REQUESTS = 200_000;

export interface ErrorBody {
  error: { code: string; message: string };
}

export interface SandboxProviderOptions {
  /** 0 = an ephemeral port. Defaults to DEFAULT_SANDBOX_PORT. */
  port?: number;
  host?: string;
  /** One JSON line per request on stdout. Off by default: the sandbox sits on benchmark hot paths. */
  log?: boolean;
  /** Source of the probability draws, in [0, 1). Injectable so tests can pin a draw. */
  random?: () => number;
  /** Bound on the requests kept for GET /__requests. Defaults to DEFAULT_MAX_WIRE_REQUESTS. */
  maxWireRequests?: number;
}

export interface SandboxProvider {
  url: string;
  port: number;
  close(): Promise<void>;
}

/** The key under which messages without a client_ref are grouped in /__effects. */
export const NO_CLIENT_REF = '(none)';

interface Reply {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
  /** For the wire log: what this reply did (default `invalid`) and the effect it created or replayed. */
  outcome?: WireOutcome;
  effectId?: string;
  returnedIds?: string[];
}

/**
 * A request the router accepted. Malformed requests never get this far, so a fault rule's count is only spent
 * on requests that would otherwise have done something.
 */
type Routed = { reply: Reply } | { act: () => Reply };

type Validation<T> = { ok: true; value: T } | { ok: false; message: string };

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

function errorReply(status: number, code: string, message: string): Reply {
  const body: ErrorBody = { error: { code, message } };
  return { status, body };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function unknownKeys(value: Record<string, unknown>, allowed: readonly string[]): string[] {
  return Object.keys(value).filter((key) => !allowed.includes(key));
}

function idsOf(charges: Partial<Charge>[]): string[] {
  return charges.flatMap((c) => (typeof c.id === 'string' ? [c.id] : []));
}

/** The reference / client_ref a request names, read leniently: a malformed request is logged with what it has. */
function namedRefs(
  method: string,
  path: string,
  query: URLSearchParams,
  text: string | null,
): { reference: string | null; client_ref: string | null } {
  const refs = { reference: null as string | null, client_ref: null as string | null };
  if (method === 'GET' && path === '/v1/charges') refs.reference = query.get('reference');
  if (method !== 'POST' || text === null || (path !== '/v1/charges' && path !== '/v1/messages')) return refs;
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return refs;
  }
  if (!isRecord(body)) return refs;
  if (path === '/v1/charges' && typeof body.reference === 'string') refs.reference = body.reference;
  if (path === '/v1/messages' && typeof body.client_ref === 'string') refs.client_ref = body.client_ref;
  return refs;
}

/**
 * Every request the provider received, in arrival order, bounded (oldest dropped first, and counted). It is what the
 * wire saw, which is more than the effects show: a re-send absorbed by an Idempotency-Key leaves no second effect
 * but does leave a second request here.
 */
class WireRecorder {
  private entries: WireRequest[] = [];
  private head = 0;
  private seq = 0;
  private total = 0;
  private dropped = 0;

  constructor(private readonly max: number) {}

  record(entry: Omit<WireRequest, 'seq'>): void {
    this.seq += 1;
    this.total += 1;
    this.entries.push({ seq: this.seq, ...entry });
    if (this.entries.length - this.head > this.max) {
      this.head += 1;
      this.dropped += 1;
      // Compact now and then rather than shift() on every request (O(n) each).
      if (this.head > 1024 && this.head * 2 > this.entries.length) {
        this.entries = this.entries.slice(this.head);
        this.head = 0;
      }
    }
  }

  snapshot(): WireLog {
    return { total: this.total, dropped: this.dropped, requests: this.entries.slice(this.head) };
  }

  reset(): void {
    this.entries = [];
    this.head = 0;
    this.total = 0;
    this.dropped = 0;
  }
}

function newId(prefix: string): string {
  // Random rather than sequential: ids must not repeat across /__reset, or a reconciler still holding an id from
  // before the reset would "verify" a different charge.
  return `${prefix}_${randomBytes(12).toString('hex')}`;
}

function defaultFaults(): FaultConfig {
  return { rules: [], replica_lag_ms: 0, read_fault: null };
}

interface ChargeInput {
  amount: number;
  currency: string;
  reference: string;
}

function validateCharge(input: unknown): Validation<ChargeInput> {
  if (!isRecord(input)) return { ok: false, message: 'body must be a JSON object' };
  const { amount, currency, reference } = input;
  if (typeof amount !== 'number' || !Number.isSafeInteger(amount) || amount <= 0) {
    return { ok: false, message: 'amount must be a positive integer (minor units)' };
  }
  if (typeof currency !== 'string' || !/^[A-Za-z]{3}$/.test(currency)) {
    return { ok: false, message: 'currency must be a 3-letter code' };
  }
  if (typeof reference !== 'string' || reference.length === 0) {
    return { ok: false, message: 'reference must be a non-empty string' };
  }
  return { ok: true, value: { amount, currency, reference } };
}

interface MessageInput {
  to: string;
  body: string;
  client_ref: string | null;
}

function validateMessage(input: unknown): Validation<MessageInput> {
  if (!isRecord(input)) return { ok: false, message: 'body must be a JSON object' };
  const { to, body, client_ref: clientRef } = input;
  if (typeof to !== 'string' || to.length === 0) return { ok: false, message: 'to must be a non-empty string' };
  if (typeof body !== 'string') return { ok: false, message: 'body must be a string' };
  if (clientRef !== undefined && clientRef !== null && (typeof clientRef !== 'string' || clientRef.length === 0)) {
    return { ok: false, message: 'client_ref must be a non-empty string when present' };
  }
  return { ok: true, value: { to, body, client_ref: clientRef ?? null } };
}

function validateRule(input: unknown, index: number): Validation<FaultRule> {
  const at = `rules[${index}]`;
  if (!isRecord(input)) return { ok: false, message: `${at} must be an object` };
  const extra = unknownKeys(input, ['method', 'path', 'fault', 'probability', 'count']);
  if (extra.length > 0) return { ok: false, message: `${at} has unknown field(s): ${extra.join(', ')}` };
  const { method, path, fault, probability = 1, count = null } = input;
  if (typeof method !== 'string' || !/^[A-Z]+$/.test(method)) {
    return { ok: false, message: `${at}.method must be an upper-case HTTP method` };
  }
  if (typeof path !== 'string' || !path.startsWith('/') || path.includes('?')) {
    return { ok: false, message: `${at}.path must be an absolute path without a query string` };
  }
  // The control plane stays reachable whatever the faults, or a test could lock itself out of /__reset.
  if (path.startsWith('/__')) return { ok: false, message: `${at}.path must not name a control endpoint (/__*)` };
  if (typeof fault !== 'string' || !(FAULT_KINDS as readonly string[]).includes(fault)) {
    return { ok: false, message: `${at}.fault must be one of ${FAULT_KINDS.join(', ')}` };
  }
  if (typeof probability !== 'number' || !(probability >= 0 && probability <= 1)) {
    return { ok: false, message: `${at}.probability must be a number in [0, 1]` };
  }
  if (count !== null && (typeof count !== 'number' || !Number.isSafeInteger(count) || count < 0)) {
    return { ok: false, message: `${at}.count must be a non-negative integer or null` };
  }
  return { ok: true, value: { method, path, fault: fault as FaultKind, probability, count } };
}

export function validateFaultConfig(input: unknown): Validation<FaultConfig> {
  if (!isRecord(input)) return { ok: false, message: 'body must be a JSON object' };
  const extra = unknownKeys(input, ['rules', 'replica_lag_ms', 'read_fault']);
  if (extra.length > 0) return { ok: false, message: `unknown field(s): ${extra.join(', ')}` };
  const { rules = [], replica_lag_ms: lag = 0, read_fault: readFault = null } = input;
  if (!Array.isArray(rules)) return { ok: false, message: 'rules must be an array' };
  const parsed: FaultRule[] = [];
  for (const [index, rule] of rules.entries()) {
    const result = validateRule(rule, index);
    if (!result.ok) return result;
    parsed.push(result.value);
  }
  if (typeof lag !== 'number' || !Number.isFinite(lag) || lag < 0) {
    return { ok: false, message: 'replica_lag_ms must be a non-negative number' };
  }
  if (
    readFault !== null &&
    (typeof readFault !== 'string' || !(READ_FAULTS as readonly string[]).includes(readFault))
  ) {
    return { ok: false, message: `read_fault must be null or one of ${READ_FAULTS.join(', ')}` };
  }
  return { ok: true, value: { rules: parsed, replica_lag_ms: lag, read_fault: readFault as ReadFault | null } };
}

interface StoredCharge {
  charge: Charge;
  committedAt: number;
}

/** Everything the provider knows. One instance per server; `reset()` is `POST /__reset`. */
class ProviderState {
  version = 0;
  /** commitTimes[v - 1] is when version v was committed; versions are dense, so replica cut-offs are a search. */
  commitTimes: number[] = [];
  chargesById = new Map<string, StoredCharge>();
  chargesByReference = new Map<string, StoredCharge[]>();
  messagesByKey = new Map<string, Message[]>();
  idempotency = new Map<string, Charge>();
  faults: FaultConfig = defaultFaults();

  reset(): void {
    this.version = 0;
    this.commitTimes = [];
    this.chargesById.clear();
    this.chargesByReference.clear();
    this.messagesByKey.clear();
    this.idempotency.clear();
    this.faults = defaultFaults();
  }

  private commit(): number {
    this.version += 1;
    this.commitTimes.push(performance.now());
    return this.version;
  }

  createCharge(input: ChargeInput, idempotencyKey: string | undefined): Charge {
    const version = this.commit();
    const charge: Charge = {
      id: newId('ch'),
      reference: input.reference,
      amount: input.amount,
      currency: input.currency,
      status: 'succeeded',
      version,
    };
    const stored: StoredCharge = { charge, committedAt: this.commitTimes[version - 1] };
    this.chargesById.set(charge.id, stored);
    const sameReference = this.chargesByReference.get(charge.reference);
    if (sameReference) sameReference.push(stored);
    else this.chargesByReference.set(charge.reference, [stored]);
    if (idempotencyKey !== undefined) this.idempotency.set(idempotencyKey, charge);
    return charge;
  }

  createMessage(input: MessageInput): Message {
    const message: Message = { id: newId('msg'), ...input, status: 'queued', version: this.commit() };
    const key = input.client_ref ?? NO_CLIENT_REF;
    const sameKey = this.messagesByKey.get(key);
    if (sameKey) sameKey.push(message);
    else this.messagesByKey.set(key, [message]);
    return message;
  }

  /** The replica shows a write once it is at least `replica_lag_ms` old; with no lag it is the primary. */
  private replicaCutoff(): number {
    const lag = this.faults.replica_lag_ms;
    return lag > 0 ? performance.now() - lag : Number.POSITIVE_INFINITY;
  }

  private replicaVersion(cutoff: number): number {
    let low = 0;
    let high = this.commitTimes.length;
    while (low < high) {
      const mid = (low + high) >>> 1;
      if (this.commitTimes[mid] <= cutoff) low = mid + 1;
      else high = mid;
    }
    return low;
  }

  private present(charge: Charge): Partial<Charge> {
    switch (this.faults.read_fault) {
      case 'field_missing': {
        const { status: _status, ...rest } = charge;
        return rest;
      }
      case 'amount_mismatch':
        return { ...charge, amount: charge.amount + 1 };
      default:
        return { ...charge };
    }
  }

  private assertReadable(): void {
    if (this.faults.read_fault === 'unavailable') {
      throw new HttpError(503, 'unavailable', 'The read replica is unavailable.');
    }
  }

  listCharges(reference: string | null): ChargeList {
    this.assertReadable();
    const cutoff = this.replicaCutoff();
    const candidates =
      reference === null ? [...this.chargesById.values()] : (this.chargesByReference.get(reference) ?? []);
    const data = candidates.filter((stored) => stored.committedAt <= cutoff).map((s) => this.present(s.charge));
    return { data, as_of_version: this.replicaVersion(cutoff) };
  }

  getCharge(id: string): Partial<Charge> | undefined {
    this.assertReadable();
    const stored = this.chargesById.get(id);
    if (!stored || stored.committedAt > this.replicaCutoff()) return undefined;
    return this.present(stored.charge);
  }

  /** Picks the fault for one request and spends its count. Rules are tried in order; a failed draw moves on. */
  drawFault(method: string, path: string, random: () => number): FaultKind | undefined {
    for (const rule of this.faults.rules) {
      if (rule.method !== method || rule.path !== path) continue;
      if (rule.count !== null && rule.count <= 0) continue;
      if (!(random() < rule.probability)) continue;
      if (rule.count !== null) rule.count -= 1;
      return rule.fault;
    }
    return undefined;
  }

  effects(): EffectsReport {
    const report: EffectsReport = { total: 0, charges: {}, messages: {}, duplicates: [] };
    const charges: [string, EffectsReport['charges'][string]][] = [];
    for (const [reference, list] of this.chargesByReference) {
      charges.push([
        reference,
        { count: list.length, ids: list.map((s) => s.charge.id), amounts: list.map((s) => s.charge.amount) },
      ]);
      report.total += list.length;
      if (list.length > 1) report.duplicates.push({ kind: 'charge', key: reference, count: list.length });
    }
    const messages: [string, EffectsReport['messages'][string]][] = [];
    for (const [key, list] of this.messagesByKey) {
      messages.push([key, { count: list.length, ids: list.map((m) => m.id), to: list.map((m) => m.to) }]);
      report.total += list.length;
      // Messages sent without a client_ref share a bucket but are not the same intent, so not duplicates.
      if (key !== NO_CLIENT_REF && list.length > 1) {
        report.duplicates.push({ kind: 'message', key, count: list.length });
      }
    }
    // fromEntries defines own properties, so a reference such as "__proto__" cannot reach the prototype.
    report.charges = Object.fromEntries(charges);
    report.messages = Object.fromEntries(messages);
    return report;
  }

  faultSnapshot(): FaultConfig {
    return { ...this.faults, rules: this.faults.rules.map((rule) => ({ ...rule })) };
  }
}

type BodyResult = { kind: 'ok'; text: string } | { kind: 'too_large' };

function readBody(req: IncomingMessage): Promise<BodyResult> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let tooLarge = false;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        // Keep draining instead of answering at once: closing while the client is still writing makes the kernel
        // send a reset, and the client would see ECONNRESET instead of the 413. Past a hard cap we give up.
        tooLarge = true;
        chunks.length = 0;
        if (size > 64 * MAX_BODY_BYTES) req.socket.destroy();
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () =>
      resolve(tooLarge ? { kind: 'too_large' } : { kind: 'ok', text: Buffer.concat(chunks).toString('utf8') }),
    );
    req.on('error', reject);
    req.on('close', () => {
      if (!req.complete) reject(new Error('request aborted'));
    });
  });
}

function parseJson(text: string): unknown {
  if (text.trim() === '') return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new HttpError(400, 'invalid_json', 'The request body is not valid JSON.');
  }
}

function invalid(message: string): Reply {
  return errorReply(400, 'invalid_request', message);
}

function send(res: ServerResponse, reply: Reply): void {
  const headers: Record<string, string | number> = { ...reply.headers };
  if (reply.body === undefined) {
    res.writeHead(reply.status, headers);
    res.end();
    return;
  }
  const payload = Buffer.from(JSON.stringify(reply.body), 'utf8');
  headers['Content-Type'] = 'application/json; charset=utf-8';
  headers['Content-Length'] = payload.length;
  res.writeHead(reply.status, headers);
  res.end(payload);
}

function formatUrl(host: string, port: number): string {
  return host.includes(':') ? `http://[${host}]:${port}` : `http://${host}:${port}`;
}

export async function startSandboxProvider(options: SandboxProviderOptions = {}): Promise<SandboxProvider> {
  const host = options.host ?? DEFAULT_SANDBOX_HOST;
  const random = options.random ?? Math.random;
  const log = options.log
    ? (fields: Record<string, unknown>): void => {
        process.stdout.write(`${JSON.stringify({ level: 'info', ...fields })}\n`);
      }
    : undefined;
  const state = new ProviderState();
  const wire = new WireRecorder(options.maxWireRequests ?? DEFAULT_MAX_WIRE_REQUESTS);
  const sockets = new Set<Socket>();

  function route(method: string, path: string, query: URLSearchParams, body: string, req: IncomingMessage): Routed {
    if (path.startsWith('/__')) return { reply: control(method, path, body) };
    if (path === '/health' && method === 'GET') {
      return { act: () => ({ status: 200, body: { status: 'ok' }, outcome: 'read' }) };
    }
    if (path === '/v1/charges' && method === 'POST') {
      const result = validateCharge(parseJson(body));
      if (!result.ok) return { reply: invalid(result.message) };
      const input = result.value;
      const header = req.headers['idempotency-key'];
      const key = typeof header === 'string' && header.length > 0 ? header : undefined;
      return {
        act: () => {
          // The key alone decides, not the body: this provider models the lenient kind, so a client that changes
          // the body on retry still gets exactly one effect. Declines are not stored: a retry is judged afresh.
          const replay = key === undefined ? undefined : state.idempotency.get(key);
          if (replay) {
            return {
              status: 201,
              body: replay,
              headers: { 'Idempotent-Replayed': 'true' },
              outcome: 'replayed',
              effectId: replay.id,
            };
          }
          if (input.reference.startsWith('decline-')) {
            return { ...errorReply(402, 'card_declined', 'The card was declined.'), outcome: 'rejected' };
          }
          const created = state.createCharge(input, key);
          return { status: 201, body: created, outcome: 'applied', effectId: created.id };
        },
      };
    }
    if (path === '/v1/charges' && method === 'GET') {
      return {
        act: () => {
          const list = state.listCharges(query.get('reference'));
          return { status: 200, body: list, outcome: 'read', returnedIds: idsOf(list.data) };
        },
      };
    }
    const byId = /^\/v1\/charges\/([^/]+)$/.exec(path);
    if (byId && method === 'GET') {
      let id: string;
      try {
        id = decodeURIComponent(byId[1]);
      } catch {
        return { reply: errorReply(404, 'not_found', 'No such charge.') };
      }
      return {
        act: () => {
          const charge = state.getCharge(id);
          return charge
            ? { status: 200, body: charge, outcome: 'read', returnedIds: idsOf([charge]) }
            : { ...errorReply(404, 'not_found', `No such charge: ${id}`), outcome: 'read', returnedIds: [] };
        },
      };
    }
    if (path === '/v1/messages' && method === 'POST') {
      const result = validateMessage(parseJson(body));
      if (!result.ok) return { reply: invalid(result.message) };
      const input = result.value;
      return {
        act: () => {
          const message = state.createMessage(input);
          return {
            status: 202,
            body: { id: message.id, status: message.status },
            outcome: 'applied',
            effectId: message.id,
          };
        },
      };
    }
    return { reply: errorReply(404, 'not_found', `No route for ${method} ${path}`) };
  }

  function control(method: string, path: string, body: string): Reply {
    if (path === '/__faults' && method === 'GET') return { status: 200, body: state.faultSnapshot() };
    if (path === '/__faults' && method === 'PUT') {
      const result = validateFaultConfig(parseJson(body));
      if (!result.ok) return invalid(result.message);
      state.faults = result.value;
      return { status: 200, body: state.faultSnapshot() };
    }
    if (path === '/__effects' && method === 'GET') return { status: 200, body: state.effects() };
    if (path === '/__requests' && method === 'GET') return { status: 200, body: wire.snapshot() };
    if (path === '/__reset' && method === 'POST') {
      state.reset();
      wire.reset();
      return { status: 204 };
    }
    return errorReply(404, 'not_found', `No route for ${method} ${path}`);
  }

  function handle(req: IncomingMessage, res: ServerResponse, body: BodyResult): void {
    const method = req.method ?? 'GET';
    const rawUrl = req.url ?? '/';
    const queryAt = rawUrl.indexOf('?');
    const path = queryAt === -1 ? rawUrl : rawUrl.slice(0, queryAt);
    const query = new URLSearchParams(queryAt === -1 ? '' : rawUrl.slice(queryAt + 1));
    const started = performance.now();
    const arrivedAt = new Date().toISOString();
    const header = req.headers['idempotency-key'];
    const done = (outcome: { status?: number; fault?: FaultKind; reply?: Reply; dropped?: boolean }) => {
      const { reply, dropped: _dropped, ...logged } = outcome;
      log?.({ msg: 'request', method, path, ...logged, ms: Math.round((performance.now() - started) * 10) / 10 });
      // The control plane is the test's, not the wire's.
      if (path.startsWith('/__')) return;
      let kind: WireOutcome = reply?.outcome ?? 'invalid';
      if (outcome.dropped) kind = 'dropped';
      else if (outcome.fault === 'reject') kind = 'rejected';
      wire.record({
        at: arrivedAt,
        method,
        path,
        query: queryAt === -1 ? null : rawUrl.slice(queryAt + 1),
        idempotency_key: typeof header === 'string' && header.length > 0 ? header : null,
        ...namedRefs(method, path, query, body.kind === 'ok' ? body.text : null),
        outcome: kind,
        fault: outcome.fault ?? null,
        status: outcome.status ?? null,
        effect_id: reply?.effectId ?? null,
        returned_ids: reply?.returnedIds ?? null,
      });
    };

    if (body.kind === 'too_large') {
      send(res, {
        ...errorReply(413, 'payload_too_large', `Request bodies are limited to ${MAX_BODY_BYTES} bytes.`),
        headers: { Connection: 'close' },
      });
      return done({ status: 413 });
    }

    let routed: Routed;
    try {
      routed = route(method, path, query, body.text, req);
    } catch (error) {
      if (!(error instanceof HttpError)) throw error;
      send(res, errorReply(error.status, error.code, error.message));
      return done({ status: error.status });
    }
    if ('reply' in routed) {
      send(res, routed.reply);
      return done({ status: routed.reply.status });
    }

    const act = (): Reply => {
      try {
        return routed.act();
      } catch (error) {
        if (!(error instanceof HttpError)) throw error;
        // Only reads throw here (the replica is unavailable): a read that answered an error.
        return { ...errorReply(error.status, error.code, error.message), outcome: 'read' };
      }
    };
    const fault = state.drawFault(method, path, random);
    switch (fault) {
      case undefined: {
        const reply = act();
        send(res, reply);
        return done({ status: reply.status, reply });
      }
      case 'drop_before_commit':
        // A FIN with no response: the request arrived and nothing happened, which the client cannot tell apart
        // from a lost response.
        req.socket.destroy();
        return done({ fault, dropped: true });
      case 'reject':
        send(res, errorReply(422, 'rejected', 'The provider rejected the request (injected fault).'));
        return done({ status: 422, fault });
      case 'timeout_after_commit': {
        const reply = act();
        // Never answered: the socket stays open (it is in `sockets`, so close() still ends it) until the client
        // gives up.
        return done({ fault, reply });
      }
      case 'reset_after_commit': {
        const reply = act();
        // A real RST rather than a FIN, so the client sees ECONNRESET exactly as with a provider that crashed.
        req.socket.resetAndDestroy();
        return done({ fault, reply });
      }
      case 'error_after_commit': {
        const reply = act();
        send(res, errorReply(500, 'internal_error', 'Internal provider error (injected fault).'));
        return done({ status: 500, fault, reply });
      }
    }
  }

  const server = createServer((req, res) => {
    readBody(req)
      .then((body) => handle(req, res, body))
      .catch((error: unknown) => {
        if (res.headersSent || req.socket.destroyed) return;
        send(res, errorReply(500, 'internal_error', error instanceof Error ? error.message : 'internal error'));
      });
  });
  // Clients (undici, Node's agent) expire idle pooled sockets on the server's Keep-Alive hint minus a margin; a
  // server that closed first would make a reused socket fail with ECONNRESET, indistinguishable from an injected
  // reset. Five seconds is the hint they are tuned for.
  server.keepAliveTimeout = 5_000;
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  server.on('clientError', (error: NodeJS.ErrnoException, socket: Socket) => {
    if (error.code === 'ECONNRESET' || !socket.writable) {
      socket.destroy();
      return;
    }
    const payload = JSON.stringify({ error: { code: 'bad_request', message: 'Malformed HTTP request.' } });
    socket.end(
      `HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Type: application/json; charset=utf-8\r\n` +
        `Content-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`,
    );
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? DEFAULT_SANDBOX_PORT, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('sandbox provider: no TCP address');

  let closing: Promise<void> | undefined;
  return {
    url: formatUrl(host, address.port),
    port: address.port,
    close() {
      closing ??= new Promise<void>((resolve, reject) => {
        server.close((error) => (error ? reject(error) : resolve()));
        // server.close() alone waits for every connection, and held (timeout_after_commit) sockets never finish.
        for (const socket of sockets) socket.destroy();
      });
      return closing;
    },
  };
}
