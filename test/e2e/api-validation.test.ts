import { zstdCompressSync } from 'node:zlib';
import { DEMO, Stack } from '../support/stack';
import { charge, http, sms, submission } from '../support/http';

/**
 * I10: bad input gets a 4xx application/problem+json naming the field and the rule, and nothing is
 * written. No workers run in this file and no valid request is sent, so every table must stay exactly as it was.
 */

interface Case {
  name: string;
  method?: string;
  path?: string;
  key?: string | null;
  body?: unknown;
  rawBody?: string | Uint8Array | Buffer;
  headers?: Record<string, string>;
  status: number;
  /** A field error that must be listed (field and rule), for 400 validation problems. */
  field?: string;
  rule?: string;
}

const ok = () => charge('validation-ref');
const base = (extra: Record<string, unknown> = {}) => submission([ok()], extra);
const op = (extra: Record<string, unknown>) => submission([{ ...ok(), ...extra }]);
const JSON_HEADERS = { 'content-type': 'application/json' };
const nested = (depth: number): Record<string, unknown> => (depth <= 1 ? { leaf: 1 } : { next: nested(depth - 1) });

const CASES: Case[] = [
  // Transport: the body is not JSON, or not readable as JSON.
  { name: 'invalid JSON', rawBody: '{bad', headers: JSON_HEADERS, status: 400, field: '(body)', rule: 'json' },
  { name: 'truncated JSON', rawBody: '{"agent_id":', headers: JSON_HEADERS, status: 400, rule: 'json' },
  { name: 'a JSON string', rawBody: '"hello"', headers: JSON_HEADERS, status: 400, rule: 'json' },
  { name: 'JSON null', rawBody: 'null', headers: JSON_HEADERS, status: 400, field: '(body)', rule: 'json' },
  // JSON.parse keeps the last of two members of one name: the request stored would not be the one a reader sees.
  {
    name: 'an amount given twice',
    rawBody: JSON.stringify(base()).replace('"amount":1250', '"amount":1250,"amount":99999999'),
    headers: JSON_HEADERS,
    status: 400,
    field: 'operations[0].params.amount',
    rule: 'duplicate_key',
  },
  {
    name: 'agent_id given twice, once escaped',
    rawBody: JSON.stringify(base()).replace('{', '{"agent_\\u0069d":"x",'),
    headers: JSON_HEADERS,
    status: 400,
    field: 'agent_id',
    rule: 'duplicate_key',
  },
  // JSON.parse would round these without a word: the amount stored and sent would not be the one written.
  {
    name: 'an amount beyond 2^53',
    rawBody: JSON.stringify(base()).replace('"amount":1250', '"amount":9007199254740993'),
    headers: JSON_HEADERS,
    status: 400,
    field: 'operations[0].params.amount',
    rule: 'exact_number',
  },
  {
    name: 'an http body number with more digits than a double keeps',
    rawBody: JSON.stringify(
      submission([
        {
          key: 'call',
          connector: 'http',
          action: 'request',
          irreversible: true,
          params: { method: 'POST', url: 'https://api.example.test/orders', body: { total: 1 } },
        },
      ]),
    ).replace('"total":1', '"total":0.30000000000000000001'),
    headers: JSON_HEADERS,
    status: 400,
    field: 'operations[0].params.body.total',
    rule: 'exact_number',
  },
  { name: 'a JSON array', rawBody: '[]', headers: JSON_HEADERS, status: 400, field: '(body)', rule: 'invalid_type' },
  { name: 'an empty body', rawBody: '', headers: JSON_HEADERS, status: 400, field: 'agent_id' },
  { name: 'text/plain', rawBody: JSON.stringify(base()), headers: { 'content-type': 'text/plain' }, status: 415 },
  {
    name: 'form encoded',
    rawBody: 'agent_id=a',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    status: 415,
  },
  { name: 'no content type', rawBody: new TextEncoder().encode(JSON.stringify(base())), status: 415 },
  { name: 'XML', rawBody: '<a/>', headers: { 'content-type': 'application/xml' }, status: 415 },
  // A media type the JSON parser does not take as one (no subtype before "+json", a subtype over 127 characters): the
  // body was left unread, and the caller was told it sent none (400 "expected object, received undefined").
  ...['application/+json', 'application/.+json', `application/${'x'.repeat(123)}+json`].map((type) => ({
    name: `content type ${type.slice(0, 30)}`,
    rawBody: JSON.stringify(base()),
    headers: { 'content-type': type },
    status: 415,
  })),
  {
    name: 'a non-UTF charset',
    rawBody: JSON.stringify(base()),
    headers: { 'content-type': 'application/json; charset=latin1' },
    status: 415,
  },
  // A utf-* charset the parser would decode, into text that then fails as JSON with a 400 naming the wrong cause.
  ...['utf-16', 'UTF-16LE', 'utf-32', '"utf-7"'].map((charset) => ({
    name: `charset ${charset}`,
    rawBody: Buffer.from(JSON.stringify(base()), 'utf16le'),
    headers: { 'content-type': `application/json; charset=${charset}` },
    status: 415,
  })),
  // Two charsets: the API read the first, a proxy or firewall in front of it may read the last and judge other text.
  ...['charset=utf-8; charset=latin1', 'charset=utf-8;charset=utf-8', 'charset=latin1; CHARSET=utf-8'].map(
    (params) => ({
      name: `two charset parameters (${params})`,
      rawBody: JSON.stringify(base()),
      headers: { 'content-type': `application/json; ${params}` },
      status: 415,
    }),
  ),
  {
    name: 'charset UTF-8 in capitals is UTF-8',
    rawBody: JSON.stringify({ ...base(), agent_id: 5 }),
    headers: { 'content-type': 'application/json; charset=UTF-8' },
    status: 400,
    field: 'agent_id',
  },
  {
    name: 'charset utf8 (no hyphen, a common spelling) is UTF-8',
    rawBody: JSON.stringify({ ...base(), agent_id: 5 }),
    headers: { 'content-type': 'application/json; charset=utf8' },
    status: 400,
    field: 'agent_id',
  },
  {
    name: 'an unsupported content encoding',
    rawBody: JSON.stringify(base()),
    headers: { ...JSON_HEADERS, 'content-encoding': 'x-unknown' },
    status: 415,
  },
  {
    // The JSON parser undoes zstd where Node has it (not every Node the API runs on), and the API takes gzip, deflate
    // and br only: a valid submission sent as zstd was carried out (201).
    name: 'a body compressed with a coding the API does not take (zstd)',
    rawBody: zstdCompressSync(JSON.stringify(base())),
    headers: { ...JSON_HEADERS, 'content-encoding': 'zstd' },
    status: 415,
  },
  {
    name: 'a body over 256 KiB',
    body: base({ intent: 'x'.repeat(300 * 1024) }),
    status: 413,
    field: '(body)',
    rule: 'max_bytes',
  },
  {
    name: 'deeply nested JSON',
    rawBody: `${'['.repeat(60_000)}${']'.repeat(60_000)}`,
    headers: JSON_HEADERS,
    status: 400,
  },

  // Structure: missing fields, wrong types, out of range.
  {
    name: 'missing agent_id',
    body: { intent: 'i', operations: [ok()] },
    status: 400,
    field: 'agent_id',
    rule: 'invalid_type',
  },
  { name: 'agent_id a number', body: base({ agent_id: 7 }), status: 400, field: 'agent_id', rule: 'invalid_type' },
  { name: 'agent_id empty', body: base({ agent_id: '' }), status: 400, field: 'agent_id', rule: 'too_small' },
  {
    name: 'agent_id too long',
    body: base({ agent_id: 'a'.repeat(201) }),
    status: 400,
    field: 'agent_id',
    rule: 'too_big',
  },
  { name: 'missing intent', body: { agent_id: 'a', operations: [ok()] }, status: 400, field: 'intent' },
  { name: 'intent too long', body: base({ intent: 'i'.repeat(4001) }), status: 400, field: 'intent', rule: 'too_big' },
  { name: 'missing operations', body: { agent_id: 'a', intent: 'i' }, status: 400, field: 'operations' },
  {
    name: 'operations an object',
    body: base({ operations: { a: ok() } }),
    status: 400,
    field: 'operations',
    rule: 'invalid_type',
  },
  { name: 'no operations', body: base({ operations: [] }), status: 400, field: 'operations', rule: 'too_small' },
  {
    name: '101 operations',
    body: submission(Array.from({ length: 101 }, (_, i) => charge(`r${i}`, { key: `k${i}` }))),
    status: 400,
    field: 'operations',
    rule: 'too_big',
  },
  {
    name: 'deadline_seconds 0',
    body: base({ deadline_seconds: 0 }),
    status: 400,
    field: 'deadline_seconds',
    rule: 'too_small',
  },
  {
    name: 'deadline_seconds over 7 days',
    body: base({ deadline_seconds: 7 * 24 * 3600 + 1 }),
    status: 400,
    field: 'deadline_seconds',
    rule: 'too_big',
  },
  {
    name: 'deadline_seconds fractional',
    body: base({ deadline_seconds: 1.5 }),
    status: 400,
    field: 'deadline_seconds',
  },
  {
    name: 'deadline_seconds a string',
    body: base({ deadline_seconds: '600' }),
    status: 400,
    field: 'deadline_seconds',
  },

  // Mass assignment: unknown fields are refused, never dropped.
  {
    name: 'unknown field tenant_id',
    body: base({ tenant_id: 'demo-other' }),
    status: 400,
    field: 'tenant_id',
    rule: 'unknown_field',
  },
  { name: 'client-chosen id', body: base({ id: 'exe_mine' }), status: 400, field: 'id', rule: 'unknown_field' },
  {
    name: 'client-chosen status',
    body: base({ status: 'completed' }),
    status: 400,
    field: 'status',
    rule: 'unknown_field',
  },
  {
    name: 'operation status',
    body: op({ status: 'VERIFIED' }),
    status: 400,
    field: 'operations[0].status',
    rule: 'unknown_field',
  },
  {
    name: 'operation evidence',
    body: op({ evidence: { forged: true } }),
    status: 400,
    field: 'operations[0].evidence',
    rule: 'unknown_field',
  },
  {
    name: '__proto__ key',
    rawBody: JSON.stringify(base()).replace(/^\{/, '{"__proto__":{"admin":true},'),
    headers: JSON_HEADERS,
    status: 400,
    field: '__proto__',
    rule: 'unknown_field',
  },

  // Operations against the connector catalogue.
  {
    name: 'operation without key',
    body: submission([{ ...ok(), key: undefined }]),
    status: 400,
    field: 'operations[0].key',
  },
  {
    name: 'key with a space',
    body: op({ key: 'a b' }),
    status: 400,
    field: 'operations[0].key',
    rule: 'invalid_format',
  },
  { name: 'duplicate keys', body: submission([ok(), ok()]), status: 400, field: 'operations[1].key', rule: 'unique' },
  {
    name: 'unknown connector',
    body: op({ connector: 'acme.rockets' }),
    status: 400,
    field: 'operations[0].connector',
    rule: 'known_connector',
  },
  {
    name: 'unknown action',
    body: op({ action: 'refund' }),
    status: 400,
    field: 'operations[0].action',
    rule: 'known_action',
  },
  {
    name: 'missing params',
    body: op({ params: undefined }),
    status: 400,
    field: 'operations[0].params',
    rule: 'invalid_type',
  },
  {
    name: 'params an array',
    body: op({ params: [1] }),
    status: 400,
    field: 'operations[0].params',
    rule: 'invalid_type',
  },
  {
    name: 'params: negative amount',
    body: op({ params: { amount: -5, currency: 'EUR', reference: 'r' } }),
    status: 400,
    field: 'operations[0].params.amount',
    rule: 'too_small',
  },
  {
    name: 'params: missing reference',
    body: op({ params: { amount: 5, currency: 'EUR' } }),
    status: 400,
    field: 'operations[0].params.reference',
  },
  {
    name: 'params: unknown field',
    body: op({ params: { amount: 5, currency: 'EUR', reference: 'r', card_number: '4242' } }),
    status: 400,
    field: 'operations[0].params.card_number',
    rule: 'unknown_field',
  },
  {
    // One provider charge (its Idempotency-Key is tenant + reference) would be counted as two committed effects.
    name: 'params: two charges of one reference in one submission',
    body: submission([charge('dup-ref', { key: 'first' }), charge('dup-ref', { key: 'second' })]),
    status: 400,
    field: 'operations[1].params.reference',
    rule: 'duplicate_reference',
  },
  {
    // The Idempotency-Key header is built from the reference: Node would refuse it after the operation was SENT.
    name: 'params: a reference with CR LF',
    body: op({ params: { amount: 5, currency: 'EUR', reference: 'order-7\r\nx-injected: 1' } }),
    status: 400,
    field: 'operations[0].params.reference',
    rule: 'invalid_format',
  },
  {
    name: 'params: a reference with a character no header carries',
    body: op({ params: { amount: 5, currency: 'EUR', reference: 'order-€7' } }),
    status: 400,
    field: 'operations[0].params.reference',
    rule: 'invalid_format',
  },
  {
    name: 'params: SMS to a non-E.164 number',
    body: submission([sms('c', { params: { to: '555', body: 'x' } })]),
    status: 400,
    field: 'operations[0].params.to',
  },
  {
    name: 'irreversible a string',
    body: op({ irreversible: 'yes' }),
    status: 400,
    field: 'operations[0].irreversible',
  },
  {
    name: 'requires_approval a number',
    body: op({ requires_approval: 1 }),
    status: 400,
    field: 'operations[0].requires_approval',
  },
  {
    name: 'unknown verification_method',
    body: op({ verification_method: 'magic' }),
    status: 400,
    field: 'operations[0].verification_method',
    rule: 'invalid_value',
  },
  {
    name: 'read_after_write on a connector without read-back',
    body: submission([sms('c', { verification_method: 'read_after_write' })]),
    status: 400,
    field: 'operations[0].verification_method',
    rule: 'read_back_available',
  },
  {
    name: 'expected_state an array',
    body: op({ expected_state: [1] }),
    status: 400,
    field: 'operations[0].expected_state',
  },
  {
    name: 'expected_state nested too deep',
    body: op({ expected_state: nested(17) }),
    status: 400,
    rule: 'max_depth',
  },
  {
    name: 'expected_state string too long',
    body: op({ expected_state: { note: 'n'.repeat(10_001) } }),
    status: 400,
    field: 'operations[0].expected_state.note',
    rule: 'max_length',
  },

  // depends_on
  { name: 'depends_on a string', body: op({ depends_on: 'charge' }), status: 400, field: 'operations[0].depends_on' },
  {
    name: 'depends_on an unknown key',
    body: op({ depends_on: ['ghost'] }),
    status: 400,
    field: 'operations[0].depends_on[0]',
    rule: 'known_key',
  },
  {
    name: 'depends_on itself',
    body: op({ depends_on: ['charge'] }),
    status: 400,
    field: 'operations[0].depends_on[0]',
    rule: 'no_self_dependency',
  },
  {
    name: 'a two-operation cycle',
    body: submission([charge('r1', { depends_on: ['notify'] }), sms('s1', { depends_on: ['charge'] })]),
    status: 400,
    field: 'operations',
    rule: 'acyclic',
  },
  {
    name: 'a three-operation cycle',
    body: submission([
      charge('r1', { key: 'a', depends_on: ['c'] }),
      charge('r2', { key: 'b', depends_on: ['a'] }),
      charge('r3', { key: 'c', depends_on: ['b'] }),
    ]),
    status: 400,
    field: 'operations',
    rule: 'acyclic',
  },

  // criteria
  {
    name: 'criterion on an unknown operation',
    body: base({ criteria: [{ key: 'paid', operation: 'ghost', expect_status: 'VERIFIED' }] }),
    status: 400,
    field: 'criteria[0].operation',
    rule: 'known_key',
  },
  {
    name: 'criterion with an unknown status',
    body: base({ criteria: [{ key: 'paid', operation: 'charge', expect_status: 'DONE' }] }),
    status: 400,
    field: 'criteria[0].expect_status',
    rule: 'invalid_value',
  },

  // Headers
  {
    name: 'Idempotency-Key longer than 255',
    body: base(),
    headers: { 'idempotency-key': 'k'.repeat(256) },
    status: 400,
    field: 'Idempotency-Key',
    rule: 'format',
  },
  {
    name: 'Idempotency-Key with a space',
    body: base(),
    headers: { 'idempotency-key': 'a b' },
    status: 400,
    field: 'Idempotency-Key',
  },
  { name: 'no API key', body: base(), key: null, status: 401 },
  { name: 'an unknown API key', body: base(), key: 'not-a-key', status: 401 },
  {
    name: 'Basic instead of Bearer',
    body: base(),
    key: null,
    headers: { authorization: 'Basic ZGVtbzpkZW1v' },
    status: 401,
  },
  { name: 'a reviewer key submitting', body: base(), key: DEMO.reviewer, status: 403 },

  // Other endpoints
  {
    name: 'list limit 0',
    method: 'GET',
    path: '/v1/executions?limit=0',
    status: 400,
    field: 'limit',
    rule: 'too_small',
  },
  { name: 'list limit not a number', method: 'GET', path: '/v1/executions?limit=ten', status: 400, field: 'limit' },
  { name: 'list limit over 200', method: 'GET', path: '/v1/executions?limit=201', status: 400, field: 'limit' },
  // Only decimal digits: a number coercion would read these as 16, 100, 5 and 5.
  ...['0x10', '1e2', '%2B5', '%205'].map((limit) => ({
    name: `list limit ${decodeURIComponent(limit)} (not decimal digits)`,
    method: 'GET',
    path: `/v1/executions?limit=${limit}`,
    status: 400,
    field: 'limit',
  })),
  { name: 'list limit twice', method: 'GET', path: '/v1/executions?limit=1&limit=2', status: 400, field: 'limit' },
  // Only an exactly empty value means "absent": a blank, or an empty value given twice, is still a value to refuse.
  { name: 'list limit empty twice', method: 'GET', path: '/v1/executions?limit=&limit=', status: 400, field: 'limit' },
  { name: 'list limit a blank', method: 'GET', path: '/v1/executions?limit=%20', status: 400, field: 'limit' },
  { name: 'list status a blank', method: 'GET', path: '/v1/executions?status=%20', status: 400, field: 'status' },
  { name: 'list cursor a blank', method: 'GET', path: '/v1/executions?cursor=%20', status: 400, field: 'cursor' },
  {
    name: 'review queue reason a blank',
    method: 'GET',
    path: '/v1/review/manual-reviews?reason=%20',
    key: DEMO.reviewer,
    status: 400,
    field: 'reason',
  },
  // Trimmed to nothing, a blank search matched no operation: the queue answered 200 and empty ("nothing waits").
  ...['approvals', 'manual-reviews'].flatMap((queue) =>
    ['%20', '+', '%09%20'].map((blank): Case => ({
      name: `review queue ${queue} q a blank (${blank})`,
      method: 'GET',
      path: `/v1/review/${queue}?q=${blank}`,
      key: DEMO.reviewer,
      status: 400,
      field: 'q',
      rule: 'too_small',
    })),
  ),
  {
    name: 'an empty unknown parameter',
    method: 'GET',
    path: '/v1/executions?tenant=',
    status: 400,
    field: 'tenant',
    rule: 'unknown_field',
  },
  {
    name: 'events limit in hex',
    method: 'GET',
    path: '/v1/executions/exe_01nothere/events?limit=0x10',
    status: 400,
    field: 'limit',
  },
  {
    name: 'webhook deliveries limit in hex',
    method: 'GET',
    path: '/v1/admin/webhooks/whk_01nothere/deliveries?limit=0x10',
    key: DEMO.admin,
    status: 400,
    field: 'limit',
  },
  { name: 'list unknown status', method: 'GET', path: '/v1/executions?status=done', status: 400, field: 'status' },
  {
    name: 'list forged cursor',
    method: 'GET',
    path: '/v1/executions?cursor=%27%20OR%201%3D1',
    status: 400,
    field: 'cursor',
  },
  {
    name: 'list unknown parameter',
    method: 'GET',
    path: '/v1/executions?tenant=demo-other',
    status: 400,
    field: 'tenant',
    rule: 'unknown_field',
  },
  { name: 'an unknown execution', method: 'GET', path: '/v1/executions/exe_01nothere', status: 404 },
  { name: 'events of an unknown execution', method: 'GET', path: '/v1/executions/exe_01nothere/events', status: 404 },
  { name: 'stream of an unknown execution', method: 'GET', path: '/v1/executions/exe_01nothere/stream', status: 404 },
  { name: 'cancel an unknown execution', path: '/v1/executions/exe_01nothere/cancel', status: 404 },
  {
    name: 'cancel with a bad reason',
    path: '/v1/executions/exe_01nothere/cancel',
    body: { reason: 5 },
    status: 400,
    field: 'reason',
  },
  {
    name: 'cancel with an unknown field',
    path: '/v1/executions/exe_01nothere/cancel',
    body: { reason: 'r', force: true },
    status: 400,
    field: 'force',
    rule: 'unknown_field',
  },
  { name: 'an unknown operation', method: 'GET', path: '/v1/operations/op_01nothere', status: 404 },
  { name: 'retry an unknown operation', path: '/v1/operations/op_01nothere/retry', status: 404 },
  {
    name: 'approval with a bad decision',
    path: '/v1/operations/op_01nothere/approval',
    key: DEMO.reviewer,
    body: { decision: 'maybe' },
    status: 400,
    field: 'decision',
  },
  {
    name: 'approval as text/plain',
    path: '/v1/operations/op_01nothere/approval',
    key: DEMO.reviewer,
    rawBody: '{"decision":"approve"}',
    headers: { 'content-type': 'text/plain' },
    status: 415,
  },
  {
    name: 'approval by an agent key',
    path: '/v1/operations/op_01nothere/approval',
    body: { decision: 'approve' },
    status: 403,
  },
  {
    name: 'resolve without evidence',
    path: '/v1/operations/op_01nothere/resolve',
    key: DEMO.reviewer,
    body: { status: 'VERIFIED', evidence: '   ' },
    status: 400,
    field: 'evidence',
  },
  {
    name: 'resolve to a status that is no resolution',
    path: '/v1/operations/op_01nothere/resolve',
    key: DEMO.reviewer,
    body: { status: 'ACKNOWLEDGED', evidence: 'seen it' },
    status: 400,
    field: 'status',
  },
  { name: 'an unknown route', method: 'GET', path: '/v1/nothing-here', status: 404 },
  { name: 'a wrong method', method: 'PUT', path: '/v1/executions', body: base(), status: 405 },
  { name: 'a bad percent-encoding', method: 'GET', path: '/v1/executions/%FF', status: 400 },

  // Hostile input: what no string, key, id or body may hold, refused by one check before any route reads it.
  ...(
    [
      ['NUL', '\u0000', 'no_control_characters'],
      ['a control character', 'a\u0001b', 'no_control_characters'],
      ['a lone high surrogate', 'x\ud800y', 'valid_unicode'],
      ['a lone low surrogate', '\udc00', 'valid_unicode'],
    ] as const
  ).flatMap(([what, bad, rule]): Case[] => [
    { name: `${what} in intent`, body: base({ intent: `i${bad}` }), status: 400, field: 'intent', rule },
    { name: `${what} in agent_id`, body: base({ agent_id: bad }), status: 400, field: 'agent_id', rule },
    {
      name: `${what} in a params string`,
      body: op({ params: { amount: 1250, currency: 'EUR', reference: `r${bad}` } }),
      status: 400,
      field: 'operations[0].params.reference',
      rule,
    },
    {
      name: `${what} in a params key`,
      body: op({ params: { amount: 1250, currency: 'EUR', reference: 'r', [`k${bad}`]: 1 } }),
      status: 400,
      field: `operations[0].params.k${bad}`,
      rule,
    },
    {
      name: `${what} in expected_state`,
      body: op({ expected_state: { charged: `no${bad}` } }),
      status: 400,
      field: 'operations[0].expected_state.charged',
      rule,
    },
    {
      name: `${what} in a cancel reason`,
      path: '/v1/executions/exe_01nothere/cancel',
      body: { reason: `r${bad}` },
      status: 400,
      field: 'reason',
      rule,
    },
    {
      name: `${what} in an approval reason`,
      path: '/v1/operations/op_01nothere/approval',
      key: DEMO.reviewer,
      body: { decision: 'approve', reason: `ok${bad}` },
      status: 400,
      field: 'reason',
      rule,
    },
    {
      name: `${what} in resolve evidence`,
      path: '/v1/operations/op_01nothere/resolve',
      key: DEMO.reviewer,
      body: { status: 'VERIFIED', evidence: `seen${bad}` },
      status: 400,
      field: 'evidence',
      rule,
    },
  ]),
  {
    name: 'NUL in a connector name',
    body: op({ connector: 'sandbox.\u0000payments' }),
    status: 400,
    field: 'operations[0].connector',
    rule: 'no_control_characters',
  },
  {
    name: 'invalid UTF-8',
    rawBody: Buffer.concat([
      Buffer.from('{"agent_id":"a","intent":"'),
      Buffer.from([0xc3, 0x28, 0xff]),
      Buffer.from(`","operations":${JSON.stringify([ok()])}}`),
    ]),
    headers: JSON_HEADERS,
    status: 400,
    field: '(body)',
    rule: 'utf8',
  },
  // br found by the fuzz (test/fuzz): Brotli's errors have codes of their own (ERR__ERROR_FORMAT_PADDING_2), a 500.
  ...['gzip', 'deflate', 'br'].map((encoding): Case => ({
    name: `a plain body sent as ${encoding}`,
    rawBody: JSON.stringify(base()),
    headers: { ...JSON_HEADERS, 'content-encoding': encoding },
    status: 400,
    field: '(body)',
    rule: 'content_encoding',
  })),
  {
    name: 'an empty JSON object sent as br',
    rawBody: '{}',
    headers: { ...JSON_HEADERS, 'content-encoding': 'br' },
    status: 400,
    field: '(body)',
    rule: 'content_encoding',
  },
  {
    name: 'a number JSON cannot carry (1e400)',
    rawBody: JSON.stringify(op({ params: { amount: 1250, currency: 'EUR', reference: 'r', n: 0 } })).replace(
      '"n":0',
      '"n":1e400',
    ),
    headers: JSON_HEADERS,
    status: 400,
    field: 'operations[0].params.n',
    rule: 'finite_number',
  },
  ...['__proto__', 'constructor', 'toString', 'hasOwnProperty'].flatMap((name): Case[] => [
    {
      name: `action ${name}`,
      body: op({ action: name }),
      status: 400,
      field: 'operations[0].action',
      rule: 'known_action',
    },
    {
      name: `connector ${name}`,
      body: op({ connector: name }),
      status: 400,
      field: 'operations[0].connector',
      rule: 'known_connector',
    },
  ]),
  ...['__proto__', 'constructor', 'prototype'].flatMap((name): Case[] => [
    {
      name: `a ${name} key in params`,
      rawBody: `{"agent_id":"a","intent":"i","operations":[{"key":"charge","connector":"sandbox.payments","action":"charge","params":{"amount":1250,"currency":"EUR","reference":"r","${name}":{"x":1}}}]}`,
      headers: JSON_HEADERS,
      status: 400,
      field: `operations[0].params.${name}`,
      rule: 'unknown_field',
    },
    {
      name: `a ${name} key in expected_state`,
      rawBody: `{"agent_id":"a","intent":"i","operations":[{"key":"charge","connector":"sandbox.payments","action":"charge","params":{"amount":1250,"currency":"EUR","reference":"r"},"expected_state":{"${name}":{"charged":false}}}]}`,
      headers: JSON_HEADERS,
      status: 400,
      field: `operations[0].expected_state.${name}`,
      rule: 'unknown_field',
    },
    {
      name: `a ${name} key at the top`,
      rawBody: `{"${name}":{"tenant_id":"demo-other"},"agent_id":"a","intent":"i","operations":[${JSON.stringify(ok())}]}`,
      headers: JSON_HEADERS,
      status: 400,
      field: name,
      rule: 'unknown_field',
    },
  ]),
  ...[
    '/v1/executions/exe_01%00',
    '/v1/executions/exe_01%00/events',
    '/v1/executions/exe_01%00/stream',
    '/v1/operations/op_01%00',
    '/v1/operations/%00',
    '/v1/admin/connector-settings/http%00',
  ].map((path): Case => ({ name: `%00 in the path ${path}`, method: 'GET', path, key: DEMO.admin, status: 404 })),
  ...[
    ['/v1/executions/exe_01%00/cancel', DEMO.agent],
    ['/v1/operations/op_01%00/approval', DEMO.reviewer],
    ['/v1/operations/op_01%00/resolve', DEMO.reviewer],
    ['/v1/operations/op_01%00/retry', DEMO.agent],
  ].map(([path, key]): Case => ({ name: `%00 in the path POST ${path}`, path, key, body: {}, status: 404 })),
  { name: '%00 in a list cursor', method: 'GET', path: '/v1/executions?cursor=exe_%00', status: 400, field: 'cursor' },
  {
    name: '%00 in an events cursor',
    method: 'GET',
    path: '/v1/executions/exe_01nothere/events?after=evt_%00',
    status: 400,
    field: 'after',
    rule: 'no_control_characters',
  },
  // A review queue's cursor is an operation id from a previous page: anything else once answered a page anyway.
  ...['approvals', 'manual-reviews'].flatMap((queue) =>
    ['zzz', 'AAAA', 'exe_01nothere', '%27%20OR%201%3D1'].map((cursor) => ({
      name: `a forged ${queue} cursor ${decodeURIComponent(cursor)}`,
      method: 'GET',
      path: `/v1/review/${queue}?cursor=${cursor}`,
      key: DEMO.reviewer,
      status: 400,
      field: 'cursor',
    })),
  ),
  {
    name: 'review queue limit in hex',
    method: 'GET',
    path: '/v1/review/approvals?limit=0x10',
    key: DEMO.reviewer,
    status: 400,
    field: 'limit',
  },
  {
    name: '%00 in a review queue search',
    method: 'GET',
    path: '/v1/review/approvals?q=a%00b',
    key: DEMO.reviewer,
    status: 400,
    field: 'q',
    rule: 'no_control_characters',
  },
  // Each refusal names its rule: zod's generic `custom` names none, and a client cannot act on it.
  ...((): Case[] => {
    const httpOp = (params: Record<string, unknown>) =>
      submission([{ key: 'call', connector: 'http', action: 'request', params: { method: 'POST', ...params } }]);
    const url = 'https://api.example.com/x';
    const settings = (body: unknown): Case => ({
      name: '',
      method: 'PUT',
      path: '/v1/admin/connector-settings/http',
      key: DEMO.admin,
      body,
      status: 400,
    });
    const cap = { period: 'day' };
    return [
      {
        name: 'expected_state with 51 keys',
        body: op({ expected_state: Object.fromEntries([...Array(51).keys()].map((i) => [`k${i}`, i])) }),
        status: 400,
        field: 'operations[0].expected_state',
        rule: 'too_big',
      },
      {
        name: 'an http url with a space',
        body: httpOp({ url: 'ftp://api.example.com/x' }),
        status: 400,
        field: 'operations[0].params.url',
        rule: 'invalid_format',
      },
      {
        name: 'an http header given twice',
        body: httpOp({ url, headers: { 'X-A': '1', 'x-a': '2' } }),
        status: 400,
        field: 'operations[0].params.headers.x-a',
        rule: 'duplicate_key',
      },
      {
        name: 'an http header Verity sets',
        body: httpOp({ url, headers: { Host: 'a' } }),
        status: 400,
        field: 'operations[0].params.headers.Host',
        rule: 'forbidden_header',
      },
      {
        name: 'an http body on a GET',
        body: httpOp({ url, method: 'GET', body: { a: 1 } }),
        status: 400,
        field: 'operations[0].params.body',
        rule: 'no_body',
      },
      {
        name: 'an http reject status 500',
        body: httpOp({ url, reject_statuses: [500] }),
        status: 400,
        field: 'operations[0].params.reject_statuses[0]',
        rule: 'rejectable_status',
      },
      {
        name: 'an http idempotency key in Content-Type',
        body: httpOp({ url, idempotency: { header: 'Content-Type' } }),
        status: 400,
        field: 'operations[0].params.idempotency.header',
        rule: 'forbidden_header',
      },
      {
        name: 'an http read_back {{ref}} without ref_field',
        body: httpOp({ url, read_back: { url: 'https://api.example.com/x/{{ref}}', field: 'status', equals: 'ok' } }),
        status: 400,
        field: 'operations[0].params.ref_field',
        rule: 'required',
      },
      {
        ...settings({ allow_hosts: [{ host: 'a..example' }] }),
        name: 'an allowlist host that names none',
        field: 'allow_hosts[0].host',
        rule: 'invalid_format',
      },
      {
        ...settings({ allow_hosts: [{ host: 'a.example', secrets: ['t', 't'] }] }),
        name: 'a secret bound twice',
        field: 'allow_hosts[0].secrets',
        rule: 'unique',
      },
      {
        ...settings({ spending_caps: [cap] }),
        name: 'a cap without a limit',
        field: 'spending_caps[0].max_operations',
        rule: 'required',
      },
      {
        ...settings({ spending_caps: [{ ...cap, max_amount: 5 }] }),
        name: 'a cap amount without its field',
        field: 'spending_caps[0].amount_field',
        rule: 'required',
      },
      {
        ...settings({
          spending_caps: [
            { ...cap, max_operations: 5 },
            { ...cap, max_operations: 6 },
          ],
        }),
        name: 'two caps of one period',
        field: 'spending_caps',
        rule: 'unique',
      },
      {
        name: 'a webhook event named twice',
        path: '/v1/admin/webhooks',
        key: DEMO.admin,
        body: { url: 'https://hooks.example.com/h', events: ['execution.finished', 'execution.finished'] },
        status: 400,
        field: 'events',
        rule: 'unique',
      },
    ];
  })(),
];

type Problem = {
  type: string;
  title: string;
  status: number;
  detail?: string;
  errors?: { field: string; rule: string }[];
};

describe('malformed requests (I10)', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'apivalid', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  async function counts(): Promise<Record<string, number>> {
    const out: Record<string, number> = {};
    for (const table of ['executions', 'operations', 'events', 'idempotency_keys']) {
      const [row] = (await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM ${table}`)) as { n: number }[];
      out[table] = row.n;
    }
    return out;
  }

  async function send(c: Case) {
    const headers: Record<string, string> = { ...c.headers };
    const key = c.key === undefined ? DEMO.agent : c.key;
    if (key) headers.authorization = `Bearer ${key}`;
    let body: string | Uint8Array | Buffer | undefined;
    if (c.rawBody !== undefined) body = c.rawBody;
    else if (c.body !== undefined) {
      body = JSON.stringify(c.body);
      headers['content-type'] ??= 'application/json';
    }
    const res = await fetch(`${stack.apiUrl}${c.path ?? '/v1/executions'}`, {
      method: c.method ?? 'POST',
      headers,
      body,
    });
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = text;
    }
    return {
      status: res.status,
      type: res.headers.get('content-type'),
      body: parsed as Problem,
      requestId: res.headers.get('x-request-id'),
    };
  }

  it(`has at least 40 cases (${CASES.length})`, () => {
    expect(CASES.length).toBeGreaterThanOrEqual(40);
    expect(new Set(CASES.map((c) => c.name)).size).toBe(CASES.length);
  });

  it('answers every one with its 4xx problem+json naming the field and rule, and writes nothing', async () => {
    const before = await counts();
    const failures: string[] = [];
    for (const c of CASES) {
      const res = await send(c);
      const problems: string[] = [];
      if (res.status !== c.status) problems.push(`status ${res.status}, expected ${c.status}`);
      if (!res.type?.startsWith('application/problem+json')) problems.push(`content-type ${res.type}`);
      if (typeof res.body !== 'object' || res.body === null) problems.push('body is not JSON');
      else {
        if (res.body.status !== res.status) problems.push(`body status ${res.body.status}`);
        if (!/^https:\/\/verity\.dev\/problems\/[a-z-]+$/.test(res.body.type ?? ''))
          problems.push(`type ${res.body.type}`);
        if (!res.body.title) problems.push('no title');
        if (res.status === 400 && !(res.body.errors?.length || res.body.detail)) problems.push('400 without errors');
        if (c.field || c.rule) {
          const match = res.body.errors?.some(
            (e) => (c.field === undefined || e.field === c.field) && (c.rule === undefined || e.rule === c.rule),
          );
          if (!match)
            problems.push(`no error with field=${c.field} rule=${c.rule}: ${JSON.stringify(res.body.errors)}`);
        }
        if (/\n\s+at |\\n\s+at /.test(JSON.stringify(res.body))) problems.push('looks like a stack trace');
        for (const e of res.body.errors ?? [])
          if (e.rule === 'custom') problems.push(`${e.field}: rule "custom" names no rule`);
      }
      if (!res.requestId) problems.push('no x-request-id');
      if (problems.length) failures.push(`${c.name}: ${problems.join('; ')}`);
    }
    expect(failures).toEqual([]);
    expect(await counts()).toEqual(before);
    expect(before).toEqual({ executions: 0, operations: 0, events: 0, idempotency_keys: 0 });
  });

  it('refuses the later of two operations naming one payment reference, naming the earlier, and writes nothing', async () => {
    const before = await counts();
    const res = await send({
      name: 'duplicate reference',
      body: submission([
        charge('order-7', { key: 'pay' }),
        sms('n', { key: 'notify' }),
        charge('order-7', { key: 'pay-again', params: { amount: 99, currency: 'EUR', reference: 'order-7' } }),
      ]),
      status: 400,
    });
    expect(res.status).toBe(400);
    expect(res.type).toMatch(/^application\/problem\+json/);
    expect(res.body.type).toBe('https://verity.dev/problems/validation-error');
    expect(res.body.errors).toEqual([
      {
        field: 'operations[2].params.reference',
        rule: 'duplicate_reference',
        message: expect.stringMatching(/^operation "pay" already names this sandbox\.payments reference/),
      },
    ]);
    expect(await counts()).toEqual(before);
    const list = await http<{ data: unknown[] }>(stack.apiUrl, 'GET', '/v1/executions', { key: DEMO.agent });
    expect(list.body.data).toEqual([]);
  });

  // The list endpoint as documented, `GET /v1/executions?status=&cursor=&limit=`: an empty value is one left out.
  it('reads an empty query parameter as absent on every list endpoint', async () => {
    const pages: [string, string, number][] = [
      ['/v1/executions?status=&cursor=&limit=', DEMO.agent, 200],
      ['/v1/executions?status=', DEMO.agent, 200],
      ['/v1/executions?cursor=', DEMO.agent, 200],
      ['/v1/executions?limit=', DEMO.agent, 200],
      ['/v1/review/approvals?connector=&q=&cursor=&limit=', DEMO.reviewer, 200],
      ['/v1/review/manual-reviews?connector=&q=&cursor=&limit=&reason=&escalated=', DEMO.reviewer, 200],
      // Past validation to the lookup: the execution and the webhook do not exist.
      ['/v1/executions/exe_01nothere/events?after=&limit=', DEMO.agent, 404],
      ['/v1/admin/webhooks/whk_01nothere/deliveries?cursor=&limit=', DEMO.admin, 404],
    ];
    const answers = [];
    for (const [path, key] of pages) answers.push([path, (await http(stack.apiUrl, 'GET', path, { key })).status]);
    expect(answers).toEqual(pages.map(([path, , status]) => [path, status]));
    const list = await http<{ data: unknown[]; next_cursor: string | null }>(
      stack.apiUrl,
      'GET',
      '/v1/executions?status=&cursor=&limit=',
      { key: DEMO.agent },
    );
    expect(list.body).toEqual({ data: [], next_cursor: null });
  });

  it('lists at most 50 field errors however many there are', async () => {
    const body = submission(
      Array.from({ length: 100 }, (_, i) =>
        charge(`r${i}`, { key: `k${i}`, params: { amount: -1, currency: 'x', reference: '' } }),
      ),
    );
    const res = await http<Problem>(stack.apiUrl, 'POST', '/v1/executions', { key: DEMO.agent, body });
    expect(res.status).toBe(400);
    expect(res.body.errors).toHaveLength(50);
    expect(res.body.detail).toMatch(/and \d+ more/);
  });
});
