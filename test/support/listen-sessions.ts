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

/** The server's sessions whose last statement was a LISTEN (other than the one asking). */
export function listenSessions(url: string): Promise<number[]> {
  return onOwnConnection(url, async (client) => {
    const { rows } = await client.query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity WHERE query ILIKE 'LISTEN%' AND pid <> pg_backend_pid()`,
    );
    return rows.map((row) => row.pid);
  });
}

/** Ends a server session as a lost connection would (pg_terminate_backend). */
export async function terminateSession(url: string, pid: number): Promise<void> {
  await onOwnConnection(url, (client) => client.query(`SELECT pg_terminate_backend($1)`, [pid]));
}
