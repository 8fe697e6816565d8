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
      expect({
        value,
        errors: secretValueErrors([['params', params]], { crm_token: 'tok_0123456789', word: value }),
      }).toEqual({
        value,
        errors: [],
      });
    }
  });

  it('still finds a value written beside a placeholder, or split by one', () => {
    const secrets = { word: 'secret', x: 'tok_0123456789' };
    expect(secretValueErrors([['params', { note: 'a secret {{secret:x}}' }]], secrets)).toHaveLength(1);
    expect(secretValueErrors([['params', { note: '{{secret:x}}secret' }]], secrets)).toHaveLength(1);
    // Taken out, a placeholder leaves what stood on either side apart: "sec{{secret:x}}ret" holds no "secret".
    expect(secretValueErrors([['params', { note: 'sec{{secret:x}}ret' }]], secrets)).toEqual([]);
  });

  // Only a placeholder that names one of the tenant's secrets holds none. One that names no secret is text stored as
  // written (a body, an intent, a key, a URL: nothing is put in its place), and its "name" can be any token's value.
  it('finds a value written as the name of a placeholder that names none of the tenant’s secrets', () => {
    const secrets = { crm_token: 'sk_live_0123456789abcdef' };
    for (const text of ['{{secret:sk_live_0123456789abcdef}}', 'Bearer {{ secret:sk_live_0123456789abcdef }}']) {
      expect({
        text,
        errors: secretValueErrors(
          [
            ['params', { headers: { authorization: text } }],
            ['intent', text],
          ],
          secrets,
        ).map((e) => e.field),
      }).toEqual({ text, errors: ['params', 'intent'] });
    }
  });

  // A secret value (printable ASCII, braces included) that holds a placeholder of a named secret: the text written is
  // that value, stored as written; what is taken out for the check must not hide it.
  it('finds a value that holds a placeholder, or runs into one', () => {
    for (const value of ['pre{{secret:crm_token}}post', 'x{{secr', 'ken}}yz']) {
      const secrets = { crm_token: 'tok_0123456789', odd: value };
      const text = `pre{{secret:crm_token}}post x{{secret:crm_token}}yz`;
      expect({ value, errors: secretValueErrors([['params', { note: text }]], secrets).length }).toEqual({
        value,
        errors: 1,
      });
    }
  });

  // The secrets of every connector are read as `connector:NAME` (secretsOfTenant: a retry, a reason, the evidence); an
  // operation names the secret by its NAME alone.
  it('takes out a placeholder naming a secret read as connector:NAME', () => {
    const secrets = { 'http:crm_token': 'tok_0123456789', 'http:word': 'secret' };
    const params = { headers: { authorization: 'Bearer {{secret:crm_token}}' } };
    expect(secretValueErrors([['params', params]], secrets)).toEqual([]);
    expect(
      secretValueErrors([['params', { note: '{{secret:sk_live_0123456789}}' }]], { 'http:x': 'sk_live_0123456789' }),
    ).toHaveLength(1);
  });
});
