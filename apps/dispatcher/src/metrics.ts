import { metricsRegistry } from '@verity/platform';
import { Counter } from 'prom-client';

/** The dispatcher's own metrics (served on its /metrics with the shared ones of libs/platform). */
export const dispatchRefused = new Counter({
  name: 'verity_dispatch_refused_total',
  help: 'Dispatch jobs refused by the send guard (nothing sent, nothing changed), by reason',
  labelNames: ['reason'] as const,
  registers: [metricsRegistry],
});
