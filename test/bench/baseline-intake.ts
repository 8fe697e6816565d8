/**
 * The intake baseline: a bare node:http handler that parses the JSON body and does one Postgres INSERT (pg Pool of
 * the API's default size), then answers 201. What a submission costs with no framework, no auth, no validation and
 * no queue: the floor the API's POST /v1/executions is compared with. Run as its own process, like the API.
 */
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { Pool } from 'pg';

const pool = new Pool({ connectionString: process.env.DATABASE_URL, max: Number(process.env.POOL_SIZE ?? 10) });
pool.on('error', () => undefined);

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    let body: unknown;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      res.writeHead(400).end();
      return;
    }
    const id = randomUUID();
    pool.query('INSERT INTO bench_intake (id, body) VALUES ($1, $2)', [id, JSON.stringify(body)]).then(
      () => {
        const payload = JSON.stringify({ id, status: 'created' });
        res.writeHead(201, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) });
        res.end(payload);
      },
      () => res.writeHead(503).end(),
    );
  });
});
server.keepAliveTimeout = 65_000;
server.listen(Number(process.env.PORT), '127.0.0.1', () => process.stdout.write('baseline listening\n'));
process.on('SIGTERM', () => {
  server.close();
  void pool.end().then(() => process.exit(0));
});
