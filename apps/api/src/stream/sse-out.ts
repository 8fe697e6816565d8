import type { ServerResponse } from 'node:http';
import type { StreamEndReason } from './stream-end';

/**
 * Whether the response can still take a write. Shutdown (closeAll) ends a stream with `res.end()` while its page may
 * be being written or a heartbeat is due; until the client has taken the end the response is ended but neither
 * finished nor destroyed, and a write in that window is refused with ERR_STREAM_WRITE_AFTER_END, emitted as an
 * 'error' on a response nothing listens to (an uncaught exception in the API). Every write below asks first.
 */
export function canWrite(res: ServerResponse): boolean {
  return !res.writableEnded && !res.destroyed;
}

/** One event of the log, as the stream sends it. False: not taken yet (see drained), or not written (canWrite). */
export function writeEvent(res: ServerResponse, view: { id: string; type: string }): boolean {
  if (!canWrite(res)) return false;
  return res.write(`id: ${view.id}\nevent: ${view.type}\ndata: ${JSON.stringify(view)}\n\n`);
}

/** A comment line that keeps the connection alive. Not on top of what a client still has to take (drained). */
export function writeHeartbeat(res: ServerResponse): void {
  if (canWrite(res) && !res.writableNeedDrain) res.write(': heartbeat\n\n');
}

/** The stream's last event: why it ends. */
export function writeEnd(res: ServerResponse, reason: StreamEndReason): void {
  if (canWrite(res)) res.write(`event: end\ndata: ${JSON.stringify({ reason })}\n\n`);
}
