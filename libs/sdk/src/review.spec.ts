import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Verity } from './client';
import { VerityAuthError } from './errors';

const KEY = 'sk-review-key-789';

/** A real HTTP server that records each request and answers with the handler's status and body. */
async function listen(answer: (url: string) => [number, unknown]) {
  const seen: { url: string; authorization: string | undefined }[] = [];
  const server = createServer((req, res) => {
    seen.push({ url: req.url!, authorization: req.headers.authorization });
    const [status, body] = answer(req.url!);
    res.writeHead(status, { 'content-type': status < 400 ? 'application/json' : 'application/problem+json' });
    res.end(JSON.stringify(body));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const PAGE = { data: [], total: 0, next_cursor: null };

describe('review queues', () => {
  it('reads the summary and both queues with the Bearer key and the filters as query parameters', async () => {
    const summary = { approvals: 2, manual_reviews: 1, escalated: 0, overdue: 0, as_of: '2026-01-01T00:00:00.000Z' };
    const server = await listen((url) => [200, url.startsWith('/v1/review/summary') ? summary : PAGE]);
    try {
      const dx = new Verity({ baseUrl: server.url, apiKey: KEY });
      await expect(dx.review.summary()).resolves.toEqual(summary);
      await expect(dx.review.approvals({ connector: 'sandbox.sms', q: 'op_1', limit: 10 })).resolves.toEqual(PAGE);
      await dx.review.manualReviews({ reason: 'CONNECTOR_ERROR', escalated: true, cursor: 'op_9' });
      await dx.review.manualReviews({ escalated: false });
      expect(server.seen.map((s) => s.url)).toEqual([
        '/v1/review/summary',
        '/v1/review/approvals?connector=sandbox.sms&q=op_1&limit=10',
        '/v1/review/manual-reviews?reason=CONNECTOR_ERROR&cursor=op_9&escalated=true',
        '/v1/review/manual-reviews?escalated=false',
      ]);
      expect(server.seen.every((s) => s.authorization === `Bearer ${KEY}`)).toBe(true);
    } finally {
      await server.close();
    }
  });

  it('rejects with a typed error when the key lacks the reviewer role', async () => {
    const server = await listen(() => [
      403,
      { type: 'https://verity.dev/problems/forbidden', title: 'Forbidden', status: 403, detail: 'reviewer role' },
    ]);
    try {
      const dx = new Verity({ baseUrl: server.url, apiKey: KEY });
      const error = await dx.review.approvals().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(VerityAuthError);
      expect(error).toMatchObject({ status: 403, code: 'forbidden' });
      expect(server.seen).toHaveLength(1);
    } finally {
      await server.close();
    }
  });
});
