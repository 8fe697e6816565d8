import type { Pool } from 'pg';
import type { PostgresDriver } from 'typeorm/driver/postgres/PostgresDriver';
import { waitUntil } from '../../../test/support/local-server';
import { useTestDatabase } from '../../../test/support/test-database';
import { loadConfig } from '@verity/platform';
import {
  assertSchemaMigrated,
  createDataSource,
  lastMigrationName,
  ResilientPgClient,
  runMigrationsLocked,
} from './data-source';

/** What a Postgres crash or restart does to the sessions of a running app, against the real server. */
describe('data source under a Postgres that drops its sessions', () => {
  const db = useTestDatabase('datasource');

  const terminateOthers = () =>
    db.dataSource.query(
      `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid()`,
    ) as Promise<{ n: number }[]>;

  it('builds its pool from clients that always hear their own errors', () => {
    const pool = (db.dataSource.driver as PostgresDriver).master as Pool & { Client: unknown };
    expect(pool.Client).toBe(ResilientPgClient);
  });

  it('survives the server ending a session that nobody holds (FATAL sent to an idle client)', async () => {
    const client = new ResilientPgClient({ connectionString: db.url });
    await client.connect();
    const [{ pid }] = (await client.query('SELECT pg_backend_pid() AS pid')).rows as { pid: number }[];
    const ended = new Promise((resolve) => client.once('end', resolve));
    // With no 'error' listener of its own, this would throw from a socket callback and kill the process (and jest).
    await db.dataSource.query('SELECT pg_terminate_backend($1)', [pid]);
    await ended;
    await expect(client.query('SELECT 1')).rejects.toThrow();
  });

  it('keeps serving queries and transactions after every session is killed, again and again', async () => {
    let stop = false;
    let failures = 0;
    // What each worker has had served so far.
    const servedTo = Array.from({ length: 8 }, () => 0);
    const workers = Array.from({ length: 8 }, async (_, i) => {
      let done = 0;
      while (!stop) {
        try {
          if (i % 2 === 0) await db.dataSource.query('SELECT pg_sleep(0.002)');
          else
            await db.dataSource.transaction(async (tx) => {
              await tx.query('SELECT 1');
              await new Promise((resolve) => setTimeout(resolve, 3));
              await tx.query('SELECT 2');
            });
          done += 1;
          servedTo[i] = done;
        } catch {
          failures += 1;
          await new Promise((resolve) => setTimeout(resolve, 5));
        }
      }
      return done;
    });
    let terminated = 0;
    for (let round = 0; round < 10; round += 1) {
      // Every worker served again since the last kills (a loaded machine takes longer, it is not cut short): the next
      // kills meet sessions the pool has in use or just took back.
      const before = [...servedTo];
      await waitUntil(() => servedTo.every((n, i) => n > before[i]));
      const [{ n }] = await terminateOthers().catch(() => [{ n: 0 }]);
      terminated += n;
    }
    stop = true;
    const done = await Promise.all(workers);

    expect(terminated).toBeGreaterThan(0);
    expect(failures).toBeGreaterThan(0);
    expect(done.every((count) => count > 0)).toBe(true);
    // A session killed by the last round may still sit idle in the pool until its error arrives: the first query on it
    // fails (as the workers' did), the pool drops it, and the next one is served.
    const served = async (): Promise<number> => {
      for (let attempt = 0; ; attempt += 1) {
        try {
          return ((await db.dataSource.query('SELECT 1 AS ok')) as { ok: number }[])[0].ok;
        } catch (error) {
          if (attempt >= 3) throw error;
        }
      }
    };
    expect(await served()).toBe(1);
  });
});

/** Postgres on the same host, over its Unix socket: DATABASE_URL names the socket directory as `host`. */
describe('data source over a Unix socket', () => {
  const db = useTestDatabase('pgsocket');
  const socketDir = process.env.TEST_PG_SOCKET_DIR ?? '/var/run/postgresql';

  it('DATABASE_URL with ?host=<socket directory> passes the config and connects through the socket', async () => {
    const url = new URL(db.url);
    url.searchParams.set('host', socketDir);
    expect(loadConfig({ DATABASE_URL: url.toString() }).DATABASE_URL).toBe(url.toString());
    const overSocket = createDataSource(loadConfig({ DATABASE_URL: url.toString() }).DATABASE_URL, 1);
    await overSocket.initialize();
    try {
      // inet_server_addr() is NULL exactly when the session came through a Unix socket.
      const [row] = (await overSocket.query(`SELECT inet_server_addr() AS addr, current_database() AS name`)) as {
        addr: string | null;
        name: string;
      }[];
      expect(row).toEqual({ addr: null, name: db.name });
    } finally {
      await overSocket.destroy();
    }
    // The test's own (TCP) connection, for contrast.
    const [tcp] = (await db.dataSource.query(`SELECT inet_server_addr() AS addr`)) as { addr: string | null }[];
    expect(tcp.addr).not.toBeNull();
  });
});

describe('assertSchemaMigrated', () => {
  const db = useTestDatabase('schemacheck');

  it('resolves on a migrated database', async () => {
    await expect(assertSchemaMigrated(db.dataSource.manager)).resolves.toBeUndefined();
  });

  it('rejects naming the last migration where none ever ran (no migrations table)', async () => {
    const runner = db.dataSource.createQueryRunner();
    await runner.connect();
    try {
      await runner.startTransaction();
      // A schema with nothing in it, alone on this session's search path: a database no migration ran on.
      await runner.query(`CREATE SCHEMA never_migrated`);
      await runner.query(`SET LOCAL search_path TO never_migrated`);
      await expect(assertSchemaMigrated(runner.manager)).rejects.toThrow(
        `the database schema is not migrated: migration ${lastMigrationName()} has not run`,
      );
    } finally {
      await runner.rollbackTransaction();
      await runner.release();
    }
  });
});

describe('runMigrationsLocked on a database a newer release migrated', () => {
  const db = useTestDatabase('newerschema');

  it('applies nothing and names the migrations this code does not know (it said "schema up to date" alone)', async () => {
    await db.dataSource.query(`INSERT INTO migrations (timestamp, name) VALUES ($1, $2)`, [
      1899999999999,
      'FromANewerRelease1899999999999',
    ]);
    try {
      await expect(runMigrationsLocked(db.dataSource)).resolves.toEqual({
        applied: [],
        unknown: ['FromANewerRelease1899999999999'],
      });
    } finally {
      await db.dataSource.query(`DELETE FROM migrations WHERE name = 'FromANewerRelease1899999999999'`);
    }
    await expect(runMigrationsLocked(db.dataSource)).resolves.toEqual({ applied: [], unknown: [] });
  });
});
