import type { CallHandler, ExecutionContext } from '@nestjs/common';
import { TenantConnectors, answerRedactor } from '@verity/connectors';
import { lastValueFrom, of, throwError } from 'rxjs';
import { Problem } from '../problem/problem';
import { RedactSecretValues } from './redact-answers';

const VALUE = 'value-x-Kq83vW';

/** The tenant's secrets as TenantConnectors reads them, counting the reads; `fails`: the read throws that. */
function connectors(fails?: Error) {
  const reads: string[] = [];
  const stub = {
    secretsMoment: () => 0,
    answerRedactorOf: async (tenantId: string) => {
      reads.push(tenantId);
      if (fails) throw fails;
      return answerRedactor({ late_token: VALUE });
    },
  };
  return { reads, interceptor: new RedactSecretValues(stub as unknown as TenantConnectors) };
}

function contextOf(principal: { tenantId: string | null } | undefined): ExecutionContext {
  return { switchToHttp: () => ({ getRequest: () => ({ principal }) }) } as unknown as ExecutionContext;
}

const answering = (answer: unknown): CallHandler => ({ handle: () => of(answer) });
const throwing = (error: unknown): CallHandler => ({ handle: () => throwError(() => error) });

describe('RedactSecretValues', () => {
  const tenant = { tenantId: 'acme' };

  it("replaces the tenant's secret values in the answer's strings, with one read of its secrets", async () => {
    const { reads, interceptor } = connectors();
    const answer = { id: 'exe_1', params: { reference: `order-${VALUE}`, amount: 1250 }, list: [VALUE] };
    const sent = await lastValueFrom(interceptor.intercept(contextOf(tenant), answering(answer)));
    expect(sent).toEqual({
      id: 'exe_1',
      params: { reference: 'order-{{secret:late_token}}', amount: 1250 },
      list: ['{{secret:late_token}}'],
    });
    expect(reads).toEqual(['acme']);
  });

  it('reads nothing for a caller of no tenant, nor for a handler that wrote its own answer', async () => {
    const { reads, interceptor } = connectors();
    const answer = { url: `https://h/${VALUE}` };
    for (const principal of [undefined, { tenantId: null }]) {
      expect(await lastValueFrom(interceptor.intercept(contextOf(principal), answering(answer)))).toBe(answer);
    }
    expect(await lastValueFrom(interceptor.intercept(contextOf(tenant), answering(undefined)))).toBeUndefined();
    expect(reads).toEqual([]);
  });

  it("redacts a problem's detail and members (what is on file), keeping its status, code and headers", async () => {
    const { interceptor } = connectors();
    const problem = Problem.conflict('effect-exists', `the source shows ${VALUE}`, {
      read_back: { kind: 'found', evidence: { record: { note: VALUE } } },
    });
    const withHeaders = new Problem(409, problem.code, problem.title, problem.detail, problem.extras, { 'x-a': '1' });
    const thrown = await lastValueFrom(interceptor.intercept(contextOf(tenant), throwing(withHeaders))).catch(
      (error: unknown) => error,
    );
    expect(thrown).toBeInstanceOf(Problem);
    const redacted = thrown as Problem;
    expect(JSON.stringify(redacted.extras)).not.toContain(VALUE);
    expect(redacted).toMatchObject({
      status: 409,
      code: 'effect-exists',
      title: problem.title,
      detail: 'the source shows {{secret:late_token}}',
      extras: { read_back: { kind: 'found', evidence: { record: { note: '{{secret:late_token}}' } } } },
      headers: { 'x-a': '1' },
    });
    expect(redacted.message).not.toContain(VALUE);
  });

  it('gives any other error on as it is', async () => {
    const { interceptor } = connectors();
    const error = new Error('boom');
    await expect(lastValueFrom(interceptor.intercept(contextOf(tenant), throwing(error)))).rejects.toBe(error);
  });

  it("answers the read's failure instead of a problem it cannot redact; an outage's 5xx is given as it is", async () => {
    const down = new Error('database unavailable');
    const { interceptor } = connectors(down);
    const conflict = Problem.conflict('effect-exists', `the source shows ${VALUE}`);
    await expect(lastValueFrom(interceptor.intercept(contextOf(tenant), throwing(conflict)))).rejects.toBe(down);
    const outage = new Problem(503, 'database-unavailable', 'Database unavailable');
    await expect(lastValueFrom(interceptor.intercept(contextOf(tenant), throwing(outage)))).rejects.toBe(outage);
    // An answer is never sent unredacted either.
    await expect(lastValueFrom(interceptor.intercept(contextOf(tenant), answering({ url: VALUE })))).rejects.toBe(down);
  });
});
