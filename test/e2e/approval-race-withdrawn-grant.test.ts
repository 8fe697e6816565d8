import { DEMO, Stack, freePort, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { events, expectLegalHistory, getExecution, submit } from './dispatcher-helpers';
import type { ProblemDetails as Problem } from '@verity/sdk';

/**
 * I13 when the winning grant does not stay on the row: reviewers approve one request at once, one grant is written, and
 * the dispatcher withdraws it as stale (here: expired at once) and asks again before the losers have read the row back.
 * Every loser is still told `409 already-decided` naming the grant that won — not that the execution's deadline passed,
 * minutes before it does.
 */
describe('api: losers of an approval race whose winning grant was withdrawn since', () => {
  let stack: Stack;
  /** An API whose grants expire at once (APPROVAL_TTL_MS is read where the grant is written). */
  let shortGrantApi = '';
  beforeAll(async () => {
    stack = await Stack.start({ label: 'apprwithdrawn' });
    const port = await freePort();
    await stack.startApp('api', { PORT: String(port), HOST: '127.0.0.1', APPROVAL_TTL_MS: '1' });
    shortGrantApi = `http://127.0.0.1:${port}`;
  });
  afterAll(async () => stack?.stop());

  it('every loser is 409 already-decided with the winner’s decision; one approval.decided per 2xx', async () => {
    const wrong: string[] = [];
    for (let trial = 0; trial < 8; trial += 1) {
      const execution = await submit(stack, [charge(unique('appr-withdrawn'), { requires_approval: true })]);
      const opId = execution.operations[0].id;
      await waitFor(
        () => getExecution(stack, execution.id),
        (e) => e.operations[0].approval?.state === 'requested',
        20_000,
        50,
      );
      const answers = await Promise.all(
        Array.from({ length: 30 }, () =>
          http<Problem & { decision?: string; decided_by?: string }>(
            shortGrantApi,
            'POST',
            `/v1/operations/${opId}/approval`,
            { key: DEMO.reviewer, body: { decision: 'approve' } },
          ),
        ),
      );
      // The execution is still far from its deadline (600 s) while the answers came back.
      const after = await getExecution(stack, execution.id);
      expect(Date.parse(after.deadline_at)).toBeGreaterThan(Date.now() + 60_000);
      const won = answers.filter((a) => a.status === 200);
      expect(won.length).toBeGreaterThanOrEqual(1);
      for (const lost of answers.filter((a) => a.status !== 200)) {
        if (
          lost.status !== 409 ||
          !lost.body.type?.endsWith('/already-decided') ||
          lost.body.decision !== 'approve' ||
          typeof lost.body.decided_by !== 'string'
        ) {
          wrong.push(`trial ${trial}: ${lost.status} ${lost.body.type} ${lost.body.detail}`);
        }
      }
      await http(stack.apiUrl, 'POST', `/v1/executions/${execution.id}/cancel`, { key: DEMO.agent, body: {} });
      const log = await events(stack, execution.id);
      expectLegalHistory(log);
      expect(log.filter((e) => e.type === 'approval.decided')).toHaveLength(won.length);
    }
    expect(wrong).toEqual([]);
  });
});
