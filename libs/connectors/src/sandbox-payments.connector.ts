import { z } from 'zod';
import { rawJsonIssue } from '@verity/platform';
import { OperationStatus, TerminalReason, textPrefix } from '@verity/status-model';
import { DEFAULT_REJECTION_STATUSES, SendOutcome, classifySend } from './classify';
import type {
  Connector,
  ConnectorEnvironment,
  ConnectorOperation,
  ContextResult,
  ObservationResult,
  ReadBackResult,
  ReadEvidence,
} from './connector';
import { httpExchange } from './http-exchange';
import { SANDBOX_ACCOUNT_HEADER } from './sandbox-account';

/** What a charge reference may hold: the printable characters of an HTTP header value (ASCII and Latin-1). */
export const REFERENCE_CHARACTERS = /^[\x20-\x7e\u00a0-\u00ff]*$/;
/** Nor may it start or end with a space, which the header would not carry. */
const NO_SURROUNDING_SPACES = /^(?! ).*(?<! )$/s;

/** A currency as a charge names it: three capitals (an answer naming another form names no currency this connector sends). */
const CURRENCY_CODE = /^[A-Z]{3}$/;

const ChargeParams = z.strictObject({
  amount: z.number().int().positive().max(100_000_000),
  currency: z.string().regex(CURRENCY_CODE, 'a three-letter ISO 4217 code in capitals'),
  reference: z
    .string()
    .min(1)
    .max(200)
    // The Idempotency-Key header is built from it: a character a header cannot carry (CR, LF or another control
    // character, anything beyond U+00FF) would make Node refuse the request after the operation was marked SENT.
    .regex(
      REFERENCE_CHARACTERS,
      'printable characters only, as an HTTP header carries them: no control characters (CR, LF, tab, NUL, DEL, U+0080–U+009F) and nothing beyond U+00FF (the Idempotency-Key header is built from the reference)',
    )
    // A header value loses its leading and trailing spaces on the way (RFC 9110 §5.5): "order-7 " would reach the
    // provider as the key of "order-7", a replay of that charge under another operation's name.
    .regex(NO_SURROUNDING_SPACES, 'no leading or trailing spaces (an HTTP header value loses them on the way)'),
});
type Charge = z.infer<typeof ChargeParams>;

interface ProviderCharge {
  id?: string;
  reference?: string;
  amount?: number;
  currency?: string;
  status?: string;
  version?: number;
}

export { SANDBOX_ACCOUNT_HEADER };

/**
 * The sandbox provider's payments: read-back, provider idempotency, irreversible. The Idempotency-Key is derived
 * from the tenant and the charge reference, so two operations charging one reference can never charge twice.
 */
export class SandboxPaymentsConnector implements Connector {
  readonly name = 'sandbox.payments';
  readonly description = 'Card charges at the sandbox provider (POST /v1/charges, read back by reference)';
  readonly capabilities = { read_back: true, context_read: true, provider_idempotency: true, reversible: false };
  readonly approvalAmountField = 'amount';
  /** Its read-back is the provider's list of charges by the reference it was sent with: an empty list is its word. */
  readonly readBackProvesAbsence = true;
  /** Its rejections (a declined card) and its proofs of absence are the provider's word, not the operation's. */
  readonly failedSpendsNothing = true;
  readonly actions = {
    charge: { description: 'Charge an amount (minor units) against an order reference', params: ChargeParams },
  };

  /**
   * The Idempotency-Key is the tenant and the reference: two charges of one reference are one provider charge, so a
   * submission may name a reference once (the API refuses the later operation as `duplicate_reference`).
   */
  effectReference(_action: string, params: Record<string, unknown>): { field: string; value: string } | null {
    const { reference } = params as Partial<Charge>;
    return typeof reference === 'string' ? { field: 'reference', value: reference } : null;
  }

  async send(op: ConnectorOperation, env: ConnectorEnvironment): Promise<SendOutcome> {
    const charge = op.params as Charge;
    const exchange = await httpExchange({
      method: 'POST',
      url: `${env.sandboxUrl}/v1/charges`,
      headers: {
        'idempotency-key': `verity-${op.tenantId}-${charge.reference}`,
        [SANDBOX_ACCOUNT_HEADER]: op.tenantId,
      },
      body: { amount: charge.amount, currency: charge.currency, reference: charge.reference },
      timeoutMs: env.timeoutMs,
      signal: env.signal,
    });
    // From an answer that reads two ways (a member named twice, a number a double rounds) nothing is taken: the id read
    // (the last of two) could name another charge, whose read-back would verify this one.
    const twoWays = exchange.kind === 'response' && exchange.json !== undefined ? rawJsonIssue(exchange.json) : null;
    const outcome = classifySend(exchange, {
      rejectionStatuses: DEFAULT_REJECTION_STATUSES,
      providerRef: (body) => {
        if (twoWays) return {};
        const c = (body ?? {}) as ProviderCharge;
        return { id: c.id, version: c.version, reference: c.reference };
      },
    });
    const mark = exchange.kind === 'response' ? exchange.headers[REPLAYED_HEADER] : undefined;
    if (mark !== undefined && mark !== 'true' && mark !== 'false' && outcome.status === OperationStatus.ACKNOWLEDGED) {
      // A mark that is neither the one "true" nor "false" — given twice (Node joins the values: "true, true", "true,
      // false"), or written otherwise ("TRUE") — says two things or none: whether this request made a charge or an
      // earlier one's is replayed (none made for this one) is unknown, for the read-back to settle.
      return {
        status: OperationStatus.UNKNOWN,
        reason: TerminalReason.CONNECTOR_ERROR,
        detail: `${outcome.detail} with a replay mark that reads no one way (${REPLAYED_HEADER}: ${shown(mark)}): outcome unknown`,
      };
    }
    if (exchange.kind !== 'response' || mark !== 'true') return outcome;
    if (exchange.truncated && outcome.status === OperationStatus.ACKNOWLEDGED) {
      // Whose charge it replays (this request's, or an earlier request's for the reference: no charge made for this one)
      // is what the unread body says: unknown, for the read-back to settle.
      return {
        status: OperationStatus.UNKNOWN,
        reason: TerminalReason.CONNECTOR_ERROR,
        detail: `${outcome.detail}, replaying an earlier request's charge: outcome unknown`,
      };
    }
    if (twoWays && outcome.status === OperationStatus.ACKNOWLEDGED) {
      // Whether the charge it replays is this request's (an acknowledgement) or another's (no charge made for this one)
      // is what the answer says two ways: unknown, for the read-back to settle.
      return {
        status: OperationStatus.UNKNOWN,
        reason: TerminalReason.CONNECTOR_ERROR,
        detail: `${outcome.detail}, replaying an earlier request's charge in an answer that reads two ways (${twoWays.rule === 'duplicate_key' ? 'a member named twice' : 'a number a double cannot keep exactly'} at ${twoWays.field}): outcome unknown`,
      };
    }
    const held = exchange.body as ProviderCharge | undefined;
    if (
      outcome.status === OperationStatus.ACKNOWLEDGED &&
      (typeof held !== 'object' ||
        held === null ||
        typeof held.amount !== 'number' ||
        !Number.isFinite(held.amount) ||
        typeof held.currency !== 'string' ||
        !CURRENCY_CODE.test(held.currency))
    ) {
      // An answer that names no charge (empty, no JSON, cut by a connection closed where no length was declared) or one
      // without its amount or currency — or with one that is none (null, "100", 1e400, a list, "", "eur": no code this
      // connector sends, so not "another currency"): whether the charge it replays is this request's is not said, so
      // "no charge was made" is not certain — unknown, for the read-back to settle.
      return {
        status: OperationStatus.UNKNOWN,
        reason: TerminalReason.CONNECTOR_ERROR,
        detail: `${outcome.detail}, replaying an earlier request's charge in an answer that does not name its amount and currency: outcome unknown`,
      };
    }
    return replayedSend(outcome, exchange.body, charge);
  }

  async readBack(op: ConnectorOperation, env: ConnectorEnvironment): Promise<ReadBackResult> {
    const charge = op.params as Charge;
    const read = await this.readCharges(op, env);
    if (read.kind === 'unreachable') return read;
    const { evidence, charges, asOfVersion } = read;
    const knownId = typeof op.providerRef?.id === 'string' ? op.providerRef.id : undefined;
    if (!knownId) {
      // With no id acknowledged, two charges of this reference in the account (the operation's, under its key, and
      // another writer's) leave which one is the operation's unsaid: a person's to look at, never the provider's list
      // order's to pick (the first listed verified the operation, the other charge unseen, or held it on the other's
      // amount). Both are named as evidence, neither as the operation's record.
      const ofReference = chargesOf(charges, charge.reference);
      if (ofReference.length > 1) {
        evidence.charges = ofReference.map((c) => ({ ...c }));
        return { kind: 'mismatch', evidence, fields: ['charges'] };
      }
    }
    // With no id acknowledged, a charge of this reference's list that names another reference (one the provider cut or
    // folded, or another order's) is no proof of absence: read as the record, it is a mismatch on the reference.
    const found = knownId
      ? charges.find((c) => c.id === knownId)
      : (charges.find((c) => c.reference === charge.reference) ?? charges[0]);
    const writeVersion = typeof op.providerRef?.version === 'number' ? op.providerRef.version : undefined;
    if (!found) {
      // The replica has not caught up with the write we were told about: no verdict from an old snapshot.
      if (writeVersion !== undefined && (asOfVersion ?? 0) < writeVersion) return { kind: 'stale', evidence };
      return { kind: 'absent', evidence };
    }
    evidence.record = { ...found };
    if (found.status === undefined) return { kind: 'field_missing', evidence, field: 'status' };
    const mismatched: string[] = [];
    // Found by the id the provider acknowledged: a record of it under another reference is another order's charge (or
    // the provider's word that this one is not what was asked), never the verification of this one.
    if (found.reference !== charge.reference) mismatched.push('reference');
    if (found.amount !== charge.amount) mismatched.push('amount');
    if (found.currency !== charge.currency) mismatched.push('currency');
    if (found.status !== 'succeeded') mismatched.push('status');
    if (mismatched.length > 0) return { kind: 'mismatch', evidence, fields: mismatched };
    return { kind: 'found', evidence };
  }

  /**
   * Charges are immutable at this provider, so "a newer version" of the verified effect is another charge for the same
   * reference committed after it (a different writer, or a different Idempotency-Key).
   */
  async observe(
    op: ConnectorOperation,
    verified: Record<string, unknown> | null,
    env: ConnectorEnvironment,
  ): Promise<ObservationResult> {
    const charge = op.params as Charge;
    const read = await this.readCharges(op, env);
    if (read.kind === 'unreachable')
      return { observation: 'unavailable', detail: 'the source cannot be read', evidence: read.evidence };
    const { evidence, charges, asOfVersion } = read;
    const verifiedId = typeof verified?.id === 'string' ? verified.id : op.providerRef?.id;
    const verifiedVersion = typeof verified?.version === 'number' ? verified.version : op.providerRef?.version;
    const version = typeof verifiedVersion === 'number' ? verifiedVersion : 0;
    if ((asOfVersion ?? 0) < version) {
      return { observation: 'degraded', detail: 'the replica is older than the verified version', evidence };
    }
    // Of this reference only: a list that holds another order's charge says nothing of this one's.
    const newer = charges.filter(
      (c) =>
        c.id !== verifiedId && c.reference === charge.reference && typeof c.version === 'number' && c.version > version,
    );
    if (newer.length > 0) {
      evidence.record = { ...newer[newer.length - 1] };
      return { observation: 'superseded', detail: `${newer.length} newer charge(s) for this reference`, evidence };
    }
    const found = charges.find((c) => c.id === verifiedId);
    if (!found) return { observation: 'degraded', detail: 'the verified charge is not visible', evidence };
    evidence.record = { ...found };
    if (found.status === undefined) return { observation: 'degraded', detail: 'field missing: status', evidence };
    if (
      found.reference !== charge.reference ||
      found.amount !== charge.amount ||
      found.currency !== charge.currency ||
      found.status !== 'succeeded'
    ) {
      return { observation: 'degraded', detail: 'the charge now reads differently from what was verified', evidence };
    }
    return { observation: 'converged', detail: 'the verified charge reads as verified', evidence };
  }

  async readContext(op: ConnectorOperation, env: ConnectorEnvironment): Promise<ContextResult> {
    const charge = op.params as Charge;
    const read = await this.readCharges(op, env);
    if (read.kind === 'unreachable') return read;
    const ofReference = chargesOf(read.charges, charge.reference);
    if (ofReference.length > 1) {
      // Two charges of this reference: whether the one asked for is made is not the first listed's to say (it read as
      // "requested state present" — VERIFIED, no change required — or as a conflict, by the provider's list order).
      read.evidence.charges = ofReference.map((c) => ({ ...c }));
      return {
        kind: 'state',
        state: { charged: true, charges: ofReference.length },
        requestedStatePresent: false,
        conflicts: [
          `${ofReference.length} charges with this reference: which one is this order’s is not for a read to pick`,
        ],
        evidence: read.evidence,
      };
    }
    const existing = ofReference[0];
    const state: Record<string, unknown> = existing
      ? { charged: true, amount: existing.amount, currency: existing.currency, charge_id: existing.id }
      : { charged: false };
    const conflicts: string[] = [];
    let requestedStatePresent = false;
    if (existing) {
      read.evidence.record = { ...existing };
      if (
        existing.amount === charge.amount &&
        existing.currency === charge.currency &&
        existing.status === 'succeeded'
      ) {
        requestedStatePresent = true;
      } else {
        conflicts.push('an existing charge with this reference has a different amount, currency or status');
      }
    }
    return { kind: 'state', state, requestedStatePresent, conflicts, evidence: read.evidence };
  }

  /** The charges of the operation's reference, read for the operation's tenant (its account). */
  private async readCharges(
    op: ConnectorOperation,
    env: ConnectorEnvironment,
  ): Promise<
    | { kind: 'ok'; charges: ProviderCharge[]; asOfVersion: number | null; evidence: ReadEvidence }
    | { kind: 'unreachable'; evidence: ReadEvidence }
  > {
    const { reference } = op.params as Charge;
    const source = `${env.sandboxUrl}/v1/charges?reference=${encodeURIComponent(reference)}`;
    const exchange = await httpExchange({
      method: 'GET',
      url: source,
      headers: { [SANDBOX_ACCOUNT_HEADER]: op.tenantId },
      timeoutMs: env.timeoutMs,
      signal: env.signal,
    });
    // The account read is part of what was read: the same URL read for another account answers differently.
    const evidence: ReadEvidence = { source, account: op.tenantId, read_at: new Date().toISOString() };
    if (exchange.kind !== 'response' || exchange.status !== 200) {
      evidence.error = exchange.kind === 'response' ? `status ${exchange.status}` : exchange.code;
      return { kind: 'unreachable', evidence };
    }
    // A 200 whose body cannot be read (cut short, not JSON, no charge list, entries that are no charges) shows
    // nothing: taken as an empty list it was "no charge", and an UNKNOWN charge that had happened was concluded FAILED
    // (PROVEN_ABSENT) from it; an entry that is no object (`null`) threw on its first look-up.
    const body = exchange.body as { data?: unknown; as_of_version?: unknown } | undefined;
    if (
      exchange.truncated ||
      typeof body !== 'object' ||
      body === null ||
      !Array.isArray(body.data) ||
      !body.data.every((entry) => typeof entry === 'object' && entry !== null && !Array.isArray(entry))
    ) {
      evidence.error = exchange.truncated ? 'response too large' : 'unreadable response body';
      return { kind: 'unreachable', evidence };
    }
    // An answer that reads two ways is no reading either (as the http connector's reads): a member named twice (a
    // status "failed" then "succeeded", which JSON.parse reads as the last) or a number a double does not keep (an
    // amount rounded to the one asked for, or past its range, kept as null) would verify — or, read as context, skip —
    // a charge the provider's answer, read as written, does not show. Every field of a charge is kept as evidence,
    // so the whole answer counts, not only the fields compared.
    const twoWays = exchange.json === undefined ? null : rawJsonIssue(exchange.json);
    const unkept = twoWays ? null : nonFiniteNumberIn(body);
    // One charge listed twice, differently (100 EUR, and 5000 EUR), reads two ways too: the entry found first decided.
    const listedTwice = twoWays || unkept ? null : chargeListedTwice(body.data as ProviderCharge[]);
    if (twoWays || unkept || listedTwice) {
      evidence.error = twoWays
        ? `unreadable response body: ${twoWays.rule === 'duplicate_key' ? 'a member named twice' : 'a number a double cannot keep exactly'} at ${twoWays.field}`
        : unkept
          ? `unreadable response body: a number past a double's range at ${unkept}`
          : `unreadable response body: charge ${shown(listedTwice)} listed twice, differently`;
      return { kind: 'unreachable', evidence };
    }
    const asOfVersion = typeof body.as_of_version === 'number' ? body.as_of_version : null;
    evidence.as_of_version = asOfVersion;
    evidence.record = null;
    return { kind: 'ok', charges: body.data as ProviderCharge[], asOfVersion, evidence };
  }
}

/** The provider's mark on an answer to an Idempotency-Key it has seen: the earlier request's charge, sent again. */
const REPLAYED_HEADER = 'idempotent-replayed';

/**
 * An answer that replays an earlier request's charge (another execution charged this reference first, and this one's
 * context read could not see it yet): this request made no charge of its own. The provider answers with the charge it
 * holds for the key, whatever this request asked for. The same charge — amount and currency — is the effect asked for,
 * committed once (by the earlier request: the record says so, `replayed` in the provider reference and in the event's
 * detail). Another charge (another amount or currency: every attempt of this operation asked the same) is this request
 * refused: the effect it asked for does not exist and will not, so it is not an acknowledgement that a read-back would
 * then find "mismatched" and hold as an integrity violation of a charge this request never made. The same amount and
 * currency under another reference is no such certainty (it may be this operation's own charge, its reference echoed
 * cut or folded): acknowledged, the read-back holds it as a mismatch on the reference.
 */
function replayedSend(outcome: SendOutcome, body: unknown, asked: Charge): SendOutcome {
  if (outcome.status !== OperationStatus.ACKNOWLEDGED) return outcome;
  const held = (body ?? {}) as ProviderCharge;
  const otherReference = held.reference !== asked.reference;
  if (held.amount === asked.amount && held.currency === asked.currency) {
    // Under another reference, the charge of this request's amount and currency held for this reference's key may
    // still be this operation's own (an earlier attempt, echoed by a provider that cuts or folds references): "no charge
    // was made" is not certain. Acknowledged, its read-back finds it by id and holds it as a mismatch on the reference.
    return {
      ...outcome,
      providerRef: { ...outcome.providerRef, replayed: true },
      detail: otherReference
        ? `${outcome.detail}, replaying a charge of this reference's key named under reference ${shown(held.reference)} (no new charge; the read-back judges whose it is)`
        : `${outcome.detail}, replaying the charge of an earlier request for this reference (no new charge)`,
    };
  }
  return {
    status: OperationStatus.FAILED,
    reason: TerminalReason.CONNECTOR_REJECTED,
    detail:
      `${outcome.detail} with the charge of an earlier request for this reference (${shown(held.id)}, ` +
      `${shown(held.amount)} ${shown(held.currency)}${otherReference ? `, reference ${shown(held.reference)}` : ''}), ` +
      `not this request's ${asked.amount} ${asked.currency}${otherReference ? ` for ${asked.reference}` : ''}: no ` +
      'charge was made for it',
    providerError: { code: 'idempotency_key_replayed' },
  };
}

/**
 * The charges of a list under exactly this reference, each once: a charge listed twice alike is the one charge it is
 * (listed twice differently, the list was not read at all: chargeListedTwice).
 */
function chargesOf(charges: readonly ProviderCharge[], reference: string): ProviderCharge[] {
  const ids = new Set<string>();
  return charges.filter((c) => {
    if (c.reference !== reference) return false;
    if (typeof c.id !== 'string') return true;
    if (ids.has(c.id)) return false;
    ids.add(c.id);
    return true;
  });
}

/** What a read compares and keeps of a charge: two entries of one id that differ here are two answers about it. */
const CHARGE_FIELDS = ['id', 'reference', 'amount', 'currency', 'status', 'version'] as const;

/** The id of a charge the list holds twice with different fields (CHARGE_FIELDS), or null. */
function chargeListedTwice(charges: readonly ProviderCharge[]): string | null {
  const seen = new Map<string, ProviderCharge>();
  for (const charge of charges) {
    if (typeof charge.id !== 'string') continue;
    const before = seen.get(charge.id);
    if (before && CHARGE_FIELDS.some((field) => before[field] !== charge[field])) return charge.id;
    seen.set(charge.id, charge);
  }
  return null;
}

/**
 * The path of the first number in a parsed answer that is not finite (`1e400` parses to Infinity, which the record
 * would keep as null), or null. Iterative: an answer of 64 KiB may nest 32 000 levels.
 */
function nonFiniteNumberIn(body: unknown): string | null {
  const pending: { value: unknown; path: string }[] = [{ value: body, path: '' }];
  while (pending.length > 0) {
    const { value, path } = pending.pop()!;
    if (typeof value === 'number' && !Number.isFinite(value)) return path.replace(/^\./, '') || '(body)';
    if (typeof value !== 'object' || value === null) continue;
    for (const [key, item] of Object.entries(value)) {
      // Named as far as a path is worth reading (200 characters): built level by level, a path through 32 000 levels
      // would take gigabytes.
      const next =
        path.length > 200 ? path : Array.isArray(value) ? `${path}[${key}]` : `${path}.${textPrefix(key, 100)}`;
      pending.push({ value: item, path: next });
    }
  }
  return null;
}

/**
 * A value of the provider's answer as the text of a detail: a string cut to 100 characters, a number as written, any
 * other value by its kind. String() of a 64 KiB id kept all of it, and of `{"toString": 1}` threw (a TypeError: the
 * provider's refusal became a connector error, an unknown outcome).
 */
function shown(value: unknown): string {
  if (typeof value === 'string') return value.length > 100 ? `${textPrefix(value, 100)}…` : value;
  if (typeof value === 'object' && value !== null) return Array.isArray(value) ? '(an array)' : '(an object)';
  return String(value);
}
