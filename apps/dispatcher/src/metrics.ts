import { counter } from '@verity/platform';

/** The dispatcher's own metrics (served on its /metrics with the shared ones of libs/platform). */
export const dispatchRefused = counter(
  'verity_dispatch_refused_total',
  'Dispatch jobs refused by the send guard (nothing sent, nothing changed), by reason',
  ['reason'],
);
