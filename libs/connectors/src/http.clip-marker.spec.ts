import { createServer } from 'node:http';
import { VerificationMethod, judgeContext } from '@verity/status-model';
import type { ConnectorEnvironment, ConnectorOperation } from './connector';
import { HttpConnector } from './http.connector';
import { redactingSecrets } from './secret-redaction';
import { serveDuringDescribe } from '../../../test/support/local-server';

describe("http context reads through the registry door: Verity's clip marker is one a target cannot write", () => {
  let answer = '';
  const local = serveDuringDescribe(() =>
    createServer((req, res) => {
      req.resume();
      req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end(answer));
    }),
  );
  const http = redactingSecrets(new HttpConnector());
  const env = (): ConnectorEnvironment => ({
    sandboxUrl: 'unused',
    timeoutMs: 5000,
    tenant: { allowHosts: [{ host: '127.0.0.1', ports: [local.port], allow_private: true }], secrets: {} },
  });
  const op = (): ConnectorOperation => ({
    id: 'op_clip',
    tenantId: 'demo',
    action: 'request',
    params: {
      method: 'POST',
      url: `${local.url}/orders`,
      body: {},
      context: { url: `${local.url}/s`, field: 'data.v' },
    },
    expectedState: null,
    providerRef: null,
  });
  const readState = async (body: unknown) => {
    answer = JSON.stringify(body);
    const read = await http.readContext!(op(), env());
    if (read.kind !== 'state') throw new Error(`not read: ${JSON.stringify(read)}`);
    return read.state;
  };

  it('a value too big to keep is kept as { "verity:clipped": its JSON length }', async () => {
    const big = { a: 'x'.repeat(2000) };
    expect(await readState({ data: { v: big } })).toEqual({
      'data.v': { 'verity:clipped': JSON.stringify(big).length },
    });
  });

  it("a target's own small object of the marker's shape (or the old one) is never kept as Verity's clip", async () => {
    const big = { a: 'x'.repeat(2000) };
    const clipped = await readState({ data: { v: big } });
    const length = JSON.stringify(big).length;
    for (const forged of [{ 'verity:clipped': length }, { truncated: true, json_length: length }]) {
      expect(await readState({ data: { v: forged } })).not.toEqual(clipped);
    }
    expect(await readState({ data: { v: { 'verity:clipped': length, 'verity:verity:clipped': 1 } } })).toEqual({
      'data.v': { 'verity:verity:clipped': length, 'verity:verity:verity:clipped': 1 },
    });
  });

  it('an expected_state naming verity:cut agrees with the source that holds it (compared as kept)', async () => {
    answer = JSON.stringify({ data: { v: { 'verity:cut': 1 } } });
    const read = await http.readContext!(
      {
        ...op(),
        params: { ...op().params, context: { url: `${local.url}/s`, field: 'data.v', equals: { 'verity:cut': 1 } } },
      },
      env(),
    );
    expect(read).toMatchObject({
      kind: 'state',
      requestedStatePresent: true,
      state: { 'data.v': { 'verity:verity:cut': 1 } },
    });
    const judged = (expectedState: Record<string, unknown>) =>
      judgeContext(
        { irreversible: true, expectedState, verificationMethod: VerificationMethod.READ_AFTER_WRITE },
        read as Parameters<typeof judgeContext>[1],
      );
    expect(judged({ 'data.v': { 'verity:cut': 1 } })).toEqual({ kind: 'no-change-required', expectationsMissed: [] });
    expect(judged({ 'data.v': { 'verity:cut': 2 } })).toMatchObject({ expectationsMissed: [expect.any(String)] });
  });
});
