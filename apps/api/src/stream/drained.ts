import type { Writable } from 'node:stream';

/**
 * Backpressure for a stream whose client reads at its own pace. `write` buffers whatever the socket has not taken; a
 * client that stops reading would make every event of a long history pile up in this process's heap (a few paused
 * streams took the API past its heap limit). So after a write that filled the buffer, the writer waits here until the
 * client has taken it — at most `ms`. False: the client did not (or left); the caller ends the stream, and the client
 * resumes from its Last-Event-ID when it comes back, with no gap and no duplicate.
 */
export function drained(out: Writable, ms: number): Promise<boolean> {
  if (!out.writableNeedDrain) return Promise.resolve(!out.destroyed);
  return new Promise((resolve) => {
    const done = (ok: boolean) => {
      clearTimeout(timer);
      out.off('drain', onDrain);
      out.off('close', onClose);
      resolve(ok);
    };
    const onDrain = () => done(true);
    const onClose = () => done(false);
    const timer = setTimeout(() => done(false), ms);
    out.on('drain', onDrain);
    out.on('close', onClose);
  });
}
