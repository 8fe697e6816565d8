// eslint-disable-next-line no-restricted-imports -- a test of the browser code's rendering; the server still never imports it
import { shown } from './client/shown-text';

/**
 * Text stored before the API refused hidden characters (params, an intent, evidence, a reason, the policy's names) is
 * rendered by the console through `h()`, whose text children and JSON blocks pass through `shown`: a bidi control or
 * an invisible character reaches the page as its escape, never as a character that reorders or hides what is read.
 */
describe('console: stored text is shown with its hidden characters escaped', () => {
  it.each([
    ['/pay/\u202eelgoog', '/pay/\\u202eelgoog'],
    ['pay\u2066-team\u2069', 'pay\\u2066-team\\u2069'],
    ['pay\u200bments', 'pay\\u200bments'],
    ['a\u00adb\ufeffc', 'a\\u00adb\\ufeffc'],
    ['tag\u{e0041}', 'tag\\u{e0041}'],
    ['a\u0085b\u2028c', 'a\\u0085b\\u2028c'],
  ])('%j is shown as %s', (text, escaped) => expect(shown(text)).toBe(escaped));

  it('keeps tab and line breaks (evidence and JSON have lines) and the rest of the text as it is', () => {
    const evidence = 'provider dashboard:\n\tno charge for caf\u00e9 \u{1f600}\r\n';
    expect(shown(evidence)).toBe(evidence);
    const json = JSON.stringify({ url: 'https://api.example.com/pay/\u202eelgoog' }, null, 2);
    expect(shown(json)).toBe('{\n  "url": "https://api.example.com/pay/\\u202eelgoog"\n}');
  });

  it('is idempotent (a block passed twice reads the same)', () =>
    expect(shown(shown('a\u202eb'))).toBe(shown('a\u202eb')));
});
