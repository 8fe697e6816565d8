import { InitialSchema1764460000000 } from './1764460000000-initial-schema';
import { SweepLog1764460100000 } from './1764460100000-sweep-log';

/** In order. Add a new timestamped class for every schema change; never edit one that has shipped. */
export const MIGRATIONS = [InitialSchema1764460000000, SweepLog1764460100000];
