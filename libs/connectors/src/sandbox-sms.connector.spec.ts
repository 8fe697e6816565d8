import { createServer } from 'node:http';
import { OperationStatus } from '@verity/status-model';
import { smsToSend } from '../../../test/support/connector-operations';
import { endlessAnswerServer } from '../../../test/support/endless-answer';
import { serveDuringDescribe } from '../../../test/support/local-server';
import { SandboxSmsConnector } from './sandbox-sms.connector';
import { redactingSecrets } from './secret-redaction';
import { KEPT_DEPTH_CUT } from './storable-text';

/** The provider of the enclosing describe: every message accepted (201) with the JSON `answer()` gives then. */
const providerAccepting = (answer: () => string) =>
  serveDuringDescribe(() =>
    createServer((req, res) => {
      req.resume();
      req.on('end', () => res.writeHead(201, { 'content-type': 'application/json' }).end(answer()));
    }),
  );

describe('sandbox.sms sends answered with JSON that reads two ways', () => {
  let answer = '';
  const provider = providerAccepting(() => answer);
  const sms = new SandboxSmsConnector();
  const send = () => sms.send(smsToSend('op_sms'), { sandboxUrl: provider.url, timeoutMs: 2000 });

  // The message's id is the one name a person has to look the message up at the provider: read last-wins (or rounded),
  // it names another message.
  it.each([
    ['an id named twice', '{"id":"msg_a","id":"msg_b"}'],
    ['an id a double rounds', '{"id":12345678901234567891}'],
  ])('keeps no id from %s (the send is acknowledged all the same)', async (_, body) => {
    answer = body;
    const outcome = await send();
    expect(outcome.status).toBe(OperationStatus.ACKNOWLEDGED);
    expect((outcome as { providerRef?: { id?: unknown } }).providerRef?.id).toBeUndefined();
  });

  it('keeps the id written once', async () => {
    answer = '{"id":"msg_a","note":"x","note":"y"}';
    await expect(send()).resolves.toMatchObject({ status: OperationStatus.ACKNOWLEDGED, providerRef: { id: 'msg_a' } });
  });
});

describe('sandbox.sms sends answered with a body that never ends', () => {
  const provider = endlessAnswerServer(201);
  const local = serveDuringDescribe(() => provider.server);

  it('is acknowledged with no message id, answered at the size limit (not the timeout), the connection closed', async () => {
    const outcome = await new SandboxSmsConnector().send(
      smsToSend('op_sms_endless'),
      // Far beyond the test's own timeout: only a connector that stops reading at the limit answers within it.
      { sandboxUrl: local.url, timeoutMs: 60_000 },
    );
    // The 201 is the provider's acceptance; only the message id its body would have named is lost.
    expect(outcome).toMatchObject({
      status: OperationStatus.ACKNOWLEDGED,
      detail: expect.stringContaining('larger than'),
    });
    expect((outcome as { providerRef?: { id?: unknown } }).providerRef?.id).toBeUndefined();
    await provider.closed[0];
  }, 20_000);
});

describe("sandbox.sms sends answered with an id shaped like Verity's depth cut", () => {
  let answer = '';
  const provider = providerAccepting(() => answer);
  // Through the one door every connector result passes (the registry's), where results are cut at MAX_KEPT_DEPTH.
  const sms = redactingSecrets(new SandboxSmsConnector());
  const send = async () => {
    const outcome = await sms.send(smsToSend('op_sms_mark'), { sandboxUrl: provider.url, timeoutMs: 2000 });
    if (outcome.status !== OperationStatus.ACKNOWLEDGED) throw new Error(`not acknowledged: ${outcome.detail}`);
    return outcome.providerRef.id;
  };

  it('keeps an id that nests too deep as the cut marker', async () => {
    answer = `{"id":${'['.repeat(5_000)}${']'.repeat(5_000)}}`;
    expect(JSON.stringify(await send())).toContain(JSON.stringify(KEPT_DEPTH_CUT));
  });

  it("keeps the provider's own object of the marker's shape as something the marker never is", async () => {
    answer = JSON.stringify({ id: { list: [KEPT_DEPTH_CUT] } });
    const id = await send();
    expect(JSON.stringify(id)).not.toContain(JSON.stringify(KEPT_DEPTH_CUT));
    expect(id).toMatchObject({ list: [expect.any(Object)] });
  });
});
