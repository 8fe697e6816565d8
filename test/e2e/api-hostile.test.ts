import { IncomingHttpHeaders, request as rawRequest } from 'node:http';
import { gzipSync } from 'node:zlib';
import { DEMO, METRICS_TOKEN, Stack, freePort } from '../support/stack';
import { runKeysCli } from '../support/keys-cli';
import { charge, http, rawExchange as rawExchangeWith, reach, submission, unique } from '../support/http';
import type { ProblemDetails as Problem } from '@verity/sdk';
import { expectDescribed } from '../support/openapi-validator';

/**
 * Hostile callers and safe defaults: the platform operator (no tenant) is the only one who sees Bull Board and
 * /metrics, and reads no tenant's data; the pages a browser opens cannot be framed; a slow body gets a problem 408;
 * an address that keeps guessing keys gets 429. Every refusal is problem+json and writes nothing.
 */

describe('operator role, safe defaults and hostile clients', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'apihostile', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  const count = async (table: string) =>
    ((await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM ${table}`)) as { n: number }[])[0].n;

  const keysCli = (...args: string[]) => runKeysCli(stack.db.url, ...args);

  async function startApi(env: Record<string, string>): Promise<string> {
    const port = await freePort();
    await stack.startApp('api', { PORT: String(port), HOST: '127.0.0.1', ...env });
    return `http://127.0.0.1:${port}`;
  }

  describe('the operator', () => {
    let operatorKey: string;

    it('is created by the keys CLI with no tenant, and a tenant cannot be given to it', async () => {
      const withTenant = await keysCli('create', '--role', 'operator', '--tenant', 'demo');
      expect(withTenant.code).toBe(2);
      expect(withTenant.stderr).toMatch(/no tenant/);

      const created = await keysCli('create', '--role', 'operator', '--label', 'on-call', '--json');
      expect(created.code).toBe(0);
      const json = JSON.parse(created.stdout) as { key: string; tenant: string | null; role: string };
      expect(json).toMatchObject({ tenant: null, role: 'operator' });
      operatorKey = json.key;
      const [row] = (await stack.db.dataSource.query(
        `SELECT tenant_id, role FROM api_keys WHERE label = 'on-call'`,
      )) as {
        tenant_id: string | null;
        role: string;
      }[];
      expect(row).toEqual({ tenant_id: null, role: 'operator' });
      // The database itself refuses a tenant key with the operator role, or an operator with a tenant.
      await expect(
        stack.db.dataSource.query(
          `INSERT INTO api_keys (id, tenant_id, role, key_hash, key_prefix) VALUES ('key_x', 'demo', 'operator', 'h', 'p')`,
        ),
      ).rejects.toThrow(/api_keys_operator_no_tenant/);
      expect((await keysCli('list')).stdout).toMatch(/\(platform\)\s+operator/);
    });

    it('opens Bull Board, and reaches no tenant’s /v1 data (403 problem, nothing written)', async () => {
      expect((await http(stack.apiUrl, 'GET', '/admin/queues/api/queues', { key: operatorKey })).status).toBe(200);
      const own = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
        key: DEMO.agent,
        body: submission([charge(unique('op-visible'))]),
      });
      expect(own.status).toBe(201);
      const executions = await count('executions');
      for (const [method, path, body] of [
        ['GET', '/v1/executions'],
        ['GET', `/v1/executions/${own.body.id}`],
        ['GET', `/v1/executions/${own.body.id}/events`],
        ['POST', `/v1/executions/${own.body.id}/cancel`, {}],
        ['POST', '/v1/executions', submission([charge(unique('op-submit'))])],
        ['GET', '/v1/admin/connector-settings'],
        ['GET', '/v1/review/approvals'],
        ['GET', '/v1/connectors'],
      ] as [string, string, unknown?][]) {
        const res = await http<Problem>(stack.apiUrl, method, path, { key: operatorKey, body });
        expect([path, res.status, res.headers.get('content-type')?.split(';')[0]]).toEqual([
          path,
          403,
          'application/problem+json',
        ]);
        expect(res.body.type).toBe('https://verity.dev/problems/operator-not-tenant');
      }
      expect(await count('executions')).toBe(executions);
      const still = await http<{ status: string }>(stack.apiUrl, 'GET', `/v1/executions/${own.body.id}`, {
        key: DEMO.agent,
      });
      expect(still.body.status).not.toBe('cancelled');
    });
  });

  describe('Bull Board, writable', () => {
    it('takes no write a page of another site sends with the browser’s Basic credentials (CSRF): 403, no job', async () => {
      const url = await startApi({ BULL_BOARD_WRITABLE: 'true' });
      // A browser that opened Bull Board sends its Basic credentials with every request to it, a form's POST from
      // another site's page included (text/plain and form bodies need no preflight).
      const basic = { authorization: `Basic ${Buffer.from(`operator:${DEMO.operator}`).toString('base64')}` };
      const queue = async () =>
        (
          await http<{ queues: { name: string; counts: Record<string, number>; isPaused: boolean }[] }>(
            url,
            'GET',
            '/admin/queues/api/queues',
            { headers: basic },
          )
        ).body.queues.find((q) => q.name === 'sweep')!;
      const before = await queue();
      for (const from of [
        { 'sec-fetch-site': 'cross-site', origin: 'https://evil.example' } as Record<string, string>,
        { 'sec-fetch-site': 'same-site', origin: 'https://evil.verity.example' },
        { origin: 'https://evil.example' },
      ]) {
        for (const type of ['text/plain', 'application/x-www-form-urlencoded']) {
          const refused = await http<Problem>(url, 'POST', '/admin/queues/api/queues/sweep/add', {
            headers: { ...basic, ...from, 'content-type': type },
            rawBody: type === 'text/plain' ? '{"name":"x","data":{}}' : 'name=x',
          });
          expect({ from, type, status: refused.status }).toEqual({ from, type, status: 403 });
          expect(refused.headers.get('content-type')).toMatch(/^application\/problem\+json/);
        }
      }
      expect((await queue()).counts).toEqual(before.counts);
      // Its own page's requests (same origin), and a client that is no browser, still write.
      const own = new URL(url);
      for (const headers of [{ 'sec-fetch-site': 'same-origin', origin: own.origin }, {}] as Record<string, string>[]) {
        const paused = await http(url, 'PUT', '/admin/queues/api/queues/sweep/pause', {
          headers: { ...basic, ...headers },
        });
        expect(paused.status).toBe(200);
        expect((await queue()).isPaused).toBe(true);
        const resumed = await http(url, 'PUT', '/admin/queues/api/queues/sweep/resume', {
          headers: { ...basic, ...headers },
        });
        expect(resumed.status).toBe(200);
      }
    });
  });

  describe('/metrics', () => {
    it('answers only to an operator key or METRICS_TOKEN; tenant keys get 403, no key 401', async () => {
      const none = await http<Problem>(stack.apiUrl, 'GET', '/metrics');
      expect(none.status).toBe(401);
      expect(none.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(none.text).not.toMatch(/verity_/);
      for (const key of [DEMO.admin, DEMO.agent]) {
        const refused = await http(stack.apiUrl, 'GET', '/metrics', { key });
        expect(refused.status).toBe(403);
        expect(refused.text).not.toMatch(/verity_executions/);
      }
      expect((await http(stack.apiUrl, 'GET', '/metrics', { key: `${METRICS_TOKEN}x` })).status).toBe(401);
      const byToken = await http<string>(stack.apiUrl, 'GET', '/metrics', { key: METRICS_TOKEN });
      expect(byToken.status).toBe(200);
      expect(byToken.text).toMatch(/^verity_executions_in_flight\{/m);
      expect((await http(stack.apiUrl, 'GET', '/metrics', { key: DEMO.operator })).status).toBe(200);
    });

    it('is open when METRICS_PUBLIC=true, and only then', async () => {
      const url = await startApi({ METRICS_PUBLIC: 'true' });
      const open = await http<string>(url, 'GET', '/metrics');
      expect(open.status).toBe(200);
      expect(open.text).toMatch(/^verity_executions_in_flight\{/m);
    });
  });

  describe('the address the API listens on', () => {
    it('is 127.0.0.1 unless HOST is set: another address of this machine reaches nothing; HOST=0.0.0.0 opens it', async () => {
      // 127.0.0.2 is this machine too (all of 127.0.0.0/8 is loopback), but not the address 127.0.0.1: a socket bound
      // to 127.0.0.1 is not reached there, one bound to every address is.
      const unset = await freePort();
      const saved = process.env.HOST;
      delete process.env.HOST;
      try {
        await stack.startApp('api', { PORT: String(unset) });
      } finally {
        if (saved !== undefined) process.env.HOST = saved;
      }
      expect(await reach('127.0.0.1', unset)).toBe('connected');
      expect(await reach('127.0.0.2', unset)).toBe('ECONNREFUSED');

      const set = await freePort();
      await stack.startApp('api', { PORT: String(set), HOST: '0.0.0.0' });
      expect(await reach('127.0.0.2', set)).toBe('connected');
    });
  });

  describe('pages a browser opens', () => {
    it('an unknown console path: a browser gets the console’s page (404), anything else problem+json', async () => {
      const page = await fetch(`${stack.apiUrl}/console/nothing/here`, { headers: { accept: 'text/html' } });
      expect(page.status).toBe(404);
      expect(page.headers.get('content-type')).toContain('text/html');
      for (const accept of ['*/*', 'application/json']) {
        const res = await fetch(`${stack.apiUrl}/console/nothing/here`, { headers: { accept } });
        expect(res.status).toBe(404);
        expect(res.headers.get('content-type')).toContain('application/problem+json');
        expect(await res.json()).toMatchObject({ status: 404, type: expect.stringMatching(/not-found$/) });
      }
    });

    it('send frame protection and nosniff, and no X-Powered-By (Bull Board, /docs, the console)', async () => {
      const pages = [
        await http(stack.apiUrl, 'GET', '/admin/queues', { key: DEMO.operator }),
        await http(stack.apiUrl, 'GET', '/admin/queues'),
        await http(stack.apiUrl, 'GET', '/docs'),
        await http(stack.apiUrl, 'GET', '/docs/'),
        await http(stack.apiUrl, 'GET', '/docs-json'),
        await http(stack.apiUrl, 'GET', '/console'),
      ];
      for (const page of pages) {
        expect(page.status).toBeLessThan(500);
        expect(page.headers.get('x-frame-options')).toBe('DENY');
        expect(page.headers.get('content-security-policy')).toMatch(/frame-ancestors 'none'/);
        expect(page.headers.get('x-content-type-options')).toBe('nosniff');
        expect(page.headers.get('x-powered-by')).toBeNull();
      }
      const asset = /src="([^"]+\.js)"/.exec(pages[0].text)?.[1];
      if (asset) {
        const script = await http(stack.apiUrl, 'GET', asset.startsWith('/') ? asset : `/admin/queues/${asset}`, {
          key: DEMO.operator,
        });
        expect(script.headers.get('x-powered-by')).toBeNull();
      }
    });
  });

  describe('an id no row has', () => {
    it('is quoted in the 404 cut to 100 characters, never inside an emoji, however long it was sent', async () => {
      // 99 characters, then an emoji whose first half is the 100th: a cut there would leave half a character.
      const long = `exe_${'x'.repeat(95)}😀${'y'.repeat(3000)}`;
      for (const path of [`/v1/executions/${encodeURIComponent(long)}`, `/v1/operations/${encodeURIComponent(long)}`]) {
        const res = await http<Problem>(stack.apiUrl, 'GET', path, { key: DEMO.agent });
        expect(res.status).toBe(404);
        expect(res.body.detail).toContain(`${'x'.repeat(95)}…`);
        expect(res.body.detail).not.toContain('yy');
        expect(res.body.detail!.length).toBeLessThan(200);
      }
      const short = await http<Problem>(stack.apiUrl, 'GET', '/v1/executions/exe_unknown', { key: DEMO.agent });
      expect(short.body.detail).toBe('no execution exe_unknown is visible to this key');
    });
  });

  describe('a body that arrives too slowly', () => {
    /** Sends one byte of a 1000-byte body to `path`, then nothing, and waits for the answer. */
    const sendOneByte = (url: URL, path: string, headers: Record<string, string> = {}) =>
      new Promise<{
        status: number;
        type: string | undefined;
        body: string;
        headers: IncomingHttpHeaders;
      }>((resolve, reject) => {
        const req = rawRequest(
          {
            host: url.hostname,
            port: url.port,
            method: 'POST',
            path,
            headers: {
              authorization: `Bearer ${DEMO.agent}`,
              'content-type': 'application/json',
              'content-length': '1000',
              ...headers,
            },
          },
          (res) => {
            let body = '';
            res.on('data', (chunk: Buffer) => (body += chunk.toString()));
            res.on('end', () =>
              resolve({
                status: res.statusCode ?? 0,
                type: res.headers['content-type'],
                body,
                headers: res.headers,
              }),
            );
          },
        );
        req.on('error', reject);
        // One byte, then nothing: the server must not wait for the other 999.
        req.write('{');
      });

    it('gets a problem+json 408 once BODY_TIMEOUT_MS has passed, and nothing is written', async () => {
      const url = new URL(await startApi({ BODY_TIMEOUT_MS: '500' }));
      const before = await count('executions');
      const answer = await sendOneByte(url, '/v1/executions');
      expect(answer.status).toBe(408);
      expect(answer.type).toMatch(/^application\/problem\+json/);
      await expectDescribed('POST', `${url.origin}/v1/executions`, answer);
      expect(JSON.parse(answer.body)).toMatchObject({
        status: 408,
        type: 'https://verity.dev/problems/request-timeout',
      });
      expect(await count('executions')).toBe(before);
    });

    it('gets a JSON-RPC error 408 on /mcp, where clients read JSON-RPC, and nothing is written', async () => {
      const url = new URL(await startApi({ BODY_TIMEOUT_MS: '500' }));
      const before = await count('executions');
      const answer = await sendOneByte(url, '/mcp', { accept: 'application/json, text/event-stream' });
      expect(answer.status).toBe(408);
      expect(answer.type).toMatch(/^application\/json/);
      await expectDescribed('POST', `${url.origin}/mcp`, answer);
      expect(JSON.parse(answer.body)).toEqual({
        jsonrpc: '2.0',
        id: null,
        error: { code: -32000, message: 'the request body did not arrive within 0.5 s' },
      });
      expect(await count('executions')).toBe(before);
    });
  });

  describe('requests the HTTP parser refuses before any route sees them', () => {
    const rawExchange = (bytes: Buffer) => rawExchangeWith(stack.apiUrl, bytes);

    const request = (line: string, headers: string[], body = '') =>
      Buffer.concat([
        Buffer.from(`${line}\r\n`, 'latin1'),
        Buffer.from([...headers, `content-length: ${Buffer.byteLength(body)}`, '', ''].join('\r\n'), 'latin1'),
        Buffer.from(body),
      ]);
    const agent = `authorization: Bearer ${DEMO.agent}`;

    it.each([
      ['a raw byte ≥ 0x80 in the path', request('GET /v1/executions/\xff\xfe HTTP/1.1', ['host: x', agent]), 400],
      ['a raw byte ≥ 0x80 in the query', request('GET /v1/executions?status=\xff HTTP/1.1', ['host: x', agent]), 400],
      [
        'a control byte in a header value',
        request('GET /v1/executions HTTP/1.1', ['host: x', agent, 'x-request-id: a\x01b']),
        400,
      ],
      [
        'a submission whose header holds a control byte',
        request(
          'POST /v1/executions HTTP/1.1',
          ['host: x', agent, 'content-type: application/json', 'x-note: \x7f'],
          JSON.stringify(submission([charge(unique('parser'))])),
        ),
        400,
      ],
      [
        'headers over 16 KiB',
        request('GET /v1/executions HTTP/1.1', ['host: x', agent, `x-pad: ${'a'.repeat(20_000)}`]),
        431,
      ],
      // Node answered these itself: a bare 417 with no body, and a connection closed without a word.
      [
        'an Expect other than 100-continue',
        request('GET /v1/executions HTTP/1.1', ['host: x', agent, 'expect: x']),
        417,
      ],
      ['a CONNECT', request('CONNECT 127.0.0.1:80 HTTP/1.1', ['host: 127.0.0.1:80', agent]), 400],
    ])('%s: problem+json with a request id, and nothing written', async (_name, bytes, status) => {
      const before = await count('executions');
      const answer = await rawExchange(bytes);
      expect(answer.status).toBe(status);
      expect(answer.headers['content-type']).toBe('application/problem+json; charset=utf-8');
      expect(answer.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
      expect(JSON.parse(answer.body)).toMatchObject({ status, type: 'https://verity.dev/problems/bad-request' });
      expect(await count('executions')).toBe(before);
    });

    it.each([
      ['Authorization', [agent, 'authorization: Bearer someone-elses-key']],
      ['Content-Type', [agent, 'content-type: application/json', 'content-type: text/plain']],
      ['Idempotency-Key', [agent, 'content-type: application/json', 'idempotency-key: a', 'idempotency-key: b']],
    ])(
      'refuses %s given twice (Node would keep the first without a word), and writes nothing',
      async (name, headers) => {
        const before = await count('executions');
        const answer = await rawExchange(
          request(
            'POST /v1/executions HTTP/1.1',
            ['host: x', 'connection: close', ...headers],
            JSON.stringify(submission([charge(unique('twice'))])),
          ),
        );
        expect(answer.status).toBe(400);
        expect(JSON.parse(answer.body)).toMatchObject({
          type: 'https://verity.dev/problems/bad-request',
          detail: `${name.toLowerCase()} may be given once`,
        });
        expect(answer.headers['x-request-id']).toBeDefined();
        expect(await count('executions')).toBe(before);
      },
    );

    // The body of the request in flight breaks before anything but the server's own checks has read it: the refusal is
    // that request's answer. Until 2026-12-07 its connection was cut without a word, as a pipelined request's is.
    const chunked = (path: string, key: string, chunks: string) =>
      Buffer.concat([
        Buffer.from(
          `POST ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\n` +
            'transfer-encoding: chunked\r\n\r\n',
          'latin1',
        ),
        Buffer.from(chunks, 'latin1'),
      ]);
    const body = () => JSON.stringify(submission([charge(unique('chunks'))]));
    it.each([
      ['a chunk size that is no hexadecimal number', () => `zz\r\n${body()}\r\n0\r\n\r\n`],
      ['a chunk longer than its size', () => `5\r\n${body()}\r\n0\r\n\r\n`],
      [
        'a raw byte ≥ 0x80 in a chunk extension',
        () => `${Buffer.byteLength(body()).toString(16)};a=\xff\r\n${body()}\r\n0\r\n\r\n`,
      ],
    ])(
      'a submission whose chunked body has %s: problem+json 400 with its request id, nothing written',
      async (_name, chunks) => {
        const before = await count('executions');
        const answer = await rawExchangeWith(stack.apiUrl, chunked('/v1/executions', DEMO.agent, chunks()), {
          halfClose: false,
        });
        expect(answer.status).toBe(400);
        expect(answer.headers['content-type']).toBe('application/problem+json; charset=utf-8');
        expect(answer.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
        expect(answer.headers.connection).toBe('close');
        expect(JSON.parse(answer.body)).toMatchObject({ status: 400, type: 'https://verity.dev/problems/bad-request' });
        expect(await count('executions')).toBe(before);
      },
    );

    it('a policy PUT whose chunked body breaks: 400, the policy unchanged', async () => {
      const before = await http(stack.apiUrl, 'GET', '/v1/admin/policy', { key: DEMO.admin });
      const sent = JSON.stringify({ obligation_owner: 'broken-chunks' });
      const answer = await rawExchangeWith(
        stack.apiUrl,
        Buffer.from(
          `PUT /v1/admin/policy HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${DEMO.admin}\r\n` +
            `content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n2\r\n${sent}\r\n0\r\n\r\n`,
          'latin1',
        ),
        { halfClose: false },
      );
      expect(answer.status).toBe(400);
      expect(JSON.parse(answer.body)).toMatchObject({ type: 'https://verity.dev/problems/bad-request' });
      expect((await http(stack.apiUrl, 'GET', '/v1/admin/policy', { key: DEMO.admin })).text).toBe(before.text);
    });

    it('answers nothing while a request on the connection is still handled: the refusal would read as its answer', async () => {
      const before = await count('executions');
      const submit = request(
        'POST /v1/executions HTTP/1.1',
        ['host: x', agent, 'content-type: application/json'],
        JSON.stringify(submission([charge(unique('pipelined'))])),
      );
      const malformed = request('GET /v1/executions/\xff HTTP/1.1', ['host: x', agent]);
      const answer = await rawExchange(Buffer.concat([submit, malformed]));
      // The connection is cut: the caller cannot take a 400 for the submission's answer (it may have been written).
      expect(answer.raw).toBe('');
      expect(await count('executions')).toBeLessThanOrEqual(before + 1);
    });
  });

  describe('a body built to make a check slow', () => {
    // 318 bytes gzipped, 256 KiB inflated: one number with a long run of zeros inside. A pattern that backtracked on it
    // took 47 s of the event loop (red team), before any key was checked, and every caller waited. The limit below is
    // not a speed target: the check is linear and answers in milliseconds; the limit only fails a check that is not.
    it('is refused at once without a key, and holds up no other caller', async () => {
      const body = gzipSync(`{"x":0.1${'0'.repeat(262_000)}1}`, { level: 9 });
      const bomb = fetch(`${stack.apiUrl}/v1/executions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
        body,
      });
      const other = http(stack.apiUrl, 'GET', '/v1/executions', { key: DEMO.agent });
      const refused = await bomb;
      expect(refused.status).toBe(400);
      expect(((await refused.json()) as Problem & { errors: unknown[] }).errors).toEqual([
        expect.objectContaining({ field: 'x', rule: 'exact_number' }),
      ]);
      expect((await other).status).toBe(200);
    }, 20_000);
  });

  describe('an address that keeps guessing keys', () => {
    it('gets 429 problem+json after AUTH_FAILURES_PER_MINUTE failures, the right key included', async () => {
      const url = await startApi({ AUTH_FAILURES_PER_MINUTE: '3' });
      const statuses: number[] = [];
      for (let i = 0; i < 3; i += 1) {
        statuses.push((await http(url, 'GET', '/v1/executions', { key: `guess-${i}` })).status);
      }
      expect(statuses).toEqual([401, 401, 401]);
      const limited = await http<Problem>(url, 'GET', '/v1/executions', { key: 'guess-4' });
      expect(limited.status).toBe(429);
      expect(limited.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(Number(limited.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      // A hit must look like a miss, or the limit would confirm a guessed key.
      expect((await http(url, 'GET', '/v1/executions', { key: DEMO.agent })).status).toBe(429);
      expect((await http(url, 'GET', '/admin/queues/api/queues', { key: DEMO.operator })).status).toBe(429);
      // The other API process, with its own limit, is not affected.
      expect((await http(stack.apiUrl, 'GET', '/v1/executions', { key: DEMO.agent })).status).toBe(200);
    });

    it('counts guesses sent all at once before answering them: at most AUTH_FAILURES_PER_MINUTE are told "wrong key"', async () => {
      // A limit no other test here uses: the count is kept per limit and address, and the others block 127.0.0.1.
      const limit = 6;
      const url = await startApi({ AUTH_FAILURES_PER_MINUTE: String(limit) });
      // One valid key, asked cold by many requests at once (its first requests on a fresh process): none is refused.
      const burst = await Promise.all(
        Array.from({ length: 20 }, () => http(url, 'GET', '/v1/executions', { key: DEMO.reviewer })),
      );
      expect(burst.map((r) => r.status)).toEqual(Array.from({ length: 20 }, () => 200));
      // 60 different guesses in flight together, the right key among them. When each was checked before any was counted,
      // many saw an address with no failures yet: dozens of wrong keys were answered 401, the right one 200.
      const keys = Array.from({ length: 60 }, (_, i) => (i === 40 ? DEMO.agent : `guess-all-at-once-${i}`));
      const statuses = (await Promise.all(keys.map((key) => http(url, 'GET', '/v1/executions', { key })))).map(
        (r) => r.status,
      );
      const answered = (status: number) => statuses.filter((s) => s === status).length;
      expect(answered(401)).toBeLessThanOrEqual(limit);
      // Every other guess, the right key included unless it came before the limit was reached, is 429.
      expect(answered(401) + answered(200)).toBeLessThanOrEqual(limit + 1);
      expect(answered(429)).toBe(60 - answered(401) - answered(200));
      // And from then on the address is blocked: the right key too.
      expect((await http(url, 'GET', '/v1/executions', { key: DEMO.agent })).status).toBe(429);
    });

    it('answers the right METRICS_TOKEN with 429 too once the address is blocked: /metrics confirms no guess', async () => {
      const limit = 8;
      const url = await startApi({ AUTH_FAILURES_PER_MINUTE: String(limit) });
      const scrape = (token: string) => http(url, 'GET', '/metrics', { headers: { authorization: `Bearer ${token}` } });
      expect((await scrape(METRICS_TOKEN)).status).toBe(200);
      // Wrong tokens count as failed authentications, as any wrong key does.
      for (let i = 0; i < limit; i += 1) expect((await scrape(`metrics-guess-${i}`)).status).toBe(401);
      expect((await scrape('metrics-guess-next')).status).toBe(429);
      // A hit must look like a miss, or the limit would confirm a guessed token.
      const hit = await scrape(METRICS_TOKEN);
      expect(hit.status).toBe(429);
      expect(hit.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    });

    // Behind a reverse proxy every client arrives from the proxy's address: without TRUST_PROXY one guesser would lock
    // every tenant out. With it, the client the named proxy reports is counted — and by default nobody's header is.
    const behindProxy = async (trustProxy: string | null, limit: number) => {
      const url = await startApi({
        AUTH_FAILURES_PER_MINUTE: String(limit),
        ...(trustProxy === null ? {} : { TRUST_PROXY: trustProxy }),
      });
      const from = (address: string, key: string) =>
        http(url, 'GET', '/v1/executions', { key, headers: { 'x-forwarded-for': address } });
      for (let i = 0; i < limit; i += 1) expect((await from('203.0.113.7', `guess-${i}`)).status).toBe(401);
      return {
        guesser: (await from('203.0.113.7', DEMO.agent)).status,
        someoneElse: (await from('203.0.113.8', DEMO.agent)).status,
      };
    };

    it('behind a proxy named by TRUST_PROXY, counts the client it reports: one guesser locks out only itself', async () => {
      expect(await behindProxy('loopback', 4)).toEqual({ guesser: 429, someoneElse: 200 });
    });

    it('counts an IPv6 client by its /64: a guesser cannot escape its count by taking the next address of its network', async () => {
      // Every IPv6 client has a network of 2^64 addresses to send from (a /64 is what one home or one server gets).
      const limit = 7;
      const url = await startApi({ AUTH_FAILURES_PER_MINUTE: String(limit), TRUST_PROXY: 'loopback' });
      const from = (address: string, key: string) =>
        http(url, 'GET', '/v1/executions', { key, headers: { 'x-forwarded-for': address } });
      for (let i = 0; i < limit; i += 1)
        expect((await from(`2001:db8:7:7::${i + 1}`, `guess-v6-${i}`)).status).toBe(401);
      expect({
        sameAddress: (await from('2001:db8:7:7::1', DEMO.agent)).status,
        nextAddress: (await from('2001:db8:7:7::ffff', DEMO.agent)).status,
        sameNetworkOtherSpelling: (await from('2001:0db8:0007:0007:abcd:0:0:1', DEMO.agent)).status,
        anotherNetwork: (await from('2001:db8:7:8::1', DEMO.agent)).status,
      }).toEqual({ sameAddress: 429, nextAddress: 429, sameNetworkOtherSpelling: 429, anotherNetwork: 200 });
    });

    it('believes no X-Forwarded-For without TRUST_PROXY: a guesser cannot escape its count by naming another address', async () => {
      expect(await behindProxy(null, 5)).toEqual({ guesser: 429, someoneElse: 429 });
    });
  });
});
