import type { TestDatabase } from './services';

/**
 * The transaction that wrote each event of an execution (the `txid` column's default), by event id: an event written
 * with the move it explains shares that move's transaction, one written after it in a statement of its own does not.
 */
export async function eventTransactions(db: TestDatabase, executionId: string): Promise<Map<string, string>> {
  const rows = (await db.dataSource.query(`SELECT id, txid::text AS txid FROM events WHERE execution_id = $1`, [
    executionId,
  ])) as { id: string; txid: string }[];
  return new Map(rows.map((row) => [row.id, row.txid]));
}
