// eslint-disable-next-line no-restricted-imports -- a test of the browser code's filters; the server still never imports it
import { filtersFromSearch } from './client/queue-filters';

describe('console: the queues page reads its filters from its URL', () => {
  it.each(['?q=+', '?q=%20%20', '?q=', '?q=%09%0A', ''])('a blank search (%j) searches nothing', (search) => {
    expect(filtersFromSearch(search).q).toBe('');
  });

  it('a search is trimmed as the search box trims what is typed', () => {
    expect(filtersFromSearch('?q=+op_123+').q).toBe('op_123');
    expect(filtersFromSearch('?q=%20order%201%20').q).toBe('order 1');
  });

  it('the other filters are read as they are', () => {
    expect(filtersFromSearch('?connector=sandbox.sms&reason=SOURCE_UNREACHABLE&escalated=true&q=x')).toEqual({
      connector: 'sandbox.sms',
      q: 'x',
      reason: 'SOURCE_UNREACHABLE',
      escalated: true,
    });
    expect(filtersFromSearch('?escalated=yes')).toEqual({ connector: '', q: '', reason: '', escalated: false });
  });
});
