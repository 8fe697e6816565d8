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
/**
 * The account a request acts for, as a real provider knows it from the caller's credentials: charges, their reads
 * and Idempotency-Keys are scoped to it, so one account never sees (nor replays) another's charges; /__effects counts
 * a duplicate charge or message within one account. A request without it acts for the shared default account.
 */
export const ACCOUNT_HEADER = 'sandbox-account';
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

/**
 * Faults of the read replica: `unavailable` (503), `field_missing` (each charge without its status), `amount_mismatch`
 * (each amount + 1), `record_lost` (the replica answers, up to date, without any charge: a wrong "absent").
 */
export const READ_FAULTS = ['unavailable', 'field_missing', 'amount_mismatch', 'record_lost'] as const;
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
  /** Effects committed since the last reset, including any no longer kept. */
  total: number;
  /**
   * Oldest effects no longer kept because the store reached its bound (`maxEffects`): they are missing from
   * `charges`, `messages` and `duplicates`, so a report with `dropped > 0` is incomplete.
   */
  dropped: number;
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
export const DEFAULT_MAX_WIRE_REQUESTS = 50_000;

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
  /** Bound on the effects (charges and messages) kept for reads and GET /__effects. Defaults to DEFAULT_MAX_EFFECTS. */
  maxEffects?: number;
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
  /** A large JSON body already written out (control plane only); sent as is instead of `body`. */
  json?: JsonChunks;
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

/** The account a request acts for (ACCOUNT_HEADER), or undefined for the shared default account. */
function accountOf(req: IncomingMessage): string | undefined {
  const header = req.headers[ACCOUNT_HEADER];
  return typeof header === 'string' && header.length > 0 ? header : undefined;
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
 * The newest `capacity` items, oldest first. A slot is overwritten when its item leaves, so nothing older than the
 * bound stays reachable (an array with a moving head keeps the items behind it alive until it is compacted).
 */
class Ring<T> {
  private items: T[] = [];
  private start = 0;

  constructor(readonly capacity: number) {}

  get size(): number {
    return this.items.length;
  }

  /** The i-th oldest item kept, from 0. */
  at(i: number): T {
    return this.items[(this.start + i) % this.items.length];
  }

  /** Adds an item; returns the one it pushed out (the oldest) when the ring was full. */
  push(item: T): T | undefined {
    if (this.capacity === 0) return item;
    if (this.items.length < this.capacity) {
      this.items.push(item);
      return undefined;
    }
    const oldest = this.items[this.start];
    this.items[this.start] = item;
    this.start = (this.start + 1) % this.capacity;
    return oldest;
  }

  clear(): void {
    this.items = [];
    this.start = 0;
  }
}

/**
 * Every request the provider received, in arrival order, bounded (oldest dropped first, and counted). It is what the
 * wire saw, which is more than the effects show: a re-send absorbed by an Idempotency-Key leaves no second effect
 * but does leave a second request here.
 */
class WireRecorder {
  private readonly entries: Ring<StoredWireRequest>;
  private seq = 0;
  private total = 0;
  private dropped = 0;

  constructor(max: number) {
    this.entries = new Ring(max);
  }

  record(entry: Omit<StoredWireRequest, 'seq'>): void {
    this.seq += 1;
    this.total += 1;
    if (this.entries.push({ seq: this.seq, ...entry }) !== undefined) this.dropped += 1;
  }

  /** GET /__requests, written piece by piece (see ProviderState.writeEffects). */
  write(out: JsonChunks): void {
    out.push(`{"total":${this.total},"dropped":${this.dropped},"requests":[`);
    for (let i = 0; i < this.entries.size; i += 1) {
      const { seq, at, ...rest } = this.entries.at(i);
      const request: WireRequest = { seq, at: new Date(at).toISOString(), ...rest };
      out.push(`${i === 0 ? '' : ','}${JSON.stringify(request)}`);
    }
    out.push(']}');
  }

  reset(): void {
    this.entries.clear();
    this.total = 0;
    this.dropped = 0;
  }
}

/** A wire log entry as kept: the arrival time as a number, formatted only when the log is read. */
type StoredWireRequest = Omit<WireRequest, 'at'> & { at: number };

/**
 * JSON text gathered into Buffers of about 64 KiB. Buffers live outside the V8 heap and go to the socket one by
 * one, so a large report never exists as one string (or one object graph) on the heap.
 */
class JsonChunks {
  readonly buffers: Buffer[] = [];
  bytes = 0;
  private parts: string[] = [];
  private pending = 0;

  push(text: string): void {
    this.parts.push(text);
    this.pending += text.length;
    if (this.pending >= 64 * 1024) this.flush();
  }

  flush(): void {
    if (this.parts.length === 0) return;
    const buffer = Buffer.from(this.parts.join(''), 'utf8');
    this.buffers.push(buffer);
    this.bytes += buffer.length;
    this.parts = [];
    this.pending = 0;
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

/**
 * One committed charge, kept flat (one object, no wrapper, no copy of the request) because the store holds up to
 * `maxEffects` of them. `Charge` objects are built from it only when answering.
 */
interface StoredCharge {
  kind: 'charge';
  id: string;
  reference: string;
  amount: number;
  currency: string;
  version: number;
  committedAt: number;
  /** The account that made it (ACCOUNT_HEADER); undefined for the shared default account. */
  account: string | undefined;
  /** The Idempotency-Key it was created under, scoped to its account, so forgetting the charge also forgets the key. */
  idempotencyKey: string | undefined;
}

function countsPerAccount(effects: readonly { account: string | undefined }[]): number[] {
  const counts = new Map<string | undefined, number>();
  for (const effect of effects) counts.set(effect.account, (counts.get(effect.account) ?? 0) + 1);
  return [...counts.values()];
}

/** Idempotency-Keys are per account: the same key sent by two accounts names two different requests. */
function scopedKey(account: string | undefined, key: string): string {
  return `${account ?? ''}\u0000${key}`;
}

/** One accepted message: what /__effects reports of it (its text is never read back, so it is not kept). */
interface StoredMessage {
  kind: 'message';
  id: string;
  to: string;
  key: string;
  /** The account that sent it (ACCOUNT_HEADER); undefined for the shared default account. */
  account: string | undefined;
  version: number;
  committedAt: number;
}

type StoredEffect = StoredCharge | StoredMessage;

/** A reference usually has one charge: keep it bare, and only make a list for the second one. */
type Bucket<T> = T | T[];

function bucketList<T>(bucket: Bucket<T> | undefined): readonly T[] {
  if (bucket === undefined) return [];
  return Array.isArray(bucket) ? bucket : [bucket];
}

function bucketAdd<T>(map: Map<string, Bucket<T>>, key: string, item: T): void {
  const bucket = map.get(key);
  if (bucket === undefined) map.set(key, item);
  else if (Array.isArray(bucket)) bucket.push(item);
  else map.set(key, [bucket, item]);
}

/** Removes the oldest item of a bucket (items are added in commit order, and forgotten in commit order). */
function bucketShift<T>(map: Map<string, Bucket<T>>, key: string, item: T): void {
  const bucket = map.get(key);
  if (bucket === item) map.delete(key);
  else if (Array.isArray(bucket)) {
    const at = bucket.indexOf(item);
    if (at !== -1) bucket.splice(at, 1);
    if (bucket.length === 1) map.set(key, bucket[0]);
  }
}

/** The default bound on the effects kept for reads and /__effects; the oldest are forgotten first. */
export const DEFAULT_MAX_EFFECTS = 50_000;

function toCharge(stored: StoredCharge): Charge {
  const { id, reference, amount, currency, version } = stored;
  return { id, reference, amount, currency, status: 'succeeded', version };
}

/**
 * Everything the provider knows. One instance per server; `reset()` is `POST /__reset`.
 *
 * Bounded: it keeps the newest `maxEffects` effects (charges and messages, in commit order) and forgets older ones,
 * counting them, so a long `npm start` session or a soak cannot grow the heap without limit. A forgotten charge is
 * no longer readable and its Idempotency-Key no longer replays; /__effects says how many were forgotten (`dropped`).
 */
class ProviderState {
  version = 0;
  /** Effects in commit order from version `forgotten + 1`; versions are dense, so replica cut-offs are a search. */
  private readonly effectLog: Ring<StoredEffect>;
  /** Effects forgotten since the last reset (they held versions 1..forgotten). */
  forgotten = 0;
  chargesById = new Map<string, StoredCharge>();
  chargesByReference = new Map<string, Bucket<StoredCharge>>();
  messagesByKey = new Map<string, Bucket<StoredMessage>>();
  idempotency = new Map<string, StoredCharge>();
  faults: FaultConfig = defaultFaults();

  constructor(maxEffects: number) {
    this.effectLog = new Ring(maxEffects);
  }

  reset(): void {
    this.version = 0;
    this.effectLog.clear();
    this.forgotten = 0;
    this.chargesById.clear();
    this.chargesByReference.clear();
    this.messagesByKey.clear();
    this.idempotency.clear();
    this.faults = defaultFaults();
  }

  private commit(effect: StoredEffect): void {
    const oldest = this.effectLog.push(effect);
    if (oldest !== undefined) this.forget(oldest);
  }

  private forget(oldest: StoredEffect): void {
    this.forgotten += 1;
    if (oldest.kind === 'charge') {
      this.chargesById.delete(oldest.id);
      bucketShift(this.chargesByReference, oldest.reference, oldest);
      if (oldest.idempotencyKey !== undefined && this.idempotency.get(oldest.idempotencyKey) === oldest) {
        this.idempotency.delete(oldest.idempotencyKey);
      }
    } else {
      bucketShift(this.messagesByKey, oldest.key, oldest);
    }
  }

  createCharge(input: ChargeInput, account: string | undefined, key: string | undefined): Charge {
    this.version += 1;
    const idempotencyKey = key === undefined ? undefined : scopedKey(account, key);
    const stored: StoredCharge = {
      kind: 'charge',
      id: newId('ch'),
      reference: input.reference,
      amount: input.amount,
      currency: input.currency,
      version: this.version,
      committedAt: performance.now(),
      account,
      idempotencyKey,
    };
    this.chargesById.set(stored.id, stored);
    bucketAdd(this.chargesByReference, stored.reference, stored);
    if (idempotencyKey !== undefined) this.idempotency.set(idempotencyKey, stored);
    this.commit(stored);
    return toCharge(stored);
  }

  /** The charge an earlier request stored under this Idempotency-Key, as it was answered then. */
  replay(account: string | undefined, key: string): Charge | undefined {
    const stored = this.idempotency.get(scopedKey(account, key));
    return stored && toCharge(stored);
  }

  createMessage(input: MessageInput, account: string | undefined): Message {
    this.version += 1;
    const key = input.client_ref ?? NO_CLIENT_REF;
    const stored: StoredMessage = {
      kind: 'message',
      id: newId('msg'),
      to: input.to,
      key,
      account,
      version: this.version,
      committedAt: performance.now(),
    };
    bucketAdd(this.messagesByKey, key, stored);
    this.commit(stored);
    return { id: stored.id, ...input, status: 'queued', version: stored.version };
  }

  /** The replica shows a write once it is at least `replica_lag_ms` old; with no lag it is the primary. */
  private replicaCutoff(): number {
    const lag = this.faults.replica_lag_ms;
    return lag > 0 ? performance.now() - lag : Number.POSITIVE_INFINITY;
  }

  /** Forgotten effects are older than any kept one, so they count as replicated. */
  private replicaVersion(cutoff: number): number {
    let low = 0;
    let high = this.effectLog.size;
    while (low < high) {
      const mid = (low + high) >>> 1;
      if (this.effectLog.at(mid).committedAt <= cutoff) low = mid + 1;
      else high = mid;
    }
    return this.forgotten + low;
  }

  private present(stored: StoredCharge): Partial<Charge> {
    const charge = toCharge(stored);
    switch (this.faults.read_fault) {
      case 'field_missing': {
        const { status: _status, ...rest } = charge;
        return rest;
      }
      case 'amount_mismatch':
        return { ...charge, amount: charge.amount + 1 };
      default:
        return charge;
    }
  }

  private assertReadable(): void {
    if (this.faults.read_fault === 'unavailable') {
      throw new HttpError(503, 'unavailable', 'The read replica is unavailable.');
    }
  }

  listCharges(reference: string | null, account: string | undefined): ChargeList {
    this.assertReadable();
    const cutoff = this.replicaCutoff();
    const candidates =
      reference === null ? [...this.chargesById.values()] : bucketList(this.chargesByReference.get(reference));
    const data = candidates
      .filter((stored) => stored.account === account && stored.committedAt <= cutoff && !this.recordsLost())
      .map((s) => this.present(s));
    return { data, as_of_version: this.replicaVersion(cutoff) };
  }

  getCharge(id: string, account: string | undefined): Partial<Charge> | undefined {
    this.assertReadable();
    const stored = this.chargesById.get(id);
    if (!stored || stored.account !== account || stored.committedAt > this.replicaCutoff()) return undefined;
    if (this.recordsLost()) return undefined;
    return this.present(stored);
  }

  private recordsLost(): boolean {
    return this.faults.read_fault === 'record_lost';
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

  /**
   * GET /__effects, written as JSON text piece by piece rather than built as one object graph and one string: with
   * a hundred thousand effects those two alone outgrew the provider's heap. Synchronous, so the report is one
   * consistent moment of the store.
   */
  writeEffects(out: JsonChunks): void {
    const duplicates: EffectsReport['duplicates'] = [];
    out.push(`{"total":${this.version},"dropped":${this.forgotten},"charges":{`);
    let first = true;
    for (const [reference, bucket] of this.chargesByReference) {
      const list = bucketList(bucket);
      // One reference charged in two accounts is two merchants' orders, not a duplicate: count per account.
      if (list.length > 1) {
        for (const count of countsPerAccount(list)) {
          if (count > 1) duplicates.push({ kind: 'charge', key: reference, count });
        }
      }
      out.push(
        `${first ? '' : ','}${JSON.stringify(reference)}:{"count":${list.length},"ids":${JSON.stringify(
          list.map((s) => s.id),
        )},"amounts":${JSON.stringify(list.map((s) => s.amount))}}`,
      );
      first = false;
    }
    out.push('},"messages":{');
    first = true;
    for (const [key, bucket] of this.messagesByKey) {
      const list = bucketList(bucket);
      // Messages sent without a client_ref share a bucket but are not the same intent, so not duplicates; one client_ref
      // sent from two accounts is two senders' messages, as a reference charged in two accounts is (count per account).
      if (key !== NO_CLIENT_REF && list.length > 1) {
        for (const count of countsPerAccount(list)) if (count > 1) duplicates.push({ kind: 'message', key, count });
      }
      out.push(
        `${first ? '' : ','}${JSON.stringify(key)}:{"count":${list.length},"ids":${JSON.stringify(
          list.map((m) => m.id),
        )},"to":${JSON.stringify(list.map((m) => m.to))}}`,
      );
      first = false;
    }
    out.push(`},"duplicates":${JSON.stringify(duplicates)}}`);
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
  if (reply.json) return sendChunks(res, reply.status, headers, reply.json);
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

/** Writes pre-serialised JSON with backpressure, letting go of each Buffer once the socket has it. */
function sendChunks(res: ServerResponse, status: number, headers: Record<string, string | number>, json: JsonChunks) {
  json.flush();
  headers['Content-Type'] = 'application/json; charset=utf-8';
  headers['Content-Length'] = json.bytes;
  res.writeHead(status, headers);
  const buffers = json.buffers;
  let next = 0;
  const pump = (): void => {
    while (next < buffers.length) {
      const buffer = buffers[next];
      buffers[next] = Buffer.alloc(0);
      next += 1;
      if (!res.write(buffer)) {
        res.once('drain', pump);
        return;
      }
    }
    res.end();
  };
  res.on('close', () => {
    buffers.length = 0;
  });
  pump();
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
  const state = new ProviderState(options.maxEffects ?? DEFAULT_MAX_EFFECTS);
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
      const account = accountOf(req);
      return {
        act: () => {
          // The key alone decides, not the body: this provider models the lenient kind, so a client that changes
          // the body on retry still gets exactly one effect. Declines are not stored: a retry is judged afresh.
          const replay = key === undefined ? undefined : state.replay(account, key);
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
          const created = state.createCharge(input, account, key);
          return { status: 201, body: created, outcome: 'applied', effectId: created.id };
        },
      };
    }
    if (path === '/v1/charges' && method === 'GET') {
      return {
        act: () => {
          const list = state.listCharges(query.get('reference'), accountOf(req));
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
          const charge = state.getCharge(id, accountOf(req));
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
          const message = state.createMessage(input, accountOf(req));
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
    if (path === '/__effects' && method === 'GET') {
      const json = new JsonChunks();
      state.writeEffects(json);
      return { status: 200, json };
    }
    if (path === '/__requests' && method === 'GET') {
      const json = new JsonChunks();
      wire.write(json);
      return { status: 200, json };
    }
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
    const arrivedAt = Date.now();
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
