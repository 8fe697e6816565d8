/** The execution every benchmark submits: one sandbox charge under `reference` (the load client's and intake's). */
export function submission(reference: string) {
  return {
    agent_id: 'bench-agent',
    intent: 'benchmark charge',
    operations: [
      {
        key: 'charge',
        connector: 'sandbox.payments',
        action: 'charge',
        params: { amount: 1250, currency: 'EUR', reference },
      },
    ],
  };
}
