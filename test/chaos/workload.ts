/**
 * What the chaos run submits: a reproducible mix (seeded) of the shapes agents send — payments that can be read back,
 * SMS that cannot, chains with depends_on, payments held for approval, and explicit declines — and the fault rules
 * the sandbox provider applies to every send.
 */
import type { OperationRequest, SubmissionRequest } from '@verity/sdk';

export type Shape = 'payment' | 'sms' | 'chain' | 'approval' | 'decline';

/** Share of executions per shape (chains carry two operations, the rest one). */
const MIX: [Shape, number][] = [
  ['payment', 0.3],
  ['sms', 0.25],
  ['chain', 0.25],
  ['approval', 0.12],
  ['decline', 0.08],
];

export interface PlannedExecution {
  index: number;
  shape: Shape;
  idempotencyKey: string;
  body: SubmissionRequest;
  /** Payment references and SMS client_refs of this execution: the keys of its effects in GET /__effects. */
  references: string[];
  clientRefs: string[];
  operations: number;
}

function pick(random: () => number): Shape {
  let r = random();
  for (const [shape, share] of MIX) {
    if (r < share) return shape;
    r -= share;
  }
  return 'payment';
}

/** Executions until `operations` operations are planned (the last chain may overshoot by one). */
export function planWorkload(operations: number, runId: string, random: () => number): PlannedExecution[] {
  const planned: PlannedExecution[] = [];
  let total = 0;
  for (let index = 0; total < operations; index += 1) {
    const shape = pick(random);
    const tag = `${runId}-${index}`;
    const amount = 100 + Math.floor(random() * 9900);
    const charge = (reference: string, extra: Partial<OperationRequest> = {}): OperationRequest => ({
      key: 'charge',
      connector: 'sandbox.payments',
      action: 'charge',
      params: { amount, currency: 'EUR', reference },
      ...extra,
    });
    const sms = (clientRef: string, extra: Partial<OperationRequest> = {}): OperationRequest => ({
      key: 'notify',
      connector: 'sandbox.sms',
      action: 'send',
      params: { to: '+15550100', body: `Receipt ${tag}`, client_ref: clientRef },
      ...extra,
    });
    let ops: OperationRequest[];
    const references: string[] = [];
    const clientRefs: string[] = [];
    switch (shape) {
      case 'payment':
        references.push(`pay-${tag}`);
        ops = [charge(references[0], { expected_state: { charged: false } })];
        break;
      case 'sms':
        clientRefs.push(`sms-${tag}`);
        ops = [sms(clientRefs[0])];
        break;
      case 'chain':
        references.push(`pay-${tag}`);
        clientRefs.push(`sms-${tag}`);
        ops = [charge(references[0]), sms(clientRefs[0], { depends_on: ['charge'] })];
        break;
      case 'approval':
        references.push(`pay-${tag}`);
        ops = [charge(references[0], { requires_approval: true })];
        break;
      case 'decline':
        references.push(`decline-${tag}`);
        ops = [charge(references[0])];
        break;
    }
    planned.push({
      index,
      shape,
      idempotencyKey: `chaos-${tag}`,
      body: {
        agent_id: 'chaos-agent',
        intent: `chaos ${shape} ${index}`,
        deadline_seconds: 3600,
        operations: ops,
      } satisfies SubmissionRequest,
      references,
      clientRefs,
      operations: ops.length,
    });
    total += ops.length;
  }
  return planned;
}

export const FAULT_KINDS = [
  'timeout_after_commit',
  'reset_after_commit',
  'error_after_commit',
  'drop_before_commit',
  'reject',
] as const;

/**
 * Rules for both send endpoints so that a send meets *some* fault with probability `probability`, split evenly
 * between the five kinds. The sandbox tries rules in order with an independent draw each, so rule i carries the
 * conditional probability share / (1 - i·share).
 */
export function faultRules(probability: number, replicaLagMs: number) {
  const share = probability / FAULT_KINDS.length;
  const rules: { method: string; path: string; fault: (typeof FAULT_KINDS)[number]; probability: number }[] = [];
  for (const path of ['/v1/charges', '/v1/messages']) {
    FAULT_KINDS.forEach((fault, i) => {
      rules.push({ method: 'POST', path, fault, probability: Math.min(1, share / (1 - i * share)) });
    });
  }
  return { rules, replica_lag_ms: replicaLagMs, read_fault: null };
}
