import type { ServerResponse } from 'node:http';
import type { StreamEndReason } from './stream-end';

/** One event of the log, as the stream sends it. False: the client has not taken it yet (see drained). */
export function writeEvent(res: ServerResponse, view: { id: string; type: string }): boolean {
  return res.write(`id: ${view.id}\nevent: ${view.type}\ndata: ${JSON.stringify(view)}\n\n`);
}

/** A comment line that keeps the connection alive. Not on top of what a client still has to take (drained). */
export function writeHeartbeat(res: ServerResponse): void {
  if (!res.writableNeedDrain) res.write(': heartbeat\n\n');
}

/** The stream's last event: why it ends. */
export function writeEnd(res: ServerResponse, reason: StreamEndReason): void {
  res.write(`event: end\ndata: ${JSON.stringify({ reason })}\n\n`);
}
