import IORedis from 'ioredis';
import { createApiKey, ensureTenant, keyPrefix } from '@verity/persistence/api-keys';
import { TEST_REDIS_URL } from '../support/services';
import { monitorRedis } from '../support/redis-monitor';
import { DEMO, Stack, freePort } from '../support/stack';
import { runKeysCli } from '../support/keys-cli';
import { charge, http, submission, unique } from '../support/http';
import { openStream } from './api-sse';
import { waitForLockWaiter } from '../support/lock-waits';
import type { Execution, ProblemDetails as Problem } from '@verity/sdk';

/** I9: keys (hashed, CLI-managed, revocable at once), roles, tenant isolation, rate limits, Bull Board. */

describe('auth, keys and tenant isolation (I9)', () => {
  let stack: Stack;
  beforeAll(async () => {
    // No workers: executions stay `created`, so streams stay open and nothing moves under the matrix.
    stack = await Stack.start({ label: 'apiauth', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  const keys = (...args: string[]) => runKeysCli(stack.db.url, ...args);

  const submit = (apiKey: string) =>
    http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: apiKey,
      body: submission([charge(unique('order'))]),
    });

  describe('the keys CLI', () => {
    it('creates a key for a new tenant, prints it once, and the key works for that tenant only', async () => {
      const created = await keys('create', '--tenant', 'acme', '--new-tenant', '--role', 'agent', '--label', 'ci bot');
      expect(created.code).toBe(0);
      const key = /^\s+(vk_agent_\S+)$/m.exec(created.stdout)?.[1];
      expect(key).toBeDefined();
      expect(created.stdout).toMatch(/only time the key is shown/);

      const res = await submit(key!);
      expect(res.status).toBe(201);
      const [row] = (await stack.db.dataSource.query(`SELECT tenant_id FROM executions WHERE id = $1`, [
        res.body.id,
      ])) as { tenant_id: string }[];
      expect(row.tenant_id).toBe('acme');
      expect((await http(stack.apiUrl, 'GET', `/v1/executions/${res.body.id}`, { key: DEMO.agent })).status).toBe(404);

      // Stored hashed: the plain key is nowhere in the table.
      const stored = (await stack.db.dataSource.query(`SELECT * FROM api_keys WHERE tenant_id = 'acme'`)) as Record<
        string,
        unknown
      >[];
      expect(JSON.stringify(stored)).not.toContain(key);

      const listed = await keys('list', '--tenant', 'acme');
      expect(listed.code).toBe(0);
      expect(listed.stdout).toContain('acme');
      expect(listed.stdout).toContain('ci bot');
      expect(listed.stdout).not.toContain(key!);
      expect(listed.stdout).not.toMatch(/[0-9a-f]{64}/);
      const json = await keys('list', '--json');
      expect(JSON.stringify(JSON.parse(json.stdout))).not.toMatch(/[0-9a-f]{64}/);
      expect((JSON.parse(json.stdout) as { tenant: string }[]).some((k) => k.tenant === 'demo')).toBe(true);
    });

    it('refuses a key for a tenant that does not exist unless --new-tenant says it is a new one', async () => {
      const count = async () =>
        (
          (await stack.db.dataSource.query(`SELECT (SELECT count(*)::int FROM api_keys) AS keys,
           (SELECT count(*)::int FROM tenants) AS tenants`)) as { keys: number; tenants: number }[]
        )[0];
      const before = await count();
      // A typo of an existing tenant's name: no tenant made, no key made, the name and the tenants there are told.
      const typo = await keys('create', '--tenant', 'dmeo', '--role', 'admin');
      expect({ code: typo.code, stdout: typo.stdout }).toEqual({ code: 2, stdout: '' });
      expect(typo.stderr).toContain('no tenant "dmeo"');
      expect(typo.stderr).toContain(`${before.tenants} tenants exist`);
      expect(typo.stderr).toContain('--new-tenant');
      expect(await count()).toEqual(before);

      // --new-tenant for a name that is taken: refused too — the key would open another tenant's data.
      const taken = await keys('create', '--tenant', 'demo', '--new-tenant', '--role', 'agent');
      expect({ code: taken.code, stdout: taken.stdout }).toEqual({ code: 2, stdout: '' });
      expect(taken.stderr).toContain('tenant "demo" exists already');
      expect(await count()).toEqual(before);

      const fresh = await keys('create', '--tenant', 'brand-new', '--new-tenant', '--role', 'admin', '--json');
      expect(fresh.code).toBe(0);
      expect(JSON.parse(fresh.stdout)).toMatchObject({ tenant: 'brand-new', role: 'admin' });
      expect(await count()).toEqual({ keys: before.keys + 1, tenants: before.tenants + 1 });
      // Once it exists, more keys for it need no flag.
      expect((await keys('create', '--tenant', 'brand-new', '--role', 'agent')).code).toBe(0);
      // An operator key has no tenant: the flag does not go with it.
      expect((await keys('create', '--role', 'operator', '--new-tenant')).code).toBe(2);
    }, 120_000);

    it('rotates a key: a new key for the same tenant, role and label, and the old one revoked at once', async () => {
      const created = JSON.parse(
        (await keys('create', '--tenant', 'demo', '--role', 'agent', '--label', 'rotating bot', '--json')).stdout,
      ) as { id: string; key: string };
      expect((await submit(created.key)).status).toBe(201);
      const rotated = await keys('rotate', '--key', created.id, '--json');
      expect(rotated.code).toBe(0);
      const answer = JSON.parse(rotated.stdout) as { id: string; key: string; replaces: string; revoked_at: string };
      expect(answer).toMatchObject({ tenant: 'demo', role: 'agent', label: 'rotating bot', replaces: created.id });
      expect(answer.id).not.toBe(created.id);
      expect((await submit(created.key)).status).toBe(401);
      expect((await submit(answer.key)).status).toBe(201);
      const [old] = (await stack.db.dataSource.query(`SELECT revoked_at FROM api_keys WHERE id = $1`, [
        created.id,
      ])) as { revoked_at: Date }[];
      expect(answer.revoked_at).toBe(old.revoked_at.toISOString());
      // A revoked key is not rotated again, and nothing is made.
      const again = await keys('rotate', '--key', created.id);
      expect(again.code).toBe(2);
      expect(again.stderr).toContain(created.id);
      expect((await keys('rotate')).code).toBe(2);
    }, 120_000);

    it('refuses bad arguments with a usage error', async () => {
      expect((await keys('create', '--tenant', 'acme', '--role', 'root')).code).toBe(2);
      expect((await keys('create', '--role', 'agent')).code).toBe(2);
      expect((await keys('launch')).code).toBe(2);
      expect((await keys('revoke', 'key_doesnotexist')).code).toBe(2);
    });

    it('refuses hostile tenant names, with --new-tenant or without, and hostile keys to rotate: exit 2, nothing written, nothing raw printed', async () => {
      const count = async () =>
        (
          (await stack.db.dataSource.query(`SELECT (SELECT count(*)::int FROM api_keys) AS keys,
           (SELECT count(*)::int FROM tenants) AS tenants`)) as { keys: number; tenants: number }[]
        )[0];
      const before = await count();
      const wrong: unknown[] = [];
      const hostile = ['__proto__', 'de mo', '../demo', 'demo\u001b[2J', 'x'.repeat(10_000)];
      for (const tenant of hostile) {
        for (const flags of [[], ['--new-tenant']]) {
          const refused = await keys('create', '--tenant', tenant, ...flags, '--role', 'admin');
          if (refused.code !== 2 || refused.stdout !== '' || !refused.stderr.includes('--tenant is required')) {
            wrong.push([tenant.slice(0, 20), flags, refused.code, refused.stderr.slice(0, 200)]);
          }
        }
      }
      for (const key of ['__proto__', 'key_\u001b[2Jx', 'x'.repeat(10_000)]) {
        const refused = await keys('rotate', '--key', key);
        // eslint-disable-next-line no-control-regex
        if (refused.code !== 2 || refused.stdout !== '' || /[\u0000-\u0009\u000b-\u001f]/.test(refused.stderr)) {
          wrong.push([key.slice(0, 20), refused.code, refused.stderr.slice(0, 200)]);
        }
      }
      expect(wrong).toEqual([]);
      expect(await count()).toEqual(before);
      // Thirteen runs of the CLI, each loading it anew: a few seconds each on a loaded machine (a CI run passed 60 s).
    }, 240_000);

    it('refuses a label that is not one line of plain text, and writes no key', async () => {
      // A row of `list` forged in a label: the operator reading the table sees a key that is not there, or a key
      // "revoked" that stands; escape sequences rewrite what the terminal shows; a bidi override reorders it.
      const forged = 'night shift\nkey_01m0forged00000000000000000  demo    admin     vk_admin_zz…  revoked';
      const count = async () =>
        ((await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM api_keys`)) as { n: number }[])[0].n;
      const before = await count();
      // The whole rule is key-label.spec's; here the CLI refuses a forged row and an invisible character ("o\u034fps"
      // reads as "ops" in the table) without writing a key. (Each run of the CLI loads it anew: a few seconds on a
      // loaded machine.)
      for (const label of [forged, 'o\u034fps']) {
        const refused = await keys('create', '--tenant', 'demo', '--role', 'admin', '--label', label);
        expect({ label, code: refused.code, stdout: refused.stdout }).toEqual({ label, code: 2, stdout: '' });
        expect(refused.stderr).toMatch(/--label/);
      }
      expect(await count()).toBe(before);
      expect((await keys('create', '--tenant', 'demo', '--role', 'agent', '--label', 'x'.repeat(200))).code).toBe(0);
    }, 120_000);

    it('lists a stored label that is not one line of plain text escaped, on its key’s row', async () => {
      await ensureTenant(stack.db.dataSource.manager, 'listed-label');
      const stored = await createApiKey(stack.db.dataSource.manager, {
        tenantId: 'listed-label',
        role: 'agent',
        label: 'night shift\nkey_01m0forged  listed-label  admin  revoked\u001b[2K',
      });
      const listed = await keys('list', '--tenant', 'listed-label');
      expect(listed.code).toBe(0);
      const lines = listed.stdout.trimEnd().split('\n');
      expect(lines).toHaveLength(2);
      expect(lines[1]).toContain(stored.id);
      expect(lines[1]).toMatch(/night shift\\u000akey_01m0forged {2}listed-label {2}admin {2}revoked\\u001b\[2K$/);
    });

    it('lists a stored label’s invisible format characters escaped', async () => {
      await ensureTenant(stack.db.dataSource.manager, 'listed-invisible');
      await createApiKey(stack.db.dataSource.manager, {
        tenantId: 'listed-invisible',
        role: 'agent',
        label: 'o\u200bp\u2060s\ufeff-\u00ad\u{e0041}',
      });
      const listed = await keys('list', '--tenant', 'listed-invisible');
      expect(listed.code).toBe(0);
      const lines = listed.stdout.trimEnd().split('\n');
      expect(lines).toHaveLength(2);
      expect(lines[1].endsWith('o\\u200bp\\u2060s\\ufeff-\\u00ad\\u{e0041}')).toBe(true);
    });

    it('revokes by id: the key answers 401 at once', async () => {
      const created = JSON.parse((await keys('create', '--tenant', 'demo', '--role', 'agent', '--json')).stdout) as {
        id: string;
        key: string;
      };
      expect((await submit(created.key)).status).toBe(201);
      const revoked = await keys('revoke', created.id);
      expect(revoked.code).toBe(0);
      expect(revoked.stdout).toContain(created.id);
      const after = await http<Problem>(stack.apiUrl, 'GET', '/v1/executions', { key: created.key });
      expect(after.status).toBe(401);
      expect(after.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(after.headers.get('www-authenticate')).toMatch(/^Bearer/);
    });

    it('two operators revoking one key at once: one revokes it; the other is told it was revoked meanwhile', async () => {
      const created = JSON.parse((await keys('create', '--tenant', 'demo', '--role', 'agent', '--json')).stdout) as {
        id: string;
      };
      // The other operator's revocation is written and not committed yet when this one's CLI finds the key active.
      const other = stack.db.dataSource.createQueryRunner();
      await other.connect();
      try {
        await other.startTransaction();
        await other.query(`UPDATE api_keys SET revoked_at = now() WHERE id = $1`, [created.id]);
        let answered = false;
        const revoking = keys('revoke', created.id, '--json').finally(() => (answered = true));
        await waitForLockWaiter(stack.db.dataSource, { statementLike: '%api_keys%', unless: () => answered });
        await other.commitTransaction();
        const revoked = await revoking;
        // Not "revoked" (exit 0, revoked_at null): this revocation changed nothing; the other one's time is named.
        expect(revoked.code).toBe(2);
        expect(revoked.stderr).toContain(`${created.id} was revoked meanwhile`);
        const [{ revoked_at: at }] = (await stack.db.dataSource.query(`SELECT revoked_at FROM api_keys WHERE id = $1`, [
          created.id,
        ])) as { revoked_at: Date }[];
        expect(revoked.stderr).toContain(at.toISOString());
      } finally {
        if (other.isTransactionActive) await other.rollbackTransaction();
        await other.release();
      }
      // The one revocation that happened, and its answer carries the time it took effect.
      const again = JSON.parse((await keys('create', '--tenant', 'demo', '--role', 'agent', '--json')).stdout) as {
        id: string;
      };
      const mine = await keys('revoke', again.id, '--json');
      expect(mine.code).toBe(0);
      const [{ revoked_at }] = (await stack.db.dataSource.query(`SELECT revoked_at FROM api_keys WHERE id = $1`, [
        again.id,
      ])) as { revoked_at: Date }[];
      expect(JSON.parse(mine.stdout)).toMatchObject({
        id: again.id,
        revoked: true,
        revoked_at: revoked_at.toISOString(),
      });
    });

    it('two operators rotating one key at once: one new key; the other rotation makes none and says why', async () => {
      const created = JSON.parse(
        (await keys('create', '--tenant', 'demo', '--role', 'reviewer', '--label', 'rotated twice', '--json')).stdout,
      ) as { id: string };
      const labelled = async () =>
        (
          (await stack.db.dataSource.query(
            `SELECT count(*)::int AS n FROM api_keys WHERE label = 'rotated twice' AND revoked_at IS NULL`,
          )) as { n: number }[]
        )[0].n;
      // The other operator's rotation has made its key and revoked the old one, not committed yet, when this one's CLI
      // finds the old key active.
      const other = stack.db.dataSource.createQueryRunner();
      await other.connect();
      try {
        await other.startTransaction();
        await createApiKey(other.manager, { tenantId: 'demo', role: 'reviewer', label: 'rotated twice' });
        await other.query(`UPDATE api_keys SET revoked_at = clock_timestamp() WHERE id = $1`, [created.id]);
        let answered = false;
        const rotating = keys('rotate', '--key', created.id, '--json').finally(() => (answered = true));
        await waitForLockWaiter(stack.db.dataSource, { statementLike: '%api_keys%', unless: () => answered });
        await other.commitTransaction();
        const rotated = await rotating;
        expect({ code: rotated.code, stdout: rotated.stdout }).toEqual({ code: 2, stdout: '' });
        expect(rotated.stderr).toContain(`${created.id} was revoked meanwhile`);
        expect(rotated.stderr).toContain('no key was made');
      } finally {
        if (other.isTransactionActive) await other.rollbackTransaction();
        await other.release();
      }
      // The other rotation's key alone: the key this one made was rolled back with its revocation.
      expect(await labelled()).toBe(1);
    });

    it('two operators making one new tenant at once: one makes it; the other is refused, no key made, no stack trace', async () => {
      const tenant = `race-${Date.now().toString(36)}`;
      const keysOf = async () =>
        (
          (await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM api_keys WHERE tenant_id = $1`, [
            tenant,
          ])) as { n: number }[]
        )[0].n;
      const other = stack.db.dataSource.createQueryRunner();
      await other.connect();
      try {
        await other.startTransaction();
        await other.query(`INSERT INTO tenants (id, name) VALUES ($1, $1)`, [tenant]);
        let answered = false;
        const making = keys('create', '--tenant', tenant, '--new-tenant', '--role', 'admin').finally(
          () => (answered = true),
        );
        await waitForLockWaiter(stack.db.dataSource, { statementLike: '%tenants%', unless: () => answered });
        await other.commitTransaction();
        const made = await making;
        expect({ code: made.code, stdout: made.stdout }).toEqual({ code: 2, stdout: '' });
        expect(made.stderr.trim()).toBe(
          `tenant "${tenant}" exists already: leave out --new-tenant to add a key to it (no key was made)`,
        );
      } finally {
        if (other.isTransactionActive) await other.rollbackTransaction();
        await other.release();
      }
      expect(await keysOf()).toBe(0);
    });

    it('revokes by a prefix only when it names exactly one key', async () => {
      // The stored prefix is the role part and 8 characters after it.
      const shared = 'vk_agent_pfxshare';
      const a = await createApiKey(stack.db.dataSource.manager, {
        tenantId: 'demo',
        role: 'agent',
        key: `${shared}-first-${unique('k')}`,
      });
      const b = await createApiKey(stack.db.dataSource.manager, {
        tenantId: 'demo',
        role: 'agent',
        key: `${shared}-second-${unique('k')}`,
      });
      const prefix = keyPrefix(a.key);
      expect(prefix).toBe(shared);
      expect(keyPrefix(b.key)).toBe(prefix);
      const ambiguous = await keys('revoke', prefix);
      expect(ambiguous.code).toBe(2);
      expect(ambiguous.stderr).toContain(a.id);
      expect((await submit(a.key)).status).toBe(201);
      expect((await submit(b.key)).status).toBe(201);

      expect((await keys('revoke', a.id)).code).toBe(0);
      const byPrefix = await keys('revoke', prefix);
      expect(byPrefix.code).toBe(0);
      expect(byPrefix.stdout).toContain(b.id);
      expect((await submit(b.key)).status).toBe(401);
    });

    it('ends an open stream of a key when the key is revoked', async () => {
      const created = JSON.parse((await keys('create', '--tenant', 'demo', '--role', 'agent', '--json')).stdout) as {
        id: string;
        key: string;
      };
      const execution = await submit(created.key);
      expect(execution.status).toBe(201);
      const stream = await openStream(`${stack.apiUrl}/v1/executions/${execution.body.id}/stream`, created.key);
      expect(stream.status).toBe(200);
      await stream.waitFor((frames) => frames.some((f) => f.event === 'execution.created'));
      expect(stream.isClosed()).toBe(false);

      expect((await keys('revoke', created.id)).code).toBe(0);
      const frames = await stream.waitFor((f) => f.some((x) => x.event === 'end'), 20_000);
      expect(JSON.parse(frames[frames.length - 1].data)).toEqual({ reason: 'key_revoked' });
      await stream.closed;
      expect(stream.isClosed()).toBe(true);
      const reopen = await http(stack.apiUrl, 'GET', `/v1/executions/${execution.body.id}/stream`, {
        key: created.key,
      });
      expect(reopen.status).toBe(401);
    });
  });

  describe('roles', () => {
    it('lets an agent submit and read, and keeps reviewer actions for reviewers', async () => {
      const execution = await submit(DEMO.agent);
      const opId = execution.body.operations[0].id;
      expect((await submit(DEMO.reviewer)).status).toBe(403);
      const agentApproves = await http<Problem>(stack.apiUrl, 'POST', `/v1/operations/${opId}/approval`, {
        key: DEMO.agent,
        body: { decision: 'approve' },
      });
      expect(agentApproves.status).toBe(403);
      expect(agentApproves.body.type).toBe('https://verity.dev/problems/forbidden');
      expect(
        (await http(stack.apiUrl, 'GET', `/v1/executions/${execution.body.id}`, { key: DEMO.reviewer })).status,
      ).toBe(200);
      expect((await http(stack.apiUrl, 'GET', '/v1/connectors')).status).toBe(401);
      expect((await http(stack.apiUrl, 'GET', '/v1/status-model')).status).toBe(200);
    });

    it('keeps a person’s decisions (approve or deny, resolve) to reviewers: an admin may submit, but not approve its own', async () => {
      const execution = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
        key: DEMO.admin,
        body: submission([charge(unique('order'), { requires_approval: true })]),
      });
      expect(execution.status).toBe(201);
      const opId = execution.body.operations[0].id;
      for (const [path, body] of [
        ['approval', { decision: 'approve', reason: 'my own' }],
        ['resolve', { status: 'CANCELLED', evidence: 'my own' }],
      ] as const) {
        const refused = await http<Problem>(stack.apiUrl, 'POST', `/v1/operations/${opId}/${path}`, {
          key: DEMO.admin,
          body,
        });
        expect({ path, status: refused.status, type: refused.body.type }).toEqual({
          path,
          status: 403,
          type: 'https://verity.dev/problems/forbidden',
        });
      }
      const op = await http<{ approval: { state: string } | null; status: string }>(
        stack.apiUrl,
        'GET',
        `/v1/operations/${opId}`,
        { key: DEMO.admin },
      );
      expect(op.body.status).toBe('PREPARED');
      expect(op.body.approval?.state).not.toBe('granted');
      // Everything else of its tenant stays the admin's: reading the review queue, for one.
      expect((await http(stack.apiUrl, 'GET', '/v1/review/approvals', { key: DEMO.admin })).status).toBe(200);
    });
  });

  describe('a key in the URL', () => {
    // URLs end up in proxy logs, browser history and Referer headers: a key is taken from the Authorization header
    // only, and one put in the query string is no credential at all (not a fallback, not a second chance).
    it.each(['api_key', 'apiKey', 'key', 'token', 'access_token', 'authorization'])(
      '?%s=<a valid key> is not a credential: 401, and a submission so sent writes nothing',
      async (name) => {
        const query = `?${name}=${encodeURIComponent(DEMO.agent)}`;
        const read = await http<Problem>(stack.apiUrl, 'GET', `/v1/executions${query}`);
        expect({ status: read.status, type: read.body.type }).toEqual({
          status: 401,
          type: 'https://verity.dev/problems/unauthorized',
        });
        const countExecutions = async () =>
          ((await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM executions`)) as { n: number }[])[0].n;
        const before = await countExecutions();
        const sent = await http<Problem>(stack.apiUrl, 'POST', `/v1/executions${query}`, {
          body: submission([charge(unique('order'))]),
        });
        expect({ status: sent.status, type: sent.body.type }).toEqual({
          status: 401,
          type: 'https://verity.dev/problems/unauthorized',
        });
        expect(await countExecutions()).toBe(before);
      },
    );
  });

  describe('tenant isolation matrix', () => {
    it("answers 404 to tenant B on every endpoint for tenant A's execution and operation, and changes nothing", async () => {
      const otherReviewer = await createApiKey(stack.db.dataSource.manager, {
        tenantId: 'demo-other',
        role: 'reviewer',
      });
      const otherAdmin = await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo-other', role: 'admin' });
      const created = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
        key: DEMO.agent,
        body: submission([charge(unique('order'), { requires_approval: true })]),
      });
      expect(created.status).toBe(201);
      const exe = created.body.id;
      const op = created.body.operations[0].id;
      const eventsBefore = (
        await http<{ data: unknown[] }>(stack.apiUrl, 'GET', `/v1/executions/${exe}/events`, {
          key: DEMO.agent,
        })
      ).body.data;

      const matrix: { method: string; path: string; key: string; body?: unknown }[] = [];
      for (const key of [DEMO.otherAgent, otherReviewer.key, otherAdmin.key]) {
        matrix.push(
          { method: 'GET', path: `/v1/executions/${exe}`, key },
          { method: 'GET', path: `/v1/executions/${exe}/events`, key },
          { method: 'GET', path: `/v1/executions/${exe}/events?after=1`, key },
          { method: 'GET', path: `/v1/executions/${exe}/stream`, key },
          { method: 'GET', path: `/v1/operations/${op}`, key },
        );
      }
      for (const key of [DEMO.otherAgent, otherAdmin.key]) {
        matrix.push(
          { method: 'POST', path: `/v1/executions/${exe}/cancel`, key },
          { method: 'POST', path: `/v1/executions/${exe}/cancel`, key, body: { reason: 'not yours' } },
          { method: 'POST', path: `/v1/operations/${op}/retry`, key },
        );
      }
      matrix.push({ method: 'POST', path: `/v1/executions/${exe}/cancel`, key: otherAdmin.key });
      // A re-check is a reviewer's, and an admin's (it decides nothing): either is told the operation does not exist.
      for (const key of [otherReviewer.key, otherAdmin.key]) {
        matrix.push({ method: 'POST', path: `/v1/operations/${op}/recheck`, key });
      }
      // A person's decision is the reviewer's alone (an admin is refused by role before any id is looked at).
      for (const key of [otherReviewer.key]) {
        matrix.push(
          { method: 'POST', path: `/v1/executions/${exe}/cancel`, key },
          { method: 'POST', path: `/v1/operations/${op}/approval`, key, body: { decision: 'approve' } },
          { method: 'POST', path: `/v1/operations/${op}/approval`, key, body: { decision: 'deny', reason: 'x' } },
          { method: 'POST', path: `/v1/operations/${op}/resolve`, key, body: { status: 'FAILED', evidence: 'x' } },
        );
      }

      const wrong: string[] = [];
      for (const m of matrix) {
        const res = await http<Problem>(stack.apiUrl, m.method, m.path, { key: m.key, body: m.body });
        if (res.status !== 404 || !res.headers.get('content-type')?.startsWith('application/problem+json')) {
          wrong.push(`${m.method} ${m.path} → ${res.status} ${res.text.slice(0, 200)}`);
        }
        // Indistinguishable from an id that does not exist: nothing tells B that A's id is real.
        const ghost = await http<Problem>(
          stack.apiUrl,
          m.method,
          m.path.replace(exe, 'exe_01m0000000ghost000000000000').replace(op, 'op_01m0000000ghost000000000000'),
          { key: m.key, body: m.body },
        );
        if (ghost.status !== 404 || ghost.body.title !== res.body.title || ghost.body.type !== res.body.type) {
          wrong.push(`${m.method} ${m.path}: differs from a missing id (${ghost.status} ${ghost.body.title})`);
        }
      }
      expect(wrong).toEqual([]);

      // B's own execution resumed after A's event (Last-Event-ID or ?after=): refused as an event never written is.
      const own = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
        key: DEMO.otherAgent,
        body: submission([charge(unique('order'))]),
      });
      expect(own.status).toBe(201);
      const evt = (eventsBefore as { id: string }[])[0].id;
      const ghostEvt = 'evt_01m0000000ghost000000000000';
      const resumes = [
        (after: string) => ({ path: `/v1/executions/${own.body.id}/events?after=${after}`, headers: {} }),
        (after: string) => ({ path: `/v1/executions/${own.body.id}/stream?after=${after}`, headers: {} }),
        (after: string) => ({ path: `/v1/executions/${own.body.id}/stream`, headers: { 'last-event-id': after } }),
      ];
      for (const resume of resumes) {
        const [theirs, never] = await Promise.all(
          [evt, ghostEvt].map((after) =>
            http<Problem & { errors: unknown[] }>(stack.apiUrl, 'GET', resume(after).path, {
              key: DEMO.otherAgent,
              headers: resume(after).headers,
            }),
          ),
        );
        expect(theirs.status).toBe(400);
        expect(theirs.text.replaceAll(evt, ghostEvt).replace(/"instance":"[^"]*"/, '')).toBe(
          never.text.replace(/"instance":"[^"]*"/, ''),
        );
      }

      const list = await http<{ data: { id: string }[] }>(stack.apiUrl, 'GET', '/v1/executions?limit=200', {
        key: DEMO.otherAgent,
      });
      expect(list.status).toBe(200);
      expect(list.body.data.map((e) => e.id)).not.toContain(exe);
      const filtered = await http<{ data: { id: string }[] }>(stack.apiUrl, 'GET', `/v1/executions?cursor=exe_zzzz`, {
        key: otherAdmin.key,
      });
      expect(filtered.body.data.map((e) => e.id)).not.toContain(exe);

      // Nothing B tried changed A's execution.
      const after = await http<Execution>(stack.apiUrl, 'GET', `/v1/executions/${exe}`, { key: DEMO.agent });
      expect(after.body.status).toBe('created');
      expect(after.body.operations[0].status).toBe('PREPARED');
      const eventsAfter = (
        await http<{ data: unknown[] }>(stack.apiUrl, 'GET', `/v1/executions/${exe}/events`, {
          key: DEMO.agent,
        })
      ).body.data;
      expect(eventsAfter).toEqual(eventsBefore);
      const [op1] = (await stack.db.dataSource.query(`SELECT approval FROM operations WHERE id = $1`, [op])) as {
        approval: unknown;
      }[];
      expect(op1.approval).toBeNull();
      expect(
        (await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM operations WHERE retry_of = $1`, [op]))[0].n,
      ).toBe(0);
    });
  });

  describe('rate limit', () => {
    it('answers 429 with Retry-After once a key has used its budget, per key', async () => {
      const port = await freePort();
      await stack.startApp('api', { PORT: String(port), HOST: '127.0.0.1', RATE_LIMIT_PER_MINUTE: '3' });
      const url = `http://127.0.0.1:${port}`;
      const statuses: number[] = [];
      let limited: Awaited<ReturnType<typeof http<Problem>>> | undefined;
      for (let i = 0; i < 4; i += 1) {
        const res = await http<Problem>(url, 'GET', '/v1/executions?limit=1', { key: DEMO.agent });
        statuses.push(res.status);
        if (res.status === 429) limited = res;
      }
      expect(statuses).toEqual([200, 200, 200, 429]);
      expect(limited!.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(limited!.body.type).toBe('https://verity.dev/problems/rate-limited');
      expect(Number(limited!.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      // Another key has its own budget.
      expect((await http(url, 'GET', '/v1/executions?limit=1', { key: DEMO.reviewer })).status).toBe(200);
      // A submission is refused too, and nothing is written.
      const before = (await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM executions`))[0].n;
      const refused = await http(url, 'POST', '/v1/executions', { key: DEMO.agent, body: submission([charge('rl')]) });
      expect(refused.status).toBe(429);
      expect((await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM executions`))[0].n).toBe(before);
    });
  });

  describe('the limits of a known key', () => {
    it('cost one Redis round trip per request: the address check and the token in one script', async () => {
      // Warm: the key is looked up and cached by this API process, then the script is loaded (EVALSHA, EVAL once).
      for (let i = 0; i < 2; i += 1) {
        expect((await http(stack.apiUrl, 'GET', '/v1/executions?limit=1', { key: DEMO.agent })).status).toBe(200);
      }
      // MONITOR read from a plain socket: ioredis' monitor mode loses track of its replies when other suites keep the
      // shared Redis busy ("Command queue state error"), which failed this test for reasons of its own.
      const monitor = await monitorRedis(TEST_REDIS_URL);
      const seen: string[][] = [];
      const marker = `admission-marker-${Date.now()}`;
      const sawMarker = new Promise<void>((resolve) =>
        monitor.onCommand(({ source, args }) => {
          // What a script runs is shown too, marked as its own: only the commands the API sent are round trips.
          if (source === 'lua') return;
          if (args.some((a) => a.startsWith(stack.prefix))) seen.push(args);
          if (args.includes(marker)) resolve();
        }),
      );
      try {
        for (let i = 0; i < 2; i += 1) {
          expect((await http(stack.apiUrl, 'GET', '/v1/executions?limit=1', { key: DEMO.agent })).status).toBe(200);
        }
        const probe = new IORedis(TEST_REDIS_URL);
        await probe.echo(marker);
        probe.disconnect();
        await sawMarker;
      } finally {
        monitor.close();
      }
      const limits = seen.filter((args) => args.some((a) => a.includes(':authfail') || a.includes(':ratelimit:')));
      expect(limits).toHaveLength(2);
      for (const args of limits) {
        expect(args[0].toLowerCase()).toBe('evalsha');
        expect(args.some((a) => a.includes(':authfail'))).toBe(true);
        expect(args.some((a) => a.includes(':ratelimit:'))).toBe(true);
      }
    });
  });

  describe('rate limit across API processes', () => {
    it('shares one budget per key between processes (Redis), so two processes do not serve twice the rate', async () => {
      const urls: string[] = [];
      for (let i = 0; i < 2; i += 1) {
        const port = await freePort();
        await stack.startApp('api', { PORT: String(port), HOST: '127.0.0.1', RATE_LIMIT_PER_MINUTE: '4' });
        urls.push(`http://127.0.0.1:${port}`);
      }
      // Three at each process at once: each process alone would allow all its three; together the key has 4 tokens,
      // plus one refilled every 15 s (4 a minute) while they ran — counted, so a slow machine cannot fail it (sent one
      // after another under CI load, a refill let a sixth through).
      const started = Date.now();
      const statuses = await Promise.all(
        Array.from({ length: 6 }, (_, i) =>
          http(urls[i % 2], 'GET', '/v1/executions?limit=1', { key: DEMO.admin }).then((res) => res.status),
        ),
      );
      const refilled = Math.floor((Date.now() - started) / 15_000);
      const served = statuses.filter((status) => status === 200).length;
      expect(served).toBeGreaterThanOrEqual(4);
      expect(served).toBeLessThanOrEqual(4 + refilled);
      expect(statuses.filter((status) => status !== 200).every((status) => status === 429)).toBe(true);
    });
  });

  describe('Bull Board', () => {
    it('answers 401 without a key, 403 for every tenant key (admins included), and is read-only for the operator', async () => {
      const none = await http<Problem>(stack.apiUrl, 'GET', '/admin/queues');
      expect(none.status).toBe(401);
      expect(none.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(none.headers.get('www-authenticate')).toMatch(/^Basic/);
      expect((await http(stack.apiUrl, 'GET', '/admin/queues/api/queues', { key: 'nope' })).status).toBe(401);
      expect((await http(stack.apiUrl, 'GET', '/admin/queues', { key: DEMO.agent })).status).toBe(403);
      expect((await http(stack.apiUrl, 'GET', '/admin/queues/api/queues', { key: DEMO.reviewer })).status).toBe(403);
      // Bull Board lists every tenant's jobs: a tenant's admin is no operator (issue: another tenant's admin paused
      // the dispatch queue).
      const otherAdmin = await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo-other', role: 'admin' });
      for (const key of [DEMO.admin, otherAdmin.key]) {
        const refused = await http<Problem>(stack.apiUrl, 'GET', '/admin/queues/api/queues', { key });
        expect(refused.status).toBe(403);
        expect(refused.headers.get('content-type')).toMatch(/^application\/problem\+json/);
        const pauseByAdmin = await http(stack.apiUrl, 'PUT', '/admin/queues/api/queues/dispatch/pause', { key });
        expect(pauseByAdmin.status).toBe(403);
      }

      const page = await http(stack.apiUrl, 'GET', '/admin/queues', { key: DEMO.operator });
      expect(page.status).toBe(200);
      expect(page.headers.get('content-type')).toMatch(/text\/html/);
      const basic = Buffer.from(`operator:${DEMO.operator}`).toString('base64');
      const viaBasic = await http(stack.apiUrl, 'GET', '/admin/queues/api/queues', {
        headers: { authorization: `Basic ${basic}` },
      });
      expect(viaBasic.status).toBe(200);
      // NODE_ENV does not matter: read-only unless BULL_BOARD_WRITABLE=true.
      const pause = await http(stack.apiUrl, 'PUT', '/admin/queues/api/queues/dispatch/pause', { key: DEMO.operator });
      expect(pause.status).toBe(405);
    });
  });
});
