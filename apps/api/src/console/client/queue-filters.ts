/** The queues page's filters, as its URL carries them (shareable, they survive a reload). */
export interface Filters {
  connector: string;
  q: string;
  reason: string;
  escalated: boolean;
}

/**
 * The filters a queues page URL's query (`location.search`) names. `q` is trimmed as the page's search box trims what
 * is typed, so a link with a blank search (`?q=+`) searches nothing (the API refuses a blank `q`) rather than showing
 * an error.
 */
export function filtersFromSearch(search: string): Filters {
  const params = new URLSearchParams(search);
  return {
    connector: params.get('connector') ?? '',
    q: (params.get('q') ?? '').trim(),
    reason: params.get('reason') ?? '',
    escalated: params.get('escalated') === 'true',
  };
}
