import { randomFillSync } from 'node:crypto';

const ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz';

/**
 * Prefixed, time-ordered ids (`exe_`, `op_`, `evt_`): 10 chars of milliseconds then 16 random chars,
 * so ids sort by creation time, which the list endpoint's cursor relies on.
 */
export function newId(prefix: 'exe' | 'op' | 'evt' | 'key' | 'ten' | 'whk' | 'msg' | 'chg' | 'rcq'): string {
  let time = Date.now();
  let head = '';
  for (let i = 0; i < 10; i += 1) {
    head = ALPHABET[time % 32] + head;
    time = Math.floor(time / 32);
  }
  const bytes = randomTail();
  let tail = '';
  for (const b of bytes) tail += ALPHABET[b % 32];
  return `${prefix}_${head}${tail}`;
}

/**
 * The CSPRNG drawn 4 KiB at a time, as Node's own `randomUUID` does: one system call per 256 ids instead of one per id
 * (a dispatcher makes several ids per operation; in its CPU profile the per-id call was 3 % of its time). The pool is
 * process-local and consumed once: no two ids share bytes.
 */
const RANDOM_POOL = Buffer.alloc(4096);
let poolOffset = RANDOM_POOL.length;

function randomTail(): Buffer {
  if (poolOffset + 16 > RANDOM_POOL.length) {
    randomFillSync(RANDOM_POOL);
    poolOffset = 0;
  }
  const bytes = RANDOM_POOL.subarray(poolOffset, poolOffset + 16);
  poolOffset += 16;
  return bytes;
}
