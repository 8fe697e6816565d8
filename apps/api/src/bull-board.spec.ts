import type { Logger } from '@verity/platform';
import express from 'express';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { boardErrorsAsProblems, withoutLinksElsewhere } from './bull-board';

/** The layer in front of Bull Board's router, with a stand-in for the board answering as Bull Board does. */
async function serve(logger: Logger, status: number, body: unknown) {
  const app = express();
  app.use('/admin/queues', boardErrorsAsProblems(logger), (_req: express.Request, res: express.Response) => {
    res.status(status).json(body);
  });
  const server: Server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/admin/queues`;
  return { base, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

function recordingLogger() {
  const errors: unknown[][] = [];
  const logger = { error: (...args: unknown[]) => errors.push(args) } as unknown as Logger;
  return { logger, errors };
}

/** What ioredis' Redis Cluster client rejects a command with while the cluster, or the node it needs, is away. */
const CLUSTER_OUT_OF_REACH = [
  'Too many Cluster redirections. Last error: Error: Connection is closed.',
  'Too many Cluster redirections. Last error: ReplyError: CLUSTERDOWN The cluster is down',
  // A node that has not noticed yet sends the command on to the killed master.
  'Too many Cluster redirections. Last error: ReplyError: MOVED 5168 127.0.0.1:7001',
  'Too many Cluster redirections. Last error: Error: connect ECONNREFUSED 127.0.0.1:7000',
  'CLUSTERDOWN Hash slot not served',
  "Cluster isn't ready and enableOfflineQueue options is false",
  'None of startup nodes is available',
];

describe('Bull Board errors as problems', () => {
  it('logs what a 5xx of the board says went wrong, which the answer leaves out', async () => {
    const { logger, errors } = recordingLogger();
    const served = await serve(logger, 500, {
      error: { key: 'ERRORS.INTERNAL_SERVER_ERROR' },
      message: "ERR wrong number of arguments for 'zrange' command",
    });
    try {
      const res = await fetch(`${served.base}/api/queues`);
      expect(res.status).toBe(500);
      const text = await res.text();
      expect(JSON.parse(text)).toMatchObject({ type: 'https://verity.dev/problems/internal', status: 500 });
      expect(text).not.toContain('wrong number of arguments');
      // Answered without the reason, so the log is the only place an operator can find it.
      expect(JSON.stringify(errors)).toContain('wrong number of arguments');
    } finally {
      await served.close();
    }
  });

  it.each([
    'Connection is closed.',
    "Stream isn't writeable and enableOfflineQueue options is false",
    // A Redis Cluster with a master killed: ioredis' cluster client retries, then gives up with the last error in its
    // message — the killed node's closed connection, a redirection to it, then the other nodes' CLUSTERDOWN.
    ...CLUSTER_OUT_OF_REACH,
  ])('answers Redis out of reach (%s) as 503 queue-unavailable, logged once for the outage', async (message) => {
    const { logger, errors } = recordingLogger();
    const served = await serve(logger, 500, { error: { key: 'ERRORS.INTERNAL_SERVER_ERROR' }, message });
    try {
      for (let poll = 0; poll < 3; poll += 1) {
        const res = await fetch(`${served.base}/api/queues`);
        expect(res.status).toBe(503);
        expect(res.headers.get('retry-after')).toBe('1');
        const text = await res.text();
        expect(JSON.parse(text)).toMatchObject({ type: 'https://verity.dev/problems/queue-unavailable' });
        expect(text).not.toContain(message);
      }
      expect(errors).toHaveLength(1);
      expect(JSON.stringify(errors)).toContain(JSON.stringify(message).slice(1, -1));
    } finally {
      await served.close();
    }
  });

  // A write is made of several commands (pause all: one queue after another; retry all, clean, promote all: job after
  // job), and one sent before the connection closed may have been applied: with Redis out of reach as much as with a
  // command that timed out, the board cannot tell whether the change was made.
  it.each([
    'Connection is closed.',
    "Stream isn't writeable and enableOfflineQueue options is false",
    'Command timed out',
    ...CLUSTER_OUT_OF_REACH,
    'Too many Cluster redirections. Last error: Error: Command timed out',
  ])(
    'answers a write that failed with Redis out of reach (%s) as 503 saying the change may have been made',
    async (message) => {
      const { logger } = recordingLogger();
      const served = await serve(logger, 500, { error: { key: 'ERRORS.INTERNAL_SERVER_ERROR' }, message });
      try {
        const res = await fetch(`${served.base}/api/queues/pause`, { method: 'PUT' });
        expect(res.status).toBe(503);
        const problem = (await res.json()) as { type: string; detail: string };
        expect(problem.type).toBe('https://verity.dev/problems/queue-unavailable');
        expect(problem.detail).toContain('could not tell whether the change was made');
      } finally {
        await served.close();
      }
    },
  );

  it('answers a cluster client’s rejection whose last error is Redis refusing the command as 500 internal', async () => {
    const { logger, errors } = recordingLogger();
    const message = "Too many Cluster redirections. Last error: ReplyError: ERR wrong number of arguments for 'zrange'";
    const served = await serve(logger, 500, { error: { key: 'ERRORS.INTERNAL_SERVER_ERROR' }, message });
    try {
      const res = await fetch(`${served.base}/api/queues`);
      expect(res.status).toBe(500);
      expect(await res.json()).toMatchObject({ type: 'https://verity.dev/problems/internal' });
      expect(JSON.stringify(errors)).toContain('wrong number of arguments');
    } finally {
      await served.close();
    }
  });

  it('answers the board’s 403 (a panel its configuration hides) as forbidden, not bad-request', async () => {
    const { logger, errors } = recordingLogger();
    const served = await serve(logger, 403, { error: { key: 'ERRORS.WORKERS_DISABLED' } });
    try {
      const res = await fetch(`${served.base}/api/queues/dispatch/workers`);
      expect(res.status).toBe(403);
      expect(await res.json()).toMatchObject({
        type: 'https://verity.dev/problems/forbidden',
        status: 403,
        error: { key: 'ERRORS.WORKERS_DISABLED' },
      });
      expect(errors).toEqual([]);
    } finally {
      await served.close();
    }
  });
});

describe('withoutLinksElsewhere', () => {
  it('leaves out every <link> to another origin however its href is written, and keeps the page’s own', () => {
    const own = [
      '<link rel="icon" type="image/svg+xml" id="fav-logo" href="static/images/logo.svg">',
      '<link href="static/css/main.88d71b4bd7.css" rel="stylesheet">',
      '<link rel="stylesheet" href="/admin/queues/static/x.css">',
    ];
    const elsewhere = [
      '<link href="https://fonts.googleapis.com/css2?family=IBM+Plex+Sans&display=swap" rel="stylesheet">',
      "<LINK rel='preconnect' HREF='https://fonts.gstatic.com' crossorigin>",
      '<link rel="stylesheet" href=//cdn.example.com/x.css>',
      '<link rel="dns-prefetch" href = "http://tracker.example">',
    ];
    const page = `<head>\n${[...elsewhere, ...own].join('\n')}\n</head>`;
    expect(withoutLinksElsewhere(page)).toBe(`<head>\n${own.join('\n')}\n</head>`);
  });
});
