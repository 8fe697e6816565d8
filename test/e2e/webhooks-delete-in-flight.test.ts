import { randomBytes } from 'node:crypto';
import { createApiKey } from '@verity/persistence/api-keys';
import { createConnection, createServer, Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { DEMO, METRICS_TOKEN, type RunningApp, Stack, waitFor } from '../support/stack';
import { http, sms, submission, unique } from '../support/http';
import { waitForLockWaiter } from '../support/lock-waits';
import { startReceiver, subscribedReceiver } from './webhook-receiver';

/**
 * A loopback relay in front of a receiver that holds each connection it accepts, reading nothing, until `release()`:
 * what the worker wrote waits in the relay's socket (a slow network), so the receiver gets the request only then.
 * `held` counts the connections waiting.
 */
async function startHoldingRelay(targetPort: number) {
  const held: Socket[] = [];
  const open = new Set<Socket>();
  let released = false;
  const relay = (socket: Socket) => {
    const onward = createConnection(targetPort, '127.0.0.1');
    open.add(onward);
    socket.pipe(onward).pipe(socket);
    socket.on('error', () => onward.destroy());
    onward.on('error', () => socket.destroy());
    socket.resume();
  };
  const server = createServer((socket) => {
    open.add(socket);
    socket.on('close', () => open.delete(socket));
    if (released) return relay(socket);
    socket.pause();
    held.push(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    held: () => held.length,
    release: () => {
      released = true;
      for (const socket of held.splice(0)) relay(socket);
    },
    close: async () => {
      for (const socket of open) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/**
 * A receiver that reads what it is sent and never answers: the request stays under way until the worker cuts it off
 * at its timeout. `closedAt` is when the worker's side closed (performance.now()), null until then.
 */
async function startSilentSink() {
  let connections = 0;
  let closedAt: number | null = null;
  const open = new Set<Socket>();
  const server = createServer((socket) => {
    connections += 1;
    open.add(socket);
    socket.on('data', () => undefined);
    socket.on('end', () => (closedAt ??= performance.now()));
    socket.on('error', () => undefined);
    socket.on('close', () => open.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    connections: () => connections,
    closedAt: () => closedAt,
    close: async () => {
      for (const socket of open) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/**
 * An admin deletes a webhook endpoint while the delivery worker is between reading a delivery (and opening its
 * signing secret) and sending it. Once the delete has answered `204`, the endpoint's secret is gone: nothing signed
 * with it may reach the receiver afterwards. The worker is held between the two by the one thing it reads in between,
 * the tenant's http allowlist (its table locked here), so the delete's answer comes first for certain.
 */
describe('webhooks: an endpoint deleted while its delivery is under way', () => {
  let stack: Stack;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;

  beforeAll(async () => {
    // The first attempt fails, so the second comes at a moment the test chooses (after its backoff).
    receiver = await startReceiver((_path, attempt) => ({ status: attempt === 1 ? 500 : 204 }));
    stack = await Stack.start({
      label: 'wh-delete-in-flight',
      env: {
        SECRETS_KEY: randomBytes(32).toString('base64'),
        WEBHOOK_SCAN_INTERVAL_MS: '100',
        WEBHOOK_BACKOFF_MS: '1000',
        WEBHOOK_MAX_ATTEMPTS: '2',
      },
    });
  }, 60_000);

  afterAll(async () => {
    await stack?.stop();
    await receiver?.close();
  });

  /** The reconciler's count of delivery attempts that ended with `result`. */
  async function attemptsEnded(result: string): Promise<number> {
    const metrics = await http<string>(stack.running('reconciler')[0].opsUrl!, 'GET', '/metrics', {
      key: METRICS_TOKEN,
    });
    const line = new RegExp(`^verity_webhook_deliveries_total\\{result="${result}"\\} (\\d+)$`, 'm').exec(metrics.text);
    return line ? Number(line[1]) : 0;
  }

  /**
   * Holds a delivery's second attempt between reading the delivery (and its secret) and sending it, while `act` runs,
   * then lets it go on: the table of the tenant's http allowlist, the one thing the attempt reads in between, is locked
   * until `act` has returned. Answers how many attempts ended with each of `results` from the hold on, once one has.
   */
  async function whileTheAttemptWaits<R extends string>(
    results: readonly R[],
    act: () => Promise<void>,
  ): Promise<Record<R, number>> {
    const counts = async () => {
      const count = {} as Record<R, number>;
      for (const result of results) count[result] = await attemptsEnded(result);
      return count;
    };
    const before = await counts();
    const holder = stack.db.dataSource.createQueryRunner();
    await holder.connect();
    try {
      await holder.startTransaction();
      await holder.query(`LOCK TABLE tenant_connector_settings IN ACCESS EXCLUSIVE MODE`);
      // The second attempt has read the delivery and its secret, and waits to read the allowlist (the only reader of
      // connector settings left: the execution has finished).
      await waitForLockWaiter(stack.db.dataSource, { statementLike: '%LEFT JOIN tenant_connector_settings s %' });
      await act();
      await holder.commitTransaction();
    } finally {
      if (holder.isTransactionActive) await holder.rollbackTransaction();
      await holder.release();
    }
    return waitFor(
      async () => {
        const now = await counts();
        return Object.fromEntries(results.map((r) => [r, now[r] - before[r]])) as Record<R, number>;
      },
      (n) => results.some((r) => n[r] > 0),
    );
  }

  it('sends nothing after the delete has answered: the worker finds the endpoint gone before it signs', async () => {
    const endpoint = await subscribedReceiver(stack, receiver.port, `${receiver.base}/hook`, ['execution.finished']);
    const run = await http(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([sms(unique('wh-delete-in-flight'))]),
    });
    expect(run.status).toBe(201);
    await waitFor(
      async () => receiver.seen.length,
      (n) => n === 1,
    );

    // The attempt ends: skipped (the endpoint is gone), or — sent — recorded as stale (its row went with the delete).
    const ended = await whileTheAttemptWaits(['skipped', 'stale'], async () => {
      const deleted = await http(stack.apiUrl, 'DELETE', `/v1/admin/webhooks/${endpoint.id}`, { key: DEMO.admin });
      expect(deleted.status).toBe(204);
    });
    expect(receiver.seen).toHaveLength(1);
    expect(ended).toEqual({ skipped: 1, stale: 0 });
  });
  it('sends nothing once the endpoint was disabled meanwhile, also when it was enabled again before the attempt went on', async () => {
    // A disable skips the endpoint's pending deliveries in its own transaction, so an enable never sends them: an
    // attempt that read its delivery pending before the disable finds it skipped when it reads it again before signing.
    const endpoint = await subscribedReceiver(stack, receiver.port, `${receiver.base}/hook-disabled`, [
      'execution.finished',
    ]);
    const seenHere = () => receiver.seen.filter((r) => r.path === '/hook-disabled').length;
    const run = await http(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([sms(unique('wh-disable-in-flight'))]),
    });
    expect(run.status).toBe(201);
    await waitFor(
      async () => seenHere(),
      (n) => n === 1,
    );

    const ended = await whileTheAttemptWaits(['skipped', 'stale', 'delivered'], async () => {
      // The endpoint is disabled as its failures disable it (countFailure, then skipEndpointPending, one transaction)...
      await stack.db.dataSource.transaction(async (tx) => {
        await tx.query(
          `UPDATE webhook_endpoints SET disabled_at = now(), disabled_reason = 'disabled in a test', updated_at = now()
            WHERE id = $1`,
          [endpoint.id],
        );
        await tx.query(
          `UPDATE webhook_deliveries SET status = 'skipped', last_error = 'endpoint disabled', updated_at = clock_timestamp()
            WHERE endpoint_id = $1 AND status = 'pending'`,
          [endpoint.id],
        );
      });
      // ...and an admin enables it again.
      const enabled = await http(stack.apiUrl, 'POST', `/v1/admin/webhooks/${endpoint.id}/enable`, { key: DEMO.admin });
      expect(enabled.status).toBe(200);
    });
    expect(seenHere()).toBe(1);
    expect(ended).toEqual({ skipped: 1, stale: 0, delivered: 0 });
    const [delivery] = await endpoint.deliveries();
    expect(delivery.status).toBe('skipped');
  });

  /**
   * A message to `path` held on the wire: a receiver behind a holding relay (a slow network), an endpoint subscribed
   * to it, and an execution whose delivery attempt has read its delivery for the last time and whose request now waits
   * in the relay. `arrivals` are the times the receiver got the message (performance.now()).
   */
  async function messageHeldOnTheWire(path: string, label: string) {
    const arrivals: number[] = [];
    const target = await startReceiver((at) => {
      if (at === path) arrivals.push(performance.now());
      return { status: 204 };
    });
    const relay = await startHoldingRelay(target.port);
    const close = async () => {
      await relay.close();
      await target.close();
    };
    try {
      const endpoint = await subscribedReceiver(stack, relay.port, `http://127.0.0.1:${relay.port}${path}`, [
        'execution.finished',
      ]);
      const run = await http(stack.apiUrl, 'POST', '/v1/executions', {
        key: DEMO.agent,
        body: submission([sms(unique(label))]),
      });
      expect(run.status).toBe(201);
      await waitFor(
        async () => relay.held(),
        (n) => n === 1,
      );
      return { arrivals, relay, endpoint, close };
    } catch (error) {
      await close();
      throw error;
    }
  }

  /** An admin's DELETE of the endpoint through `apiUrl`, and when its answer came (performance.now(); null before). */
  function timedDelete(apiUrl: string, endpointId: string) {
    let answeredAt: number | null = null;
    const answer = http(apiUrl, 'DELETE', `/v1/admin/webhooks/${endpointId}`, { key: DEMO.admin }).then((answer) => {
      answeredAt = performance.now();
      return answer;
    });
    return { answer, answeredAt: () => answeredAt };
  }

  /**
   * Lets the held message go on to the receiver, and expects the delete answered 204 and the message to have arrived
   * (the relay let it through) before the delete's answer.
   */
  async function releaseAndExpectArrivalBeforeAnswer(
    held: Awaited<ReturnType<typeof messageHeldOnTheWire>>,
    deleting: ReturnType<typeof timedDelete>,
  ): Promise<void> {
    held.relay.release();
    const deleted = await deleting.answer;
    expect(deleted.status).toBe(204);
    await waitFor(
      async () => held.arrivals.length,
      (n) => n === 1,
    );
    expect(held.arrivals[0]).toBeLessThan(deleting.answeredAt()!);
  }

  /** Whether the endpoint's row is gone: its delete has committed. */
  const endpointGone = async (endpointId: string) =>
    ((await stack.db.dataSource.query(`SELECT 1 FROM webhook_endpoints WHERE id = $1`, [endpointId])) as unknown[])
      .length === 0;

  /** An admin's DELETE of the endpoint through `apiUrl`, once it has committed (and waits for the send). */
  async function committedDelete(apiUrl: string, endpointId: string) {
    const deleting = timedDelete(apiUrl, endpointId);
    await waitFor(
      async () => endpointGone(endpointId),
      (gone) => gone,
      20_000,
      20,
    );
    return deleting;
  }

  /** How many times `api` has said that a delete waits for the endpoint's sends under way. */
  const waitsLogged = (api: RunningApp) =>
    api.output.join('').split('"msg":"webhook endpoint gone: waiting for its sends under way').length - 1;

  /**
   * A second DELETE of the endpoint through `api` at `url`, made while the first waits: once it has answered, or waits
   * for the send (it says so).
   */
  async function secondDelete(api: RunningApp, url: string, endpointId: string) {
    const second = timedDelete(url, endpointId);
    await waitFor(
      async () => second.answeredAt() !== null || waitsLogged(api) > 0,
      (done) => done,
      20_000,
      20,
    );
    return second;
  }

  /** SIGTERM to `api`, once it says it is shutting down. */
  async function toldToStop(api: RunningApp): Promise<void> {
    api.child.kill('SIGTERM');
    await waitFor(
      async () => api.output.join('').includes('shutting down'),
      (said) => said,
    );
  }

  /**
   * As releaseAndExpectArrivalBeforeAnswer for the first delete (204), and expects the second answered 404, also after
   * the message arrived.
   */
  async function releaseAndExpectArrivalBeforeBothAnswers(
    held: Awaited<ReturnType<typeof messageHeldOnTheWire>>,
    first: ReturnType<typeof timedDelete>,
    second: ReturnType<typeof timedDelete>,
  ): Promise<void> {
    await releaseAndExpectArrivalBeforeAnswer(held, first);
    expect((await second.answer).status).toBe(404);
    expect(held.arrivals[0]).toBeLessThan(second.answeredAt()!);
  }

  it('answers a delete only once a message already on its way has reached the receiver, or never reached it', async () => {
    // The attempt has read its delivery for the last time and its request is on the wire (held by the relay, a slow
    // network) when the admin deletes the endpoint: the message may reach the receiver before the 204, never after.
    const held = await messageHeldOnTheWire('/on-the-wire', 'wh-delete-on-the-wire');
    const { endpoint, close } = held;
    try {
      const deleting = timedDelete(stack.apiUrl, endpoint.id);
      // The delete has committed (or answered): only then does the request go on to the receiver.
      await waitFor(
        async () => deleting.answeredAt() !== null || (await endpointGone(endpoint.id)),
        (done) => done,
        20_000,
        20,
      );
      await releaseAndExpectArrivalBeforeAnswer(held, deleting);
    } finally {
      await close();
    }
  }, 60_000);

  it('answers a delete only once the request is over, also when the statement that marked it was slow to come back', async () => {
    // The mark is good until its statement's clock + WEBHOOK_TIMEOUT_MS + 1 s. The statement comes back 2 s after it
    // wrote the mark (a slow commit, a busy database: a trigger sleeps here), so a request then given the whole
    // WEBHOOK_TIMEOUT_MS would still be under way when the mark runs out and the delete answers.
    const sink = await startSilentSink();
    const endpoint = await subscribedReceiver(stack, sink.port, `http://127.0.0.1:${sink.port}/slow-mark`, [
      'execution.finished',
    ]);
    await stack.db.dataSource.query(
      `CREATE OR REPLACE FUNCTION test_slow_send_mark() RETURNS trigger LANGUAGE plpgsql AS
         $$ BEGIN PERFORM pg_sleep(2); RETURN NULL; END $$`,
    );
    await stack.db.dataSource.query(
      `CREATE TRIGGER test_slow_send_mark AFTER INSERT ON webhook_sends_in_flight FOR EACH ROW
         WHEN (NEW.endpoint_id = '${endpoint.id}') EXECUTE FUNCTION test_slow_send_mark()`,
    );
    try {
      const run = await http(stack.apiUrl, 'POST', '/v1/executions', {
        key: DEMO.agent,
        body: submission([sms(unique('wh-delete-slow-mark'))]),
      });
      expect(run.status).toBe(201);
      // The request is on the wire (connected), its mark 2 s old.
      await waitFor(
        async () => sink.connections(),
        (n) => n === 1,
      );
      const deleted = await http(stack.apiUrl, 'DELETE', `/v1/admin/webhooks/${endpoint.id}`, { key: DEMO.admin });
      const answeredAt = performance.now();
      expect(deleted.status).toBe(204);
      const closedAt = await waitFor(
        async () => sink.closedAt(),
        (at) => at !== null,
      );
      expect(closedAt!).toBeLessThan(answeredAt);
    } finally {
      await stack.db.dataSource.query(`DROP TRIGGER IF EXISTS test_slow_send_mark ON webhook_sends_in_flight`);
      await stack.db.dataSource.query(`DROP FUNCTION IF EXISTS test_slow_send_mark()`);
      await sink.close();
    }
  }, 60_000);

  it('answers a second delete of the endpoint, made while the first waits, 404 only once the message on its way has reached the receiver; another tenant’s at once', async () => {
    // Two DELETEs of one endpoint at once: the first deletes it and waits for the message on its way; the second finds
    // it gone, and its 404 says as much as the 204 does — nothing signed with the secret arrives after it. An admin of
    // another tenant naming the id learns nothing of it and waits for nothing: 404 at once.
    const { app: api, url } = await stack.startApiApp();
    const otherAdmin = await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo-other', role: 'admin' });
    let held: Awaited<ReturnType<typeof messageHeldOnTheWire>> | undefined;
    try {
      held = await messageHeldOnTheWire('/on-the-wire-twice', 'wh-delete-twice');
      const { endpoint } = held;
      const first = timedDelete(url, endpoint.id);
      await waitFor(
        async () => first.answeredAt() !== null || (await endpointGone(endpoint.id)),
        (done) => done,
        20_000,
        20,
      );
      const other = await http(url, 'DELETE', `/v1/admin/webhooks/${endpoint.id}`, { key: otherAdmin.key });
      expect(other.status).toBe(404);
      expect([held.relay.held(), held.arrivals.length]).toEqual([1, 0]);

      const second = await secondDelete(api, url, endpoint.id);
      await releaseAndExpectArrivalBeforeBothAnswers(held, first, second);
    } finally {
      await stack.kill(api);
      await held?.close();
    }
  }, 60_000);

  it('a delete waiting for a message on its way when its API is told to stop is answered 204 after it, then exit 0', async () => {
    // The API stops cleanly on SIGTERM: a delete still waiting for a send is neither cut nor answered early — the
    // server waits for it (the database is closed only after), and the process exits 0 once it has answered.
    const { app: api, url } = await stack.startApiApp();
    let held: Awaited<ReturnType<typeof messageHeldOnTheWire>> | undefined;
    try {
      held = await messageHeldOnTheWire('/on-the-wire-at-stop', 'wh-delete-at-stop');
      const { endpoint } = held;
      const deleting = await committedDelete(url, endpoint.id);
      await toldToStop(api);
      expect(deleting.answeredAt()).toBeNull();
      await releaseAndExpectArrivalBeforeAnswer(held, deleting);
      expect(await api.exited).toBe(0);
    } finally {
      if (api.child.exitCode === null && api.child.signalCode === null) await stack.kill(api);
      await held?.close();
    }
  }, 60_000);

  it('a second delete waiting for a message on its way when its API is told to stop is answered 404 after it, the first 204, then exit 0', async () => {
    // The 404 of a delete that found the endpoint gone waits as the 204 does, also through SIGTERM: neither is cut nor
    // answered early, and the process exits 0 once both have answered.
    const { app: api, url } = await stack.startApiApp();
    let held: Awaited<ReturnType<typeof messageHeldOnTheWire>> | undefined;
    try {
      held = await messageHeldOnTheWire('/on-the-wire-twice-at-stop', 'wh-delete-twice-at-stop');
      const { endpoint } = held;
      const first = await committedDelete(url, endpoint.id);
      const second = await secondDelete(api, url, endpoint.id);
      expect(second.answeredAt()).toBeNull();
      await toldToStop(api);
      expect([first.answeredAt(), second.answeredAt()]).toEqual([null, null]);
      await releaseAndExpectArrivalBeforeBothAnswers(held, first, second);
      expect(await api.exited).toBe(0);
    } finally {
      if (api.child.exitCode === null && api.child.signalCode === null) await stack.kill(api);
      await held?.close();
    }
  }, 60_000);
});
