import { LISTEN_APPLICATION_NAME } from '@verity/persistence';
import { Client } from 'pg';

/** Runs one statement on a connection of its own, to the server at `url`. */
async function onOwnConnection<T>(url: string, work: (client: Client) => Promise<T>): Promise<T> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

/**
 * The API's LISTEN sessions on the database at `url`: found by their `application_name`, not by their last statement
 * (the round trip kept secret values wait for runs a `SELECT 1` on the same session).
 */
export function listenSessions(url: string): Promise<number[]> {
  return onOwnConnection(url, async (client) => {
    const { rows } = await client.query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity
        WHERE application_name = $1 AND datname = current_database() AND pid <> pg_backend_pid()`,
      [LISTEN_APPLICATION_NAME],
    );
    return rows.map((row) => row.pid);
  });
}

/** Ends a server session as a lost connection would (pg_terminate_backend). */
export async function terminateSession(url: string, pid: number): Promise<void> {
  await onOwnConnection(url, (client) => client.query(`SELECT pg_terminate_backend($1)`, [pid]));
}
