import { connect } from 'node:net';
import type { ProblemDetails as Problem } from '@verity/sdk';
import { DEMO, Stack, freePort, waitFor } from '../support/stack';
import { charge, http, rawExchange, submission, unique } from '../support/http';

/**
 * Hostile strings the request-wide checks (http/hostile-input.ts) let through, each caught where its field is
 * owned: a 4xx problem+json naming the field, and nothing written.
 */

type Errors = Problem & { errors?: { field: string; rule: string; message: string }[] };

const QUEUE_NAME_ENCODING = 'a queue name, in which each % starts a percent-encoded byte (%25 for % itself)';
const BOARD_JOBS_PER_PAGE = 'at most 300 jobs per page (what Bull Board’s own page asks for at most)';
const BOARD_PAGE = 'at most page 1000000000';

describe('hostile strings', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'hoststr', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  const TABLES = [
    'executions',
    'operations',
    'events',
    'admin_changes',
    'webhook_endpoints',
    'tenant_connector_settings',
  ];
  async function counts(): Promise<Record<string, number>> {
    const out: Record<string, number> = {};
    for (const table of TABLES) {
      const [row] = (await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM ${table}`)) as { n: number }[];
      out[table] = row.n;
    }
    return out;
  }

  // `trim` keeps U+200B ZERO WIDTH SPACE, U+2060 WORD JOINER, U+3164 HANGUL FILLER and U+115F HANGUL CHOSEONG FILLER: a field that must say
  // something took one of them for text (a reviewer's "required" evidence, the tenant's obligation owner).
  const INVISIBLE = ['\u200b', '\u2060', ' \u3164 ', '\u115f', '\u200b\u200c\u200d'];

  it.each(INVISIBLE.map((value) => [JSON.stringify(value), value]))(
    'refuses evidence of nothing visible (%s) like empty evidence, and writes nothing',
    async (_name, evidence) => {
      const before = await counts();
      const res = await http<Errors>(stack.apiUrl, 'POST', '/v1/operations/op_01nothere/resolve', {
        key: DEMO.reviewer,
        body: { status: 'VERIFIED', evidence },
      });
      expect(res.status).toBe(400);
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(res.body.errors).toEqual([{ field: 'evidence', rule: 'too_small', message: 'evidence text is required' }]);
      expect(await counts()).toEqual(before);
    },
  );

  it.each(
    INVISIBLE.flatMap((value) => [
      ['obligation_owner', value],
      ['escalation_target', value],
    ]),
  )('refuses a policy %s of nothing visible (%j), and writes nothing', async (field, value) => {
    const before = await counts();
    const policy = await http(stack.apiUrl, 'GET', '/v1/admin/policy', { key: DEMO.admin });
    const res = await http<Errors>(stack.apiUrl, 'PUT', '/v1/admin/policy', {
      key: DEMO.admin,
      body: { [field]: value },
    });
    expect(res.status).toBe(400);
    expect(res.body.errors).toEqual([{ field, rule: 'too_small', message: 'must not be empty' }]);
    expect(await counts()).toEqual(before);
    expect((await http(stack.apiUrl, 'GET', '/v1/admin/policy', { key: DEMO.admin })).body).toEqual(policy.body);
  });

  // An execution's agent_id and intent are stored as written, so a submission of spaces or of a zero-width space was
  // recorded with an agent no one could read back and an intent that says nothing.
  it.each(
    [...INVISIBLE, '   ', '\t\n'].flatMap((value) => [
      ['agent_id', value],
      ['intent', value],
    ]),
  )('refuses a submission whose %s shows nothing (%j), and writes nothing', async (field, value) => {
    const before = await counts();
    const res = await http<Errors>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('blank'))], { [field]: value }),
    });
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(res.body.errors).toEqual([
      {
        field,
        rule: 'too_small',
        message: 'must contain a visible character (not only white space or invisible characters)',
      },
    ]);
    expect(await counts()).toEqual(before);
  });

  it('stores an agent_id and intent as written, spaces around visible text included', async () => {
    const res = await http<{ id: string; agent_id: string; intent: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('spaced'))], { agent_id: ' billing bot ', intent: ' charge ' }),
    });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ agent_id: ' billing bot ', intent: ' charge ' });
  });

  // A name, evidence, an agent_id and an intent are read by a person deciding on them: an invisible character inside
  // visible text makes them read as other text, and is refused with the character named (e2e shown-text-hidden,
  // agent-text-hidden); spaces around visible text are kept as written (above).
  it('refuses evidence, names, an agent_id and an intent with invisible characters inside visible text, naming the character', async () => {
    const before = await counts();
    for (const [field, value] of [
      ['agent_id', ' billing\u200bbot '],
      ['intent', ' charge\u200b '],
    ]) {
      const submitted = await http<Errors>(stack.apiUrl, 'POST', '/v1/executions', {
        key: DEMO.agent,
        body: submission([charge(unique('hidden'))], { [field]: value }),
      });
      expect(submitted.status).toBe(400);
      expect(submitted.body.errors).toEqual([
        { field, rule: 'invalid_format', message: expect.stringContaining('no U+200B:') },
      ]);
    }
    expect(await counts()).toEqual(before);
    const res = await http<Errors>(stack.apiUrl, 'PUT', '/v1/admin/policy', {
      key: DEMO.admin,
      body: { obligation_owner: ' pay\u200bments ' },
    });
    expect(res.status).toBe(400);
    expect(res.body.errors).toEqual([
      { field: 'obligation_owner', rule: 'invalid_format', message: expect.stringContaining('no U+200B:') },
    ]);
    const resolve = await http<Errors>(stack.apiUrl, 'POST', '/v1/operations/op_01nothere/resolve', {
      key: DEMO.reviewer,
      body: { status: 'VERIFIED', evidence: '\u200bseen it' },
    });
    expect(resolve.status).toBe(400);
    expect(resolve.body.errors).toEqual([
      { field: 'evidence', rule: 'invalid_format', message: expect.stringContaining('no U+200B:') },
    ]);
  });

  // The URL parser drops tabs and line breaks anywhere and spaces at either end: the URL was checked (and called) as
  // `http://allowed.example/`, and stored and shown as the string written, line breaks included.
  const RESPELLED = [
    'http://allow\ned.example/hook',
    'http://allowed.example/a\tb',
    'http://allowed.example/\r\nX-Injected: 1',
    'http://allowed.example/hook ',
    ' http://allowed.example/hook',
  ];

  it.each(RESPELLED.map((url) => [JSON.stringify(url), url]))(
    'refuses a webhook URL the parser would respell (%s), and writes nothing',
    async (_name, url) => {
      const allow = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
        key: DEMO.admin,
        body: { allow_hosts: [{ host: 'allowed.example' }] },
      });
      expect(allow.status).toBe(200);
      const before = await counts();
      const res = await http<Errors>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
        key: DEMO.admin,
        body: { url, events: ['operation.settled'] },
      });
      expect(res.status).toBe(400);
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(res.body.errors).toEqual([
        { field: 'url', rule: 'invalid_format', message: expect.stringMatching(/^no tabs or line breaks/) },
      ]);
      expect(await counts()).toEqual(before);
    },
  );

  it.each(
    RESPELLED.flatMap((url) => [
      ['url', url, { method: 'POST', url }],
      [
        'read_back.url',
        url,
        { method: 'POST', url: 'http://allowed.example/x', read_back: { url, field: 'id', equals: 1 } },
      ],
    ]),
  )(
    'refuses an http operation whose params.%s the parser would respell (%j), and writes nothing',
    async (field, _url, params) => {
      const before = await counts();
      const res = await http<Errors>(stack.apiUrl, 'POST', '/v1/executions', {
        key: DEMO.agent,
        body: submission([{ key: 'call', connector: 'http', action: 'request', params }]),
      });
      expect(res.status).toBe(400);
      expect(res.body.errors).toContainEqual({
        field: `operations[0].params.${field}`,
        rule: 'invalid_format',
        message: expect.stringMatching(/^(no tabs or line breaks|an absolute http)/),
      });
      expect(await counts()).toEqual(before);
    },
  );

  /**
   * A PUT of the http allowlist `allowHosts` that must write nothing: its answer, once the rows and the settings as GET
   * shows them are seen unchanged.
   */
  async function refusedAllowlistPut(allowHosts: unknown[]) {
    const path = '/v1/admin/connector-settings/http';
    const before = await counts();
    const settings = await http(stack.apiUrl, 'GET', path, { key: DEMO.admin });
    const res = await http<Errors>(stack.apiUrl, 'PUT', path, { key: DEMO.admin, body: { allow_hosts: allowHosts } });
    expect(await counts()).toEqual(before);
    expect((await http(stack.apiUrl, 'GET', path, { key: DEMO.admin })).body).toEqual(settings.body);
    return res;
  }

  it.each(['.', '..', 'a..example', '.example', '*..example'])(
    'refuses the allowlist host %j, which named no host (stored as another name), and writes nothing',
    async (host) => {
      const res = await refusedAllowlistPut([{ host }]);
      expect(res.status).toBe(400);
      expect(res.body.errors).toEqual([
        { field: 'allow_hosts[0].host', rule: 'invalid_format', message: expect.any(String) },
      ]);
    },
  );

  // A URL whose host has a label over 63 characters is refused (DNS cannot look it up), so an allowlist entry with one
  // was stored, shown and counted while no URL could ever reach it.
  it.each([`${'a'.repeat(64)}.example`, `*.${'b'.repeat(64)}.example`, `api.${'c'.repeat(100)}`])(
    'refuses the allowlist host %j, with a label DNS cannot carry, and writes nothing',
    async (host) => {
      const res = await refusedAllowlistPut([{ host }]);
      expect(res.status).toBe(400);
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(res.body.errors).toEqual([
        {
          field: 'allow_hosts[0].host',
          rule: 'invalid_format',
          message: expect.stringContaining('1 to 63 characters'),
        },
      ]);
    },
  );

  // A name in Unicode was refused as "a host name or IP address, without scheme or port" (it is a host name): the
  // answer names the ASCII spelling the URL parser calls, as a webhook URL's does.
  it.each([
    ['bücher.example', 'xn--bcher-kva.example'],
    ['*.bücher.example', '*.xn--bcher-kva.example'],
    ['ＥＸＡＭＰＬＥ.com', 'example.com'],
    ['ex\u00adample.com', 'example.com'],
  ])('refuses the allowlist host %j naming its ASCII spelling %j, and writes nothing', async (host, ascii) => {
    const res = await refusedAllowlistPut([{ host }]);
    expect(res.status).toBe(400);
    expect(res.body.errors).toEqual([
      {
        field: 'allow_hosts[0].host',
        rule: 'invalid_format',
        message: `write the host name in ASCII as it is called ("${ascii}")`,
      },
    ]);
  });

  // The same port twice in one entry was stored and shown twice ([443, 443]), while the same port in a second entry of
  // the host is refused (shadowed): a secret's name twice is refused too.
  it('refuses an allowlist entry naming a port twice, and writes nothing', async () => {
    const res = await refusedAllowlistPut([{ host: 'allowed.example', ports: [443, 8443, 443] }]);
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(res.body.errors).toEqual([
      { field: 'allow_hosts[0].ports', rule: 'unique', message: 'a port is named twice' },
    ]);
  });

  it('still takes an allowlist host whose labels are 63 characters', async () => {
    const path = '/v1/admin/connector-settings/http';
    const before = await http<{ allow_hosts: Record<string, unknown>[] }>(stack.apiUrl, 'GET', path, {
      key: DEMO.admin,
    });
    const host = `${'d'.repeat(63)}.example`;
    const res = await http<{ allow_hosts: { host: string }[] }>(stack.apiUrl, 'PUT', path, {
      key: DEMO.admin,
      body: { allow_hosts: [{ host }] },
    });
    expect(res.status).toBe(200);
    expect(res.body.allow_hosts.map((entry) => entry.host)).toEqual([host]);
    const restored = await http(stack.apiUrl, 'PUT', path, {
      key: DEMO.admin,
      body: { allow_hosts: before.body.allow_hosts },
    });
    expect(restored.status).toBe(200);
  });

  /** An http operation whose request sends the header X-Note with `value`, submitted. */
  const submitHeaderValue = (value: string) =>
    http<Errors>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([
        {
          key: 'call',
          connector: 'http',
          action: 'request',
          params: { method: 'POST', url: 'http://allowed.example/x', headers: { 'X-Note': value } },
        },
      ]),
    });

  it.each([' Bearer x', 'x ', '\tx', 'x\t'])(
    'refuses an http header value %j that fetch would send trimmed (the record would show another), and writes nothing',
    async (value) => {
      const before = await counts();
      const res = await submitHeaderValue(value);
      expect(res.status).toBe(400);
      expect(res.body.errors).toContainEqual({
        field: 'operations[0].params.headers.X-Note',
        rule: 'invalid_format',
        message: expect.stringMatching(/^no spaces or tabs at either end/),
      });
      expect(await counts()).toEqual(before);
    },
  );

  // A header value carries one byte per character: "€" was refused as "no line breaks", naming a cause it did not have.
  it.each([
    ['€', /no character a header value cannot carry/],
    ['日本', /no character a header value cannot carry/],
    ['a\nb', /no line breaks/],
  ])('refuses the http header value %j saying why, and writes nothing', async (value, said) => {
    const before = await counts();
    const res = await submitHeaderValue(value);
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(res.body.errors).toEqual([
      { field: 'operations[0].params.headers.X-Note', rule: 'invalid_format', message: expect.stringMatching(said) },
    ]);
    expect(await counts()).toEqual(before);
  });

  it.each([
    ['GET', '/v1/admin/webhooks?limit=1', DEMO.admin],
    ['GET', '/v1/review/summary?__proto__=1', DEMO.reviewer],
    ['GET', '/v1/admin/policy?x=1', DEMO.admin],
    ['GET', '/v1/connectors?cursor=op_1', DEMO.agent],
    ['GET', '/v1/executions/exe_01nothere?status=failed', DEMO.agent],
    ['PUT', '/v1/admin/policy?obligation_owner=x', DEMO.admin],
    ['GET', '/v1?verbose=1', undefined],
    ['GET', '/?verbose=1', undefined],
  ])('refuses the unknown query parameter of %s %s (it was ignored), and writes nothing', async (method, path, key) => {
    const before = await counts();
    const res = await http<Errors>(stack.apiUrl, method, path, { key, body: method === 'PUT' ? {} : undefined });
    expect(res.status).toBe(400);
    const name = new URL(path, stack.apiUrl).searchParams.keys().next().value;
    expect(res.body.errors).toEqual([{ field: name, rule: 'unknown_field', message: expect.any(String) }]);
    expect(await counts()).toEqual(before);
  });

  // The query parser reads bytes that are not UTF-8 as U+FFFD, so `?q=%ED%A0%80` searched for "���" and answered 200,
  // a page of what no one asked for (a body's bytes that are not UTF-8 are refused: a query's are refused alike).
  it.each([
    ['/v1/review/approvals?q=%ED%A0%80', 'q', DEMO.reviewer],
    ['/v1/review/manual-reviews?connector=%C0%AF', 'connector', DEMO.reviewer],
    ['/v1/review/approvals?q=caf%E9', 'q', DEMO.reviewer],
    ['/v1/executions?status=created&cursor=%FF%FE', 'cursor', DEMO.agent],
    ['/v1/admin/changes?%FF=1', '%FF', DEMO.admin],
  ])('refuses GET %s, whose %s is not UTF-8 once percent-decoded, and writes nothing', async (path, field, key) => {
    const before = await counts();
    const res = await http<Errors>(stack.apiUrl, 'GET', path, { key });
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(res.body.errors).toEqual([{ field, rule: 'utf8', message: expect.stringContaining('not valid UTF-8') }]);
    expect(await counts()).toEqual(before);
  });

  it.each([
    '/v1/review/approvals?q=%EF%BF%BD',
    '/v1/review/approvals?q=caf%C3%A9+%F0%9F%98%80',
    '/v1/review/approvals?q=%25zz',
  ])('still searches GET %s (UTF-8 once percent-decoded)', async (path) => {
    const res = await http(stack.apiUrl, 'GET', path, { key: DEMO.reviewer });
    expect(res.status).toBe(200);
  });

  // A PUT that names no setting changed nothing, yet was recorded as the admin's change (and moved updated_at).
  it.each([
    ['/v1/admin/policy', {}],
    ['/v1/admin/connector-settings/http', {}],
    ['/v1/admin/connector-settings/http', { secrets: {} }],
  ])('refuses a PUT %s of %j, which names no setting, and writes nothing', async (path, body) => {
    const before = await counts();
    const shown = await http(stack.apiUrl, 'GET', path, { key: DEMO.admin });
    const res = await http<Errors>(stack.apiUrl, 'PUT', path, { key: DEMO.admin, body });
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(res.body.errors).toEqual([
      { field: '(body)', rule: 'no_change', message: 'name at least one setting to change' },
    ]);
    expect(await counts()).toEqual(before);
    expect((await http(stack.apiUrl, 'GET', path, { key: DEMO.admin })).body).toEqual(shown.body);
  });

  // An http operation's idempotency header is set as a member of the request's headers: named "__proto__", it was no
  // member, and the call went out without its idempotency key while the operation said the provider deduplicates it.
  it('refuses an http operation whose idempotency header is named "__proto__", and writes nothing', async () => {
    const before = await counts();
    const res = await http<Errors>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([
        {
          key: 'call',
          connector: 'http',
          action: 'request',
          params: { method: 'POST', url: 'https://hooks.example.com/pay', idempotency: { header: '__proto__' } },
        },
      ]),
    });
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(res.body.errors).toEqual([
      expect.objectContaining({
        field: 'operations[0].params.idempotency.header',
        message: expect.stringContaining('"__proto__" cannot be a header name here'),
      }),
    ]);
    expect(await counts()).toEqual(before);
  });

  // Bull Board answered its own errors as plain JSON ({ error: { key } }): the one place of the API whose errors a
  // client had to read in a second format. Its members stay, as extensions, for its page.
  it.each([
    ['GET', '/admin/queues/api/queues/dispatch/no-such-job', 404, 'not-found', 'ERRORS.JOB_NOT_FOUND'],
    ['GET', '/admin/queues/api/queues/dispatch/%ff', 400, 'bad-request', 'ERRORS.INTERNAL_SERVER_ERROR'],
    ['GET', '/admin/queues/api/queues?page=abc', 400, 'bad-request', 'ERRORS.INVALID_QUERY_PARAM'],
    ['PUT', '/admin/queues/api/queues/dispatch/pause', 405, 'method-not-allowed', 'ERRORS.QUEUE_READ_ONLY'],
    // "Pause all" and "resume all" skip read-only queues: on a read-only board they paused nothing and answered 200, and
    // an operator who paused every queue to stop the sends in an incident was told it was done.
    ['PUT', '/admin/queues/api/queues/pause', 405, 'method-not-allowed', 'ERRORS.QUEUE_READ_ONLY'],
    ['PUT', '/admin/queues/api/queues/resume', 405, 'method-not-allowed', 'ERRORS.QUEUE_READ_ONLY'],
    ['PUT', '/admin/queues/api/Queues/Pause/', 405, 'method-not-allowed', 'ERRORS.QUEUE_READ_ONLY'],
  ])('answers Bull Board’s error to %s %s as problem+json (%d %s)', async (method, path, status, code, key) => {
    const res = await http<Problem & { error?: { key: string } }>(stack.apiUrl, method, path, { key: DEMO.operator });
    expect(res.status).toBe(status);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(res.body).toMatchObject({
      type: `https://verity.dev/problems/${code}`,
      status,
      instance: path.split('?')[0],
      detail: expect.stringContaining(key.replace('ERRORS.', '')),
      error: { key },
    });
    if (status === 405) expect(res.headers.get('allow')).toBe('');
  });

  // Bull Board decodes these two query parameters once more after express has (decodeURIComponent in its handlers): a
  // value holding a `%` that starts no escape (`%25ZZ` arrives as `%ZZ`) threw inside the board, a 500.
  it.each([
    ['/admin/queues/api/queues?activeQueue=%25ZZ', 'activeQueue'],
    ['/admin/queues/api/queues?activeQueue=dispatch&activeQueue=%25', 'activeQueue'],
    ['/admin/queues/api/job-schedulers?queueName=%25E2%25', 'queueName'],
  ])('refuses GET %s as a 400 naming %s, which Bull Board cannot decode', async (path, field) => {
    const res = await http<Errors>(stack.apiUrl, 'GET', path, { key: DEMO.operator });
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(res.body).toMatchObject({ type: 'https://verity.dev/problems/validation-error', status: 400 });
    expect(res.body.errors).toEqual([{ field, rule: 'invalid_format', message: QUEUE_NAME_ENCODING }]);
    // Without a key the answer stays 401: the check comes after the operator's.
    expect((await http(stack.apiUrl, 'GET', path)).status).toBe(401);
  });

  // Bull Board checks only that page and jobsPerPage are whole numbers from 1: jobsPerPage=1000000000 listed every job
  // of a queue in one answer (its own page offers at most 300), and page=1e300 or jobsPerPage=1e300 reached Redis as a
  // range it refused, a 500.
  it.each([
    ['jobsPerPage=1e300', 'jobsPerPage', BOARD_JOBS_PER_PAGE],
    ['jobsPerPage=1000000000', 'jobsPerPage', BOARD_JOBS_PER_PAGE],
    ['jobsPerPage=301', 'jobsPerPage', BOARD_JOBS_PER_PAGE],
    ['jobsPerPage=9007199254740993', 'jobsPerPage', BOARD_JOBS_PER_PAGE],
    ['page=1e300', 'page', BOARD_PAGE],
    ['page=9007199254740993', 'page', BOARD_PAGE],
    ['page=1000000001', 'page', BOARD_PAGE],
  ])('refuses Bull Board’s list with %s as a 400 naming %s', async (query, field, message) => {
    const path = `/admin/queues/api/queues?activeQueue=dispatch&status=completed&${query}`;
    const res = await http<Errors>(stack.apiUrl, 'GET', path, { key: DEMO.operator });
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(res.body.errors).toEqual([{ field, rule: 'too_big', message }]);
    expect((await http(stack.apiUrl, 'GET', path)).status).toBe(401);
  });

  it('still lists a queue at the most jobs per page Bull Board’s own page asks for', async () => {
    const res = await http<{ queues: { name: string; pagination: { range: { start: number; end: number } } }[] }>(
      stack.apiUrl,
      'GET',
      '/admin/queues/api/queues?activeQueue=dispatch&status=completed&page=1000000000&jobsPerPage=300',
      { key: DEMO.operator },
    );
    expect(res.status).toBe(200);
    expect(res.body.queues.find((q) => q.name === 'dispatch')?.pagination.range.end).toBe(300 * 1e9 - 1);
  });

  it('still lists a queue Bull Board is asked for by its plain or percent-encoded name', async () => {
    for (const name of ['dispatch', '%64ispatch']) {
      const res = await http<{ queues: { name: string; pagination: { range: { start: number } } }[] }>(
        stack.apiUrl,
        'GET',
        `/admin/queues/api/queues?activeQueue=${encodeURIComponent(name)}&status=completed&page=1`,
        { key: DEMO.operator },
      );
      expect(res.status).toBe(200);
      expect(res.body.queues.map((q) => q.name)).toContain('dispatch');
    }
  });

  // The writes marked ActsOn look the id of their path up before answering `If-None-Match: *` (unknown: 404): an id no
  // resource can have must be refused there or before, as a 4xx problem, never reach the lookup as a 500.
  describe('a hostile id on a write that looks its resource up for If-None-Match: * (ActsOn)', () => {
    let endpoint = '';
    beforeAll(async () => {
      const allow = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
        key: DEMO.admin,
        body: { allow_hosts: [{ host: 'allowed.example' }] },
      });
      expect(allow.status).toBe(200);
      const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
        key: DEMO.admin,
        body: { url: 'http://allowed.example/acts-on', events: ['operation.settled'] },
      });
      expect(created.status).toBe(201);
      endpoint = created.body.id;
    });
    const deliveries = async () =>
      ((await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM webhook_deliveries`)) as { n: number }[])[0].n;

    // Each write with the role that may make it; the hostile id goes where `{id}` is. A redelivery names two ids: the
    // endpoint's, and (`{endpoint}`, one that exists) the delivery's.
    const WRITES = [
      ['POST', '/v1/executions/{id}/cancel', DEMO.agent],
      ['POST', '/v1/operations/{id}/retry', DEMO.agent],
      ['DELETE', '/v1/admin/webhooks/{id}', DEMO.admin],
      ['POST', '/v1/admin/webhooks/{id}/enable', DEMO.admin],
      ['POST', '/v1/admin/webhooks/{id}/deliveries/msg_nosuchdelivery/redeliver', DEMO.admin],
      ['POST', '/v1/admin/webhooks/{endpoint}/deliveries/{id}/redeliver', DEMO.admin],
    ];
    // As sent in the path: a NUL percent-encoded, a lone surrogate's UTF-8 bytes, 10,000 characters, path escapes, the
    // name of every object's prototype.
    const HOSTILE_IDS = [
      'exe%00x',
      '%00',
      '%ED%A0%80',
      'x'.repeat(10_000),
      '%2F..%2F',
      '..%2F..%2Fv1%2Fexecutions',
      '__proto__',
    ];
    const CONDITIONS: Record<string, string>[] = [{ 'if-none-match': '*' }, { 'if-match': '"x"' }];
    const isProblem4xx = (status: number, contentType: string | null | undefined) =>
      status >= 400 && status < 500 && /^application\/problem\+json/.test(contentType ?? '');

    it.each(
      WRITES.flatMap(([method, path, key]) => CONDITIONS.map((condition) => [method, path, condition, key] as const)),
    )(
      '%s %s with %j: a 4xx problem for every hostile id (a raw NUL too), and writes nothing',
      async (method, path, condition, key) => {
        const at = (id: string) => path.replace('{endpoint}', endpoint).replace('{id}', id);
        const before = { tables: await counts(), deliveries: await deliveries() };
        const wrong: unknown[] = [];
        for (const id of HOSTILE_IDS) {
          const res = await http<Problem>(stack.apiUrl, method, at(id), { key, headers: condition });
          const type = res.headers.get('content-type');
          if (!isProblem4xx(res.status, type) || res.body.status !== res.status) {
            wrong.push([id.slice(0, 40), res.status, type, res.text.slice(0, 200)]);
          }
        }
        // A NUL as a raw byte of the request line, which no HTTP client sends: refused by the HTTP parser.
        const [[name, value]] = Object.entries(condition);
        const raw = await rawExchange(
          stack.apiUrl,
          `${method} ${at('exe\u0000x')} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${key}\r\n` +
            `${name}: ${value}\r\ncontent-length: 0\r\n\r\n`,
        );
        if (!isProblem4xx(raw.status, raw.headers['content-type'])) {
          wrong.push(['raw NUL', raw.status, raw.headers['content-type'], raw.body.slice(0, 200)]);
        }
        expect(wrong).toEqual([]);
        expect({ tables: await counts(), deliveries: await deliveries() }).toEqual(before);
      },
    );

    // A DELETE that finds no endpoint of the id waits for the tenant's sends to that id still marked in flight (another
    // delete of it may have committed first), then answers 404: that path, with the ids no endpoint can have. One id
    // has a send of the tenant's marked in flight (the wait is taken), and an expired mark of another tenant's that
    // this tenant's delete must leave alone.
    it('a second DELETE /v1/admin/webhooks/{id} (404 once the sends in flight ended): a 4xx problem for every hostile id, and writes nothing', async () => {
      const mark = (id: string, endpointId: string, tenantId: string, untilMs: number) =>
        stack.db.dataSource.query(
          `INSERT INTO webhook_sends_in_flight (id, endpoint_id, tenant_id, until)
             VALUES ($1, $2, $3, clock_timestamp() + make_interval(secs => $4 / 1000.0))`,
          [id, endpointId, tenantId, untilMs],
        );
      const live = unique('mark-live');
      const others = unique('mark-other');
      // Live until the test ends it, once the DELETE of "__proto__" has said it waits for it: the wait is seen taken,
      // whatever time the other DELETEs take (a mark of 300 ms could have expired before that DELETE came).
      await mark(live, '__proto__', 'demo', 60_000);
      await mark(others, '__proto__', 'demo-other', -60_000);
      try {
        // A real endpoint deleted once: its second DELETE is the same 404.
        const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
          key: DEMO.admin,
          body: { url: 'http://allowed.example/deleted-twice', events: ['operation.settled'] },
        });
        expect(created.status).toBe(201);
        const path = (id: string) => `/v1/admin/webhooks/${id}`;
        expect((await http(stack.apiUrl, 'DELETE', path(created.body.id), { key: DEMO.admin })).status).toBe(204);
        const before = { tables: await counts(), deliveries: await deliveries() };
        const wrong: unknown[] = [];
        const api = stack.apps.find((app) => app.name === 'api')!;
        const waitingFor = (id: string) =>
          api.output
            .join('')
            .split('\n')
            .filter((line) => line.includes('"msg":"webhook endpoint gone: waiting for its sends under way'))
            .filter((line) => line.includes(`"endpointId":${JSON.stringify(id)}`)).length;
        for (const id of [created.body.id, ...HOSTILE_IDS]) {
          const deleting = http<Problem>(stack.apiUrl, 'DELETE', path(id), { key: DEMO.admin });
          if (id === '__proto__') {
            // It waits for the tenant's send marked in flight (it says so), and answers once that send has ended.
            let answered = false;
            void deleting.finally(() => (answered = true));
            await waitFor(
              async () => answered || waitingFor(id) > 0,
              (done) => done,
              20_000,
              20,
            );
            expect({ answered, waiting: waitingFor(id) }).toEqual({ answered: false, waiting: 1 });
            await stack.db.dataSource.query(
              `UPDATE webhook_sends_in_flight SET until = clock_timestamp() - interval '1 second' WHERE id = $1`,
              [live],
            );
          }
          const res = await deleting;
          const type = res.headers.get('content-type');
          if (!isProblem4xx(res.status, type) || res.body.status !== res.status) {
            wrong.push([id.slice(0, 40), res.status, type, res.text.slice(0, 200)]);
          }
        }
        const raw = await rawExchange(
          stack.apiUrl,
          `DELETE ${path('whk\u0000x')} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${DEMO.admin}\r\n` +
            'content-length: 0\r\n\r\n',
        );
        if (!isProblem4xx(raw.status, raw.headers['content-type'])) {
          wrong.push(['raw NUL', raw.status, raw.headers['content-type'], raw.body.slice(0, 200)]);
        }
        expect(wrong).toEqual([]);
        expect({ tables: await counts(), deliveries: await deliveries() }).toEqual(before);
        // The wait was taken for "__proto__": its delete cleared the tenant's mark once it had expired.
        expect(await stack.db.dataSource.query(`SELECT id FROM webhook_sends_in_flight WHERE id = $1`, [live])).toEqual(
          [],
        );
        // The other tenant's mark is still there: a delete reads and clears only its own tenant's.
        expect(
          await stack.db.dataSource.query(`SELECT tenant_id FROM webhook_sends_in_flight WHERE id = $1`, [others]),
        ).toEqual([{ tenant_id: 'demo-other' }]);
      } finally {
        await stack.db.dataSource.query(`DELETE FROM webhook_sends_in_flight WHERE id = ANY($1)`, [[live, others]]);
      }
    });
  });

  it('answers a HEAD of a stream and ends it: held open, it kept one of the key’s streams', async () => {
    const port = await freePort();
    await stack.startApp('api', { PORT: String(port), HOST: '127.0.0.1', MAX_STREAMS_PER_KEY: '1' });
    const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('head'))]),
    });
    expect(created.status).toBe(201);
    const path = `/v1/executions/${created.body.id}/stream`;
    // A HEAD on a kept-alive connection: its answer must end (headers only) without the client closing anything.
    const head = connect(port, '127.0.0.1');
    const answered = new Promise<string>((resolve) => {
      let text = '';
      head.on('data', (chunk: Buffer) => {
        text += chunk.toString('latin1');
        if (text.includes('\r\n\r\n')) resolve(text);
      });
    });
    head.write(`HEAD ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${DEMO.agent}\r\n\r\n`);
    try {
      const text = await answered;
      expect(text).toMatch(/^HTTP\/1\.1 200 /);
      expect(text).toMatch(/content-type: text\/event-stream/i);
      // The key's one stream is free: a GET of the stream opens while the HEAD's connection stays open.
      const controller = new AbortController();
      const res = await fetch(`http://127.0.0.1:${port}${path}`, {
        headers: { authorization: `Bearer ${DEMO.agent}` },
        signal: controller.signal,
      });
      expect(res.status).toBe(200);
      controller.abort();
      await res.body?.cancel().catch(() => undefined);
    } finally {
      head.destroy();
    }
  });
});
