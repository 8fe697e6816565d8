/**
 * The sandbox provider's own variables, read by the platform config's rule for a whole number (plain decimal digits
 * in a range; unset or empty is the default): `0x10`, `1e3`, ` 5` or `-1` stop start with one line naming the
 * variable, as any Verity process's do. Number() took the first three as 16, 1000 and 5. Read by the provider at
 * start and by `npm start` before it starts anything (a refused value is not fixed by restarting the provider).
 */
import { readVariables, wholeNumberVariable } from '@verity/platform/config';
import { DEFAULT_MAX_EFFECTS, DEFAULT_MAX_WIRE_REQUESTS, DEFAULT_SANDBOX_PORT } from './sandbox-provider';

/** The most effects or requests the provider may be told to keep (each is kept in memory). */
const MAX_KEPT = 10_000_000;

const SETTINGS = {
  SANDBOX_PORT: wholeNumberVariable({ min: 0, max: 65535, default: DEFAULT_SANDBOX_PORT }),
  SANDBOX_MAX_EFFECTS: wholeNumberVariable({ min: 0, max: MAX_KEPT, default: DEFAULT_MAX_EFFECTS }),
  SANDBOX_MAX_REQUESTS: wholeNumberVariable({ min: 0, max: MAX_KEPT, default: DEFAULT_MAX_WIRE_REQUESTS }),
};

export function readSandboxSettings(env: NodeJS.ProcessEnv = process.env) {
  return readVariables(SETTINGS, env);
}
