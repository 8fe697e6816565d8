/**
 * The end-to-end ceiling: a bare BullMQ worker whose every job is one Postgres transaction of the shape Verity's
 * transitions take (I2: a compare-and-set UPDATE and its event INSERT, in one statement). Same concurrency and pool
 * size as a dispatcher. What one worker process can move per second on this machine when it does nothing else.
 */
import { Worker } from 'bullmq';
import { Pool } from 'pg';
import { redisTarget } from '../../libs/platform/src/redis';

const pool = new Pool({ connectionString: process.env.DATABASE_URL, max: Number(process.env.POOL_SIZE ?? 10) });
pool.on('error', () => undefined);

const worker = new Worker<{ id: string }>(
  'bench-ceiling',
  async (job) => {
    await pool.query(
      `WITH moved AS (
         UPDATE bench_ops SET status = 'DONE', updated_at = clock_timestamp() WHERE id = $1 AND status = 'PENDING'
         RETURNING id
       )
       INSERT INTO bench_events (operation_id, from_status, to_status) SELECT id, 'PENDING', 'DONE' FROM moved`,
      [job.data.id],
    );
  },
  {
    // redisTarget: a unix:/// REDIS_URL (bench --unix-sockets) in the form ioredis reads, as the apps hand it over.
    connection: { url: redisTarget(process.env.REDIS_URL ?? ''), maxRetriesPerRequest: null },
    prefix: '{bench}',
    concurrency: Number(process.env.WORKER_CONCURRENCY ?? 16),
    autorun: true,
  },
);
worker.on('error', () => undefined);
void worker.waitUntilReady().then(() => process.stdout.write('ceiling worker ready\n'));
process.on('SIGTERM', () => {
  void worker.close().then(() => pool.end().then(() => process.exit(0)));
});
