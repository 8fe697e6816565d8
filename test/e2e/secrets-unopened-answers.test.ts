import { Verity } from '@verity/sdk';
import { DEMO, Stack } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import { openStream } from './api-sse';

const SEALED_WITH = Buffer.alloc(32, 1).toString('base64');
const ANOTHER_KEY = Buffer.alloc(32, 2).toString('base64');

/**
 * Every answer to a tenant's key is redacted with the tenant's secrets of now; an API process whose SECRETS_KEY does not
 * open them (a key rotated on one process and not the other) cannot redact, so it answers a problem that says so (503
 * secrets-unreadable) rather than the stored text — not 500 "an unexpected error occurred". The event stream too, before
 * it has begun: not a 200 closed at its first page with no event and no `end`, which a client reconnects to every
 * second for ever.
 */
describe('an API whose SECRETS_KEY does not open the tenant’s secrets', () => {
  let stack: Stack;
  let otherApi: string;
  let executionId: string;

  beforeAll(async () => {
    stack = await Stack.start({
      label: 'secretsunopened',
      dispatchers: 0,
      reconcilers: 0,
      env: { SECRETS_KEY: SEALED_WITH },
    });
    const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      headers: { 'idempotency-key': unique('unopened') },
      body: submission([charge('order-unopened')]),
    });
    expect(created.status).toBe(201);
    executionId = created.body.id;
    const secret = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { secrets: { crm_token: 'crm-token-sealed-elsewhere' } },
    });
    expect(secret.status).toBe(200);
    otherApi = await stack.startApi({ SECRETS_KEY: ANOTHER_KEY });
  }, 90_000);
  afterAll(async () => {
    await stack?.stop();
  });

  it('a read is 503 secrets-unreadable, saying why, not the stored text', async () => {
    const read = await http<{ type: string; detail: string }>(otherApi, 'GET', `/v1/executions/${executionId}`, {
      key: DEMO.agent,
    });
    expect(read.status).toBe(503);
    expect(read.headers.get('retry-after')).toBe('5');
    expect(read.body.type).toMatch(/secrets-unreadable$/);
    expect(read.body.detail).toContain('SECRETS_KEY');
    // A read changed nothing: it is not told a change may have been made.
    expect(read.body.detail).toMatch(/nothing was changed/);
    expect(read.text).not.toContain('order-unopened');
  });

  it('a submission there is the same 503 (intake reads the secrets too)', async () => {
    const created = await http<{ type: string; detail: string }>(otherApi, 'POST', '/v1/executions', {
      key: DEMO.agent,
      headers: { 'idempotency-key': unique('unopened') },
      body: submission([charge('order-unopened-2')]),
    });
    expect(created.status).toBe(503);
    expect(created.body.type).toMatch(/secrets-unreadable$/);
    expect(created.body.detail).toMatch(/may have been made/);
  });

  it('the stream is that problem before it begins, not a 200 closed with no event nor `end`', async () => {
    const stream = await openStream(`${otherApi}/v1/executions/${executionId}/stream`, DEMO.agent);
    try {
      expect({ status: stream.status, type: stream.contentType }).toEqual({
        status: 503,
        type: expect.stringContaining('application/problem+json') as unknown,
      });
    } finally {
      stream.abort();
    }
  });

  it('a HEAD of the stream answers the headers that GET would: the same 503', async () => {
    const res = await fetch(`${otherApi}/v1/executions/${executionId}/stream`, {
      method: 'HEAD',
      headers: { authorization: `Bearer ${DEMO.agent}` },
    });
    expect(res.status).toBe(503);
  });

  it('the API whose key opens them streams as before', async () => {
    const stream = await openStream(`${stack.apiUrl}/v1/executions/${executionId}/stream`, DEMO.agent);
    try {
      expect(stream.status).toBe(200);
      const frames = await stream.waitFor((sent) => sent.length > 0, 15_000);
      expect(frames[0].event).toBe('execution.created');
    } finally {
      stream.abort();
    }
  });

  // Last: it re-seals the secret under the other API's key.
  it('a stream whose secrets stop opening while it is open closes without `end`, and its reconnection is told why', async () => {
    const url = `${stack.apiUrl}/v1/executions/${executionId}/stream`;
    const stream = await openStream(url, DEMO.agent);
    try {
      expect(stream.status).toBe(200);
      const before = await stream.waitFor((sent) => sent.length > 0, 15_000);
      const lastEventId = before[before.length - 1].id!;
      // The secret set again through the other API: sealed under its key, which this API does not hold.
      const resealed = await http(otherApi, 'PUT', '/v1/admin/connector-settings/http', {
        key: DEMO.admin,
        body: { secrets: { crm_token: 'crm-token-sealed-over-there' } },
      });
      expect(resealed.status).toBe(200);
      // A new event for the stream's next page (the other API can redact its answer now).
      const cancelled = await http(otherApi, 'POST', `/v1/executions/${executionId}/cancel`, {
        key: DEMO.agent,
        body: { reason: 'ends the page' },
      });
      expect(cancelled.status).toBeLessThan(300);
      await stream.closed;
      // Nothing of the page it could not redact was sent, and no `end`: the stream is not over, only this connection.
      expect(stream.frames.map((f) => f.event)).toEqual(before.map((f) => f.event));
      expect(stream.frames.map((f) => f.event)).not.toContain('end');
      expect(stack.logs('api')).toMatch(/stream closed: the tenant’s secrets do not open/);
      // Its reconnection (with its Last-Event-ID, as a client does) is the 503 that says why.
      const again = await http<{ type: string; detail: string }>(stack.apiUrl, 'GET', url.slice(stack.apiUrl.length), {
        key: DEMO.agent,
        headers: { 'last-event-id': lastEventId, accept: 'text/event-stream' },
      });
      expect(again.status).toBe(503);
      expect(again.body.type).toMatch(/secrets-unreadable$/);
      expect(again.body.detail).toContain('SECRETS_KEY');
      // The SDK, resuming there, is handed that problem (told not to wait for the key to be fixed).
      const resumed = new Verity({ baseUrl: stack.apiUrl, apiKey: DEMO.agent }).stream(executionId, {
        lastEventId,
        retryOnBusy: false,
      });
      await expect(resumed.toArray()).rejects.toMatchObject({ status: 503, code: 'secrets-unreadable' });
    } finally {
      stream.abort();
    }
  });
});
