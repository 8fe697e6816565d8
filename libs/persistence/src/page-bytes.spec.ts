import type { PoolClient } from 'pg';
import type { EntityManager } from 'typeorm';
import { chargeOperation, insertTestExecution } from '../../../test/support/fixtures';
import { useTestDatabase } from '../../../test/support/test-database';
import { listAdminChangesPage } from './admin-changes';
import { reviewQueuePageWithSecretsHeld } from './review-queue.repository';
import { listEventsWithinBytes, listExecutionsWithSecretsHeld } from './store';
import { listWebhookDeliveriesPage } from './webhooks';

/**
 * The list pages that end at a number of bytes of stored text (the events — the stream's pages too —, the executions,
 * the admin changes, a webhook's delivery log, a review queue) read, size and cut their rows in the statement that
 * reads them: no round trip to read the sizes first, also for a page of one small row. Counted on a real connection
 * (each call its pg client makes is one round trip), and the cut checked against the sizes Postgres gives the rows.
 */
describe('a page cut at a number of bytes is read by one statement (real Postgres)', () => {
  const db = useTestDatabase('pagebytes', ['ev', 'ex', 'adm', 'wh', 'rq', 'none']);
  // Stored text of different sizes, each row a few hundred bytes to a few KB.
  const PADS = [300, 2000, 50, 900, 1200];
  let executionId: string;

  beforeAll(async () => {
    const m = db.dataSource.manager;
    // Events: the execution's created event, then one per pad (copies of it, as appended).
    executionId = await insertTestExecution(m, 'ev');
    await db.dataSource.transaction(async (tx) => {
      await tx.query(`SET LOCAL session_replication_role = replica`);
      await tx.query(
        `INSERT INTO events SELECT (jsonb_populate_record(NULL::events, to_jsonb(t) || jsonb_build_object(
           'id', 'evt_pad' || n, 'seq', t.seq + n, 'data', jsonb_build_object('note', repeat('e', ($2::int[])[n]))))).*
         FROM (SELECT * FROM events WHERE execution_id = $1 ORDER BY seq DESC LIMIT 1) t,
              generate_series(1, array_length($2::int[], 1)) n`,
        [executionId, PADS],
      );
    });
    // Executions with operations of different sizes; the review queue's: approval requests of different sizes.
    for (const pad of PADS) {
      await insertTestExecution(m, 'ex', {
        operations: [chargeOperation({ params: { amount: 1, currency: 'EUR', note: 'x'.repeat(pad) } })],
      });
      await insertTestExecution(m, 'rq', {
        operations: [
          chargeOperation({
            params: { amount: 1, currency: 'EUR', note: 'q'.repeat(pad) },
            requires_approval: true,
            approval: { state: 'requested' },
          }),
        ],
      });
    }
    // Admin changes and a webhook's deliveries.
    for (const [i, pad] of PADS.entries()) {
      await m.query(
        `INSERT INTO admin_changes (id, tenant_id, kind, connector, changed_by, before, after)
         VALUES ($1, 'adm', 'policy', NULL, 'key_x', '{}', jsonb_build_object('note', repeat('a', $2::int)))`,
        [`chg_pad${i}`, pad],
      );
    }
    await m.query(
      `INSERT INTO webhook_endpoints (id, tenant_id, url, events, secret) VALUES
         ('whe_pad', 'wh', 'https://example.com/hook', '{}', 'x'), ('whe_none', 'wh', 'https://example.com/h2', '{}', 'x')`,
    );
    for (const [i, pad] of PADS.entries()) {
      await m.query(
        `INSERT INTO webhook_deliveries (id, endpoint_id, tenant_id, type, payload, last_error)
         VALUES ($1, 'whe_pad', 'wh', 'execution.completed', jsonb_build_object('note', repeat('w', $2::int)), $3)`,
        [`whd_pad${i}`, pad, i % 2 ? 'timeout' : null],
      );
    }
  });

  /** One kind of page: its rows in page order with the stored text each holds, and a page of it (`empty`: of none). */
  interface PageKind {
    name: string;
    /** The statements a page takes (the review queue's count and executions besides its page). */
    statements: { found: number; none: number };
    sizes(m: EntityManager): Promise<{ id: string; bytes: number }[]>;
    page(m: EntityManager, empty: boolean, limit: number, maxBytes: number): Promise<{ ids: string[]; more: boolean }>;
  }

  const sized = async (m: EntityManager, sql: string, params: unknown[]) =>
    ((await m.query(sql, params)) as { id: string; bytes: string | number }[]).map((row) => ({
      id: row.id,
      bytes: Number(row.bytes),
    }));

  const kinds: PageKind[] = [
    {
      name: 'events (and the stream)',
      statements: { found: 1, none: 1 },
      sizes: (m) =>
        sized(m, `SELECT id, octet_length(t::text) AS bytes FROM events t WHERE execution_id = $1 ORDER BY seq`, [
          executionId,
        ]),
      page: async (m, empty, limit, maxBytes) => {
        const { events, more } = await listEventsWithinBytes(m, executionId, empty ? 'none' : 'ev', 0, limit, maxBytes);
        return { ids: events.map((e) => e.id), more };
      },
    },
    {
      name: 'executions',
      statements: { found: 1, none: 1 },
      sizes: (m) =>
        sized(
          m,
          `SELECT e.id, octet_length(e::text) + (SELECT coalesce(sum(octet_length(o::text)), 0) FROM operations o
                                                  WHERE o.execution_id = e.id) AS bytes
           FROM executions e WHERE e.tenant_id = 'ex' ORDER BY e.id DESC`,
          [],
        ),
      page: async (m, empty, limit, maxBytes) => {
        const options = { limit, maxBytes };
        const read = await listExecutionsWithSecretsHeld(m, empty ? 'none' : 'ex', options, []);
        return { ids: read.found.map((e) => e.id), more: (read as { more?: boolean }).more ?? false };
      },
    },
    {
      name: 'admin changes',
      statements: { found: 1, none: 1 },
      sizes: (m) =>
        sized(
          m,
          `SELECT id, octet_length(coalesce(before::text, '')) + octet_length(coalesce(after::text, '')) AS bytes
           FROM admin_changes WHERE tenant_id = 'adm' ORDER BY seq DESC`,
          [],
        ),
      page: async (m, empty, limit, maxBytes) => {
        const { rows, more } = await listAdminChangesPage(m, { tenantId: empty ? 'none' : 'adm', limit }, maxBytes);
        return { ids: rows.map((row) => row.id), more };
      },
    },
    {
      name: 'webhook deliveries',
      statements: { found: 1, none: 1 },
      sizes: (m) =>
        sized(
          m,
          `SELECT id, octet_length(payload::text) + octet_length(coalesce(last_error, '')) AS bytes
           FROM webhook_deliveries WHERE endpoint_id = 'whe_pad' ORDER BY id DESC`,
          [],
        ),
      page: async (m, empty, limit, maxBytes) => {
        const { rows, more } = await listWebhookDeliveriesPage(
          m,
          { tenantId: 'wh', endpointId: empty ? 'whe_none' : 'whe_pad', limit },
          maxBytes,
        );
        return { ids: rows.map((row) => row.id), more };
      },
    },
    {
      name: 'a review queue',
      // Its count (which tells whether the tenant holds secrets), its page, and the page's executions.
      statements: { found: 3, none: 2 },
      sizes: (m) =>
        sized(
          m,
          `SELECT id, octet_length(o::text) AS bytes FROM operations o WHERE tenant_id = 'rq' ORDER BY id DESC`,
          [],
        ),
      page: async (m, empty, limit, maxBytes) => {
        const read = await reviewQueuePageWithSecretsHeld(
          m,
          empty ? 'none' : 'rq',
          'approvals',
          { limit, maxBytes },
          [],
        );
        return { ids: read.found.operations.map((op) => op.id), more: read.found.more };
      },
    },
  ];

  /** The page `sizes` make: the first `limit`, ended before the row that takes the text past `maxBytes`, one at least. */
  function expected(sizes: { id: string; bytes: number }[], limit: number, maxBytes: number) {
    const ids: string[] = [];
    let total = 0;
    for (const row of sizes.slice(0, limit)) {
      total += row.bytes;
      if (ids.length > 0 && total > maxBytes) break;
      ids.push(row.id);
    }
    return { ids, more: sizes.length > ids.length };
  }

  /** The page, and the statements it took on its connection (each call of its pg client: one round trip). */
  async function counted(kind: PageKind, empty: boolean, limit: number, maxBytes: number) {
    const runner = db.dataSource.createQueryRunner();
    try {
      const client = (await runner.connect()) as PoolClient;
      const spy = jest.spyOn(client, 'query');
      try {
        const page = await kind.page(runner.manager, empty, limit, maxBytes);
        return { ...page, statements: spy.mock.calls.length };
      } finally {
        spy.mockRestore();
      }
    } finally {
      await runner.release();
    }
  }

  describe.each(kinds)('$name', (kind) => {
    let sizes: { id: string; bytes: number }[];
    beforeAll(async () => {
      sizes = await kind.sizes(db.dataSource.manager);
      expect(sizes.length).toBeGreaterThanOrEqual(PADS.length);
    });

    it('a small page (the common case): one statement reads it, as it reads an empty one', async () => {
      const small = await counted(kind, false, 2, 1024 * 1024);
      expect(small).toEqual({ ...expected(sizes, 2, 1024 * 1024), statements: kind.statements.found });
      expect(small.ids).toHaveLength(2);
      expect(await counted(kind, true, 10, 1024 * 1024)).toEqual({
        ids: [],
        more: false,
        statements: kind.statements.none,
      });
    });

    it('a row that takes the text exactly to the limit is kept; one byte less and it starts the next page', async () => {
      const total = (n: number) => sizes.slice(0, n).reduce((sum, row) => sum + row.bytes, 0);
      for (const n of [2, 3]) {
        const exact = await counted(kind, false, 50, total(n));
        expect(exact).toEqual({ ...expected(sizes, 50, total(n)), statements: kind.statements.found });
        expect(exact.ids).toEqual(sizes.slice(0, n).map((row) => row.id));
        expect(exact.more).toBe(true);
        const short = await counted(kind, false, 50, total(n) - 1);
        expect(short.ids).toEqual(sizes.slice(0, n - 1).map((row) => row.id));
        expect(short.more).toBe(true);
      }
    });

    it('a first row alone larger than the limit is still shown, alone', async () => {
      const page = await counted(kind, false, 50, 1);
      expect(page).toEqual({ ids: [sizes[0].id], more: true, statements: kind.statements.found });
    });

    it('cut by the limit or by neither: more only when rows follow', async () => {
      const all = sizes.length;
      expect(await counted(kind, false, all - 1, 1024 * 1024)).toEqual({
        ids: sizes.slice(0, all - 1).map((row) => row.id),
        more: true,
        statements: kind.statements.found,
      });
      expect(await counted(kind, false, all, 1024 * 1024)).toEqual({
        ids: sizes.map((row) => row.id),
        more: false,
        statements: kind.statements.found,
      });
      // Every limit and every cut between the rows' sizes agrees with the sizes Postgres gives them.
      const totals = sizes.map((_, i) => sizes.slice(0, i + 1).reduce((sum, row) => sum + row.bytes, 0));
      for (const limit of [1, 2, all - 1, all, all + 1]) {
        for (const maxBytes of [1, ...totals.flatMap((t) => [t - 1, t, t + 1])]) {
          const page = await counted(kind, false, limit, maxBytes);
          expect({ limit, maxBytes, ...page }).toEqual({
            limit,
            maxBytes,
            ...expected(sizes, limit, maxBytes),
            statements: kind.statements.found,
          });
        }
      }
    });
  });
});
