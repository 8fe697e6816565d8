import { Execution, Verity, isExecutionSettled } from '@verity/sdk';
import { executionStatusLine } from '@verity/sdk/mcp';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { getExecution, submit, waitForOp } from './dispatcher-helpers';

/**
 * An operation that moves after its execution ended (the reconciler finds a cancelled execution's charge) owes an
 * evaluation of the criteria, written by the dispatcher's next step. Until then the execution is not settled: the
 * SDK's wait (and the MCP tools' words) must not hand back the outcome that is about to change.
 */
describe('settled waits for the outcome an operation’s late move owes', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'sdkowed', reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  it('a cancelled execution’s charge found VERIFIED: waitForSettled returns the outcome written after it', async () => {
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/charges', fault: 'timeout_after_commit', count: 1 }],
    });
    const created = await submit(stack, [charge(unique('owed'))], {
      criteria: [{ key: 'charged', operation: 'charge', expect_status: 'VERIFIED' }],
    });
    await waitForOp(stack, created.id, 'charge', (op) => op.status === 'UNKNOWN');
    const cancelled = await http<Execution>(stack.apiUrl, 'POST', `/v1/executions/${created.id}/cancel`, {
      key: DEMO.agent,
      body: {},
    });
    expect(cancelled.status).toBe(200);
    // The cancel's advance judged the criteria: pending, the charge still UNKNOWN.
    await waitFor(
      () => getExecution(stack, created.id),
      (e) => e.status === 'cancelled' && /UNKNOWN/.test(e.criteria_results?.[0]?.rationale ?? ''),
      30_000,
      100,
    );
    for (const app of stack.running('dispatcher')) await stack.kill(app, 'SIGKILL');
    await stack.startApp('reconciler');
    const found = await waitForOp(stack, created.id, 'charge', (op) => op.status === 'VERIFIED');
    expect(found.commit).toBe('committed');

    const owed = await getExecution(stack, created.id);
    expect(owed.outcome?.result).toBe('pending');
    expect(isExecutionSettled(owed)).toBe(false);
    expect(executionStatusLine(owed)).toContain('Not settled yet');

    const dx = new Verity({ baseUrl: stack.apiUrl, apiKey: DEMO.agent });
    const waiting = dx.waitForSettled(created.id, { timeoutMs: 60_000 });
    await stack.startApp('dispatcher');
    const settled = await waiting;
    expect(settled.outcome?.result).toBe('satisfied');
    expect(settled.criteria_results?.[0]?.verdict).toBe('pass');
  });
});
