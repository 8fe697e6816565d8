import { DEMO, Stack } from '../support/stack';
import { http } from '../support/http';

const CHANGES = 10;
const PATH = '/v1/admin/connector-settings/http';

interface ChangesPage {
  data: { id: string }[];
  next_cursor: string | null;
}

/** An allowlist as large as one PUT's body lets it be (~250 KB): 68 hosts of 20 ports, each binding 50 secrets. */
function largeAllowlist(version: number, names: string[]) {
  const label = (c: string) => c.repeat(60);
  return Array.from({ length: 68 }, (_, i) => ({
    host: `h${version}-${i}.${label('a')}.${label('b')}.${label('c')}.example.com`.slice(0, 253),
    ports: Array.from({ length: 20 }, (_, p) => 10_000 + p),
    secrets: names,
  }));
}

/**
 * The history of admin changes was paged by count alone (at most 200), and each entry holds the settings before and
 * after: an admin key that replaced a large allowlist 200 times made a page of 100 MB, and three such pages asked for
 * at once ran the API out of its heap (SIGABRT) for every tenant. A page now ends early once its entries hold 1 MiB of
 * stored text (one at least), and `next_cursor` goes on from there.
 */
describe('a page of the admin changes is bounded by its size as well as its count', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'red27achangesbytes', dispatchers: 0, reconcilers: 0 });
    const names = Array.from({ length: 50 }, (_, i) => `s${i}_`.padEnd(64, 'n'));
    const secrets = await http(stack.apiUrl, 'PUT', PATH, {
      key: DEMO.admin,
      body: { secrets: Object.fromEntries(names.map((name) => [name, `value-${name}`])) },
    });
    expect(secrets.status).toBe(200);
    for (let n = 0; n < CHANGES; n += 1) {
      const put = await http(stack.apiUrl, 'PUT', PATH, {
        key: DEMO.admin,
        body: { allow_hosts: largeAllowlist(n % 2, names) },
      });
      expect(put.status).toBe(200);
    }
  });
  afterAll(async () => stack?.stop());

  it('a page of large entries ends before its limit, and its cursors reach each entry once', async () => {
    const all = (await stack.db.dataSource.query(
      `SELECT id FROM admin_changes WHERE tenant_id = 'demo' ORDER BY seq DESC`,
    )) as { id: string }[];
    expect(all).toHaveLength(CHANGES + 1);
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const path: string = `/v1/admin/changes?limit=200${cursor ? `&cursor=${cursor}` : ''}`;
      const page = await http<ChangesPage>(stack.apiUrl, 'GET', path, { key: DEMO.admin });
      expect(page.status).toBe(200);
      expect(page.body.data.length).toBeGreaterThan(0);
      expect(page.text.length).toBeLessThan(1.5 * 1024 * 1024);
      seen.push(...page.body.data.map((entry) => entry.id));
      cursor = page.body.next_cursor;
      pages += 1;
    } while (cursor !== null && pages < CHANGES + 2);
    expect(pages).toBeGreaterThan(1);
    expect(seen).toEqual(all.map((row) => row.id));
  });
});
