import { secretValueErrors } from './secret-values';

describe('secretValueErrors: fields that would store one of the tenant’s secret values', () => {
  it('finds a value written out, in any field, also inside text and JSON', () => {
    const secrets = { crm_token: 'tok_0123456789' };
    expect(
      secretValueErrors(
        [
          ['params', { headers: { authorization: 'Bearer tok_0123456789' } }],
          ['intent', 'charge with tok_0123456789'],
          ['agent_id', 'bot'],
        ],
        secrets,
      ).map((e) => [e.field, e.rule]),
    ).toEqual([
      ['params', 'secret_value'],
      ['intent', 'secret_value'],
    ]);
  });

  // A value that is also a part of the placeholder's own text ("secret", a name's letters) was found in every operation
  // that named a secret as it should: every such submission was refused, told to write the placeholder it had written.
  it('does not find a value in a {{secret:NAME}} placeholder, which names a secret and holds none', () => {
    for (const value of ['secret', 'secret:', '{{secret', 'crm_token', 'm_to', 'secret:crm_token']) {
      const params = {
        headers: { authorization: 'Bearer {{secret:crm_token}}', 'x-other': '{{ secret:crm_token }}' },
      };
      expect({ value, errors: secretValueErrors([['params', params]], { word: value }) }).toEqual({
        value,
        errors: [],
      });
    }
  });

  it('still finds a value written beside a placeholder, or split by one', () => {
    const secrets = { word: 'secret' };
    expect(secretValueErrors([['params', { note: 'a secret {{secret:x}}' }]], secrets)).toHaveLength(1);
    expect(secretValueErrors([['params', { note: '{{secret:x}}secret' }]], secrets)).toHaveLength(1);
    // Taken out, a placeholder leaves what stood on either side apart: "sec{{secret:x}}ret" holds no "secret".
    expect(secretValueErrors([['params', { note: 'sec{{secret:x}}ret' }]], secrets)).toEqual([]);
  });
});
