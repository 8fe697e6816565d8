import { LISTEN_APPLICATION_NAME } from '@verity/persistence';
import { DEMO, METRICS_TOKEN, Stack, waitFor } from '../support/stack';
import { charge, http, sms, submission, unique } from '../support/http';
import { terminateSession } from '../support/listen-sessions';
import { TEST_REDIS_URL } from '../support/services';
import IORedis from 'ioredis';
import { appendNotedEvent, openStream } from './api-sse';

/**
 * Hostile probes of the secret values each API process keeps for its answers (TenantSecretsCache): a secret set
 * through one process, and answered, is never shown by an answer of the other to a request sent after — whatever
 * becomes of the other's LISTEN connection meanwhile, and whatever an intake's statement found about the tenant's
 * secrets just before.
 */
describe("the tenant's secret values kept per API process, attacked (revcache24)", () => {
  let stack: Stack;
  let a: string;
  let b: string;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'revcache24', apis: 2, dispatchers: 0, reconcilers: 0 });
    [a, b] = stack.apiUrls;
  }, 60_000);
  afterAll(async () => stack?.stop());

  /** The API process' own count of freshness round trips (a SELECT 1 on its LISTEN connection each). */
  const roundTrips = async (url: string) => {
    const text = await (
      await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })
    ).text();
    const line = text.split('\n').find((l) => l.startsWith('verity_secrets_freshness_round_trips_total '));
    return Number(line?.slice(line.lastIndexOf(' ') + 1) ?? 0);
  };

  const token = (label: string) => `${label}-${unique('v').replace(/[^a-z0-9]/gi, '')}`;

  const setSecret = async (through: string, name: string, value: string) => {
    const set = await http(through, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { secrets: { [name]: value } },
    });
    expect(set.status).toBe(200);
  };
  const deleteSecret = async (name: string) => {
    const deleted = await http(a, 'DELETE', `/v1/admin/connector-settings/http/secrets/${name}`, { key: DEMO.admin });
    expect(deleted.status).toBe(204);
  };

  /** The API processes' LISTEN sessions that listen for changes of secrets (that LISTEN, or a round trip since, done). */
  const listening = async () => {
    const rows = (await stack.db.dataSource.query(
      `SELECT pid FROM pg_stat_activity
        WHERE application_name = $1 AND datname = current_database() AND state = 'idle'
          AND query IN ($2, 'SELECT 1')`,
      [LISTEN_APPLICATION_NAME, 'LISTEN verity_tenant_secrets'],
    )) as { pid: number }[];
    return rows.map((row) => row.pid);
  };

  it("a secret set through B while A's LISTEN connection is lost (its NOTIFY never reaches A) is a placeholder in A's next answer, before and after A listens again: 12 rounds", async () => {
    // The tenant holds a secret throughout: each process keeps values it read (not an intake's "none").
    await setSecret(a, 'base_token', token('base'));
    for (let i = 0; i < 12; i += 1) {
      const value = token(`listen${i}`);
      const name = `listen_${i}`;
      const created = await http<{ id: string }>(a, 'POST', '/v1/executions', {
        key: DEMO.agent,
        body: submission([charge(unique('order'))], { intent: `pay ${value}` }),
      });
      expect(created.status).toBe(201);
      const path = `/v1/executions/${created.body.id}`;
      // Both keep the tenant's values of before (none is this one): A is seen using what it keeps (an answer confirms
      // it with a round trip on its LISTEN connection), not reading them for every answer as it does while it listens
      // on no connection.
      for (const url of [a, b]) expect((await http(url, 'GET', path, { key: DEMO.agent })).text).toContain(value);
      await waitFor(
        async () => {
          const before = await roundTrips(a);
          expect((await http(a, 'GET', path, { key: DEMO.agent })).text).toContain(value);
          return (await roundTrips(a)) > before;
        },
        (confirmed) => confirmed,
      );
      // Both listen (on the sessions a round before may have ended and they opened again).
      const lost = await waitFor(listening, (pids) => pids.length === 2);
      const lose = async () => {
        for (const pid of lost) await terminateSession(stack.db.url, pid);
      };
      // The LISTEN sessions ended before the change commits (its NOTIFY is lost) or just after it was answered (it
      // may be lost or delivered). Then A is asked at once (it may not have seen the loss yet), or once both listen
      // again on new sessions (what A kept from before the loss must not be trusted by the new one's round trip).
      const variant = i % 3;
      if (variant !== 2) await lose();
      await setSecret(b, name, value);
      if (variant === 2) await lose();
      if (variant !== 0) {
        await waitFor(listening, (pids) => pids.length === 2 && pids.every((pid) => !lost.includes(pid)));
      }
      const [fromA, fromB] = await Promise.all([a, b].map((url) => http(url, 'GET', path, { key: DEMO.agent })));
      expect(fromA.status).toBe(200);
      expect(fromA.text).not.toContain(value);
      expect(fromA.text).toContain(`{{secret:${name}}}`);
      expect(fromB.text).not.toContain(value);
      await deleteSecret(name);
    }
    await deleteSecret('base_token');
  }, 120_000);

  it('an intake that found the tenant holds no secret is trusted by no answer to a request sent after a secret set concurrently: 20 rounds', async () => {
    let written = 0;
    for (let i = 0; i < 20; i += 1) {
      const value = token(`race${i}`);
      const name = `race_${i}`;
      // The intake through B (its statement finds whether the tenant holds a secret), the set through A, at once.
      const [created] = await Promise.all([
        http<{ id: string }>(b, 'POST', '/v1/executions', {
          key: DEMO.agent,
          body: submission([charge(unique('order'))], { intent: `pay ${value}` }),
        }),
        setSecret(a, name, value),
      ]);
      // Refused when the set committed first (the intent holds the secret's value); written when it did not.
      expect([201, 400]).toContain(created.status);
      if (created.status === 201) {
        written += 1;
        for (const url of [b, a]) {
          const read = await http(url, 'GET', `/v1/executions/${created.body.id}`, { key: DEMO.agent });
          expect(read.status).toBe(200);
          expect(read.text).not.toContain(value);
          expect(read.text).toContain(`{{secret:${name}}}`);
        }
        const listed = await http(b, 'GET', '/v1/executions?limit=5', { key: DEMO.agent });
        expect(listed.text).not.toContain(value);
      }
      await deleteSecret(name);
    }
    // The race is run, not assumed: some intakes were written (and found no secret) with the set under way.
    expect(written).toBeGreaterThan(0);
  }, 90_000);

  it('an intake whose operation takes secrets (http) records nothing of them: a secret set after it through the other process is a placeholder at once', async () => {
    for (let i = 0; i < 5; i += 1) {
      const value = token(`http${i}`);
      const name = `http_${i}`;
      const created = await http<{ id: string }>(b, 'POST', '/v1/executions', {
        key: DEMO.agent,
        body: submission(
          [
            {
              key: 'call',
              connector: 'http',
              action: 'request',
              params: { method: 'POST', url: `http://hooks.example.com/${value}` },
            },
          ],
          { intent: `call ${value}` },
        ),
      });
      expect(created.status).toBe(201);
      expect(created.text).toContain(value);
      await setSecret(a, name, value);
      const read = await http(b, 'GET', `/v1/executions/${created.body.id}`, { key: DEMO.agent });
      expect(read.text).not.toContain(value);
      expect(read.text).toContain(`http://hooks.example.com/{{secret:${name}}}`);
      // Deleted, it is no secret any more: shown again (the same process, at once).
      await deleteSecret(name);
      expect((await http(b, 'GET', `/v1/executions/${created.body.id}`, { key: DEMO.agent })).text).toContain(value);
    }
  }, 60_000);
  it("a stream's page written after its process listens again on a new LISTEN session shows a secret set while it listened on none as its placeholder", async () => {
    const value = token('stream');
    const created = await http<{ id: string }>(a, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('order'))], { intent: unique('stream') }),
    });
    expect(created.status).toBe(201);
    const executionId = created.body.id;
    const publisher = new IORedis(TEST_REDIS_URL);
    const stream = await openStream(`${a}/v1/executions/${executionId}/stream`, DEMO.agent);
    /** An event noting `value`, committed and announced: the frame A's stream sends for it. */
    const append = () =>
      appendNotedEvent({ stack, publisher, stream, executionId, idPrefix: 'evt_rc24' }, `noted ${value}`);
    try {
      expect(stream.status).toBe(200);
      // A keeps the tenant's values (none is this one) while it listens; its stream's pages use them.
      await waitFor(listening, (pids) => pids.length === 2);
      expect(await append()).toContain(value);
      expect(await append()).toContain(value);
      const lost = await listening();
      for (const pid of lost) await terminateSession(stack.db.url, pid);
      // Set while A listens on no session: its NOTIFY never reaches A.
      await setSecret(b, 'stream_lost', value);
      await waitFor(listening, (pids) => pids.length === 2 && pids.every((pid) => !lost.includes(pid)));
      const after = await append();
      expect(after).not.toContain(value);
      expect(after).toContain('{{secret:stream_lost}}');
    } finally {
      stream.abort();
      publisher.disconnect();
      await http(a, 'DELETE', '/v1/admin/connector-settings/http/secrets/stream_lost', { key: DEMO.admin });
    }
  });
  it('a problem answered by A names what is on file (an unsettled operation of its key) as a placeholder, the secret set through B just before', async () => {
    for (let i = 0; i < 5; i += 1) {
      const value = token(`problem${i}`);
      const name = `problem_${i}`;
      const ref = unique('ref');
      // An operation whose key is the value (written before it was a secret), sent and not settled.
      const created = await http<{ id: string }>(a, 'POST', '/v1/executions', {
        key: DEMO.agent,
        body: submission([sms(ref, { key: value })]),
      });
      expect(created.status).toBe(201);
      await stack.db.dataSource.query(
        `UPDATE operations SET status = 'SENT', attempt = 1, sent_at = now() WHERE execution_id = $1`,
        [created.body.id],
      );
      // A keeps the values of before (none is this one).
      expect((await http(a, 'GET', `/v1/executions/${created.body.id}`, { key: DEMO.agent })).text).toContain(value);
      await setSecret(b, name, value);
      // A new execution naming the same client_ref through A: 409, naming the unsettled operation (its key).
      const refused = await http(a, 'POST', '/v1/executions', { key: DEMO.agent, body: submission([sms(ref)]) });
      expect(refused.status).toBe(409);
      expect(refused.text).toContain('reference-unsettled');
      expect(refused.text).not.toContain(value);
      expect(refused.text).toContain(`{{secret:${name}}}`);
      await deleteSecret(name);
    }
  });
});
