/**
 * A list page that ends once it holds `maxBytes` of stored text, cut in the statement that reads it (no round trip to
 * read the sizes first). `read` selects the page's rows in page order, one more than the page holds (`LIMIT
 * $<limit>`, that parameter being the page size plus one), each with the stored text it holds as `page_row_bytes`
 * (float8), and any column `order` names that the page's own columns lack as `page_order`. `order` is the page order
 * over `read`'s columns (`seq`, `id DESC`). Only those rows are sized and ranked, never the table's.
 *
 * Kept: the first row, and each later one while the text of the rows up to it, it included, stays within
 * `$<maxBytes>`, up to the page size. An item alone larger than that is still shown. Each row kept tells how many rows
 * `read` found (`page_read`): more follow when that is more than were kept (keptPage).
 */
export function cutAtBytes(read: string, order: string, limit: number, maxBytes: number): string {
  return `SELECT c.* FROM (
       SELECT r.*, row_number() OVER w AS page_n, sum(r.page_row_bytes) OVER w AS page_bytes, count(*) OVER () AS page_read
       FROM (${read}) r WINDOW w AS (ORDER BY ${order} ROWS UNBOUNDED PRECEDING)) c
     WHERE c.page_n < $${limit} AND (c.page_n = 1 OR c.page_bytes <= $${maxBytes}::float8) ORDER BY ${order}`;
}

/** The columns a cutAtBytes statement adds to each row: what it was cut by, not part of the row. */
const CUT_COLUMNS = ['page_row_bytes', 'page_order', 'page_n', 'page_bytes', 'page_read'] as const;

/**
 * The rows a cutAtBytes statement kept, without the columns it cut by, the stored text they hold (`bytes`), and whether
 * more follow: `read` found more rows than were kept (cut by the page size or by the bytes).
 */
export function keptPage<T>(found: readonly Record<string, unknown>[]): { rows: T[]; more: boolean; bytes: number } {
  const more = found.length > 0 && Number(found[0].page_read) > found.length;
  // The stored text of the rows kept (each row's running sum, in page order: the last one's is the page's).
  const bytes = found.reduce((most, row) => Math.max(most, Number(row.page_bytes ?? 0)), 0);
  const kept = found.map((raw) => {
    const row = { ...raw };
    for (const column of CUT_COLUMNS) delete row[column];
    return row as T;
  });
  return { rows: kept, more, bytes };
}
