import { randomBytes } from 'node:crypto';
import { Client } from 'pg';
import { SandboxProvider, WireLog, startSandboxProvider } from '../../apps/sandbox-provider/src/sandbox-provider';
import type { SandboxEffects } from '../chaos/cluster';
import { ADMIN_DATABASE_URL } from '../support/services';
import { DbosPeer, PeerOutcome, startDbosPeer } from './dbos-peer';

/** The benchmark's DBOS peer against a database of its own and an in-process sandbox provider. */
describe('the DBOS peer of the benchmark', () => {
  const database = `verity_dbospeer_${randomBytes(4).toString('hex')}`;
  let provider: SandboxProvider;
  let peer: DbosPeer;

  beforeAll(async () => {
    const admin = new Client({ connectionString: ADMIN_DATABASE_URL });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${database}`);
    await admin.end();
    provider = await startSandboxProvider({ port: 0 });
    const url = new URL(ADMIN_DATABASE_URL);
    url.pathname = `/${database}`;
    peer = await startDbosPeer({
      systemDatabaseUrl: url.toString(),
      env: { NODE_ENV: 'test', SANDBOX_URL: provider.url },
      port: 0,
    });
  });

  afterAll(async () => {
    await peer?.stop();
    await provider?.close();
    const admin = new Client({ connectionString: ADMIN_DATABASE_URL });
    await admin.connect();
    await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
    await admin.end();
  });

  async function submit(reference: string): Promise<{ id: string; outcome: PeerOutcome }> {
    const res = await fetch(`${peer.url}/charges`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ amount: 1250, currency: 'EUR', reference, wait: true }),
    });
    expect(res.status).toBe(200);
    return (await res.json()) as { id: string; outcome: PeerOutcome };
  }

  const effects = async () => (await (await fetch(`${provider.url}/__effects`)).json()) as SandboxEffects;
  const requests = async () => (await (await fetch(`${provider.url}/__requests`)).json()) as WireLog;

  it('charges once with the workflow id as the Idempotency-Key, reads the charge back and ends VERIFIED', async () => {
    const { id, outcome } = await submit('peer-once');
    expect(outcome).toMatchObject({ status: 'VERIFIED', reads: 1 });
    const report = await effects();
    expect(report.charges['peer-once']).toMatchObject({ count: 1, amounts: [1250] });
    expect(outcome.status === 'VERIFIED' && outcome.chargeId).toBe(report.charges['peer-once'].ids[0]);
    const posts = (await requests()).requests.filter((r) => r.method === 'POST' && r.reference === 'peer-once');
    expect(posts.map((r) => [r.idempotency_key, r.outcome])).toEqual([[id, 'applied']]);

    // The same submission again is the same workflow: DBOS answers its recorded outcome and nothing is sent.
    const again = await submit('peer-once');
    expect(again).toEqual({ id, outcome });
    expect((await effects()).charges['peer-once'].count).toBe(1);
    expect((await requests()).requests.filter((r) => r.reference === 'peer-once')).toHaveLength(2);
    expect(report.duplicates).toEqual([]);
  });

  it("reads again on Verity's backoff while the provider's replica does not show the charge yet", async () => {
    const faults = await fetch(`${provider.url}/__faults`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ replica_lag_ms: 400 }),
    });
    expect(faults.ok).toBe(true);
    const { outcome } = await submit('peer-lagging');
    expect(outcome.status).toBe('VERIFIED');
    // Absent inside the settle window is never a verdict: read at once, after 250 ms, then found after 750 ms.
    expect(outcome.reads).toBeGreaterThanOrEqual(2);
    const reads = (await requests()).requests.filter((r) => r.method === 'GET' && r.reference === 'peer-lagging');
    expect(reads.length).toBe(outcome.reads);
    expect((await effects()).charges['peer-lagging'].count).toBe(1);
  });
});
