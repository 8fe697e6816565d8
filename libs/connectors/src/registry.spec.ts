import { ConnectorRegistry } from './registry';

describe('approval amount declarations', () => {
  it('come from the connectors that declare where their amount is, through the registry’s wrapping', () => {
    expect(new ConnectorRegistry().approvalAmountDeclarations()).toEqual([
      { connector: 'sandbox.payments', amountField: 'amount' },
    ]);
  });
});
