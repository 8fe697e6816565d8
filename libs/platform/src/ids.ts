import { randomBytes } from 'node:crypto';

const ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz';

/**
 * Prefixed, time-ordered ids (`exe_`, `op_`, `evt_`): 10 chars of milliseconds then 16 random chars,
 * so ids sort by creation time, which the list endpoint's cursor relies on.
 */
export function newId(prefix: 'exe' | 'op' | 'evt' | 'key' | 'ten' | 'whk' | 'msg'): string {
  let time = Date.now();
  let head = '';
  for (let i = 0; i < 10; i += 1) {
    head = ALPHABET[time % 32] + head;
    time = Math.floor(time / 32);
  }
  const bytes = randomBytes(16);
  let tail = '';
  for (const b of bytes) tail += ALPHABET[b % 32];
  return `${prefix}_${head}${tail}`;
}
