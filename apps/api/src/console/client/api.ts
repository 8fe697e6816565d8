import { win } from './browser';

const KEY_SLOT = 'verity.console.key';

/** The reviewer key lives in this tab's session storage only, and travels in the Authorization header only. */
export const session = {
  key(): string | null {
    return win.sessionStorage.getItem(KEY_SLOT);
  },
  signIn(key: string): void {
    win.sessionStorage.setItem(KEY_SLOT, key);
  },
  signOut(): void {
    win.sessionStorage.removeItem(KEY_SLOT);
  },
};

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly title: string,
    readonly detail: string,
  ) {
    super(detail || title);
  }
}

type Unauthorized = (error: ApiError) => void;
let onUnauthorized: Unauthorized = () => undefined;

/** Called whenever the API refuses the stored key (revoked mid-session): the console signs out. */
export function whenUnauthorized(handler: Unauthorized): void {
  onUnauthorized = handler;
}

function headers(key: string | null, extra: Record<string, string> = {}): Record<string, string> {
  return key ? { authorization: `Bearer ${key}`, ...extra } : extra;
}

async function problemOf(res: Response): Promise<ApiError> {
  let title = res.statusText || `HTTP ${res.status}`;
  let detail = '';
  try {
    const body = (await res.json()) as { title?: string; detail?: string };
    title = body.title ?? title;
    detail = body.detail ?? '';
  } catch {
    // Not problem+json (a proxy's error page): the status line is all there is.
  }
  return new ApiError(res.status, title, detail);
}

export async function api<T>(
  method: 'GET' | 'POST',
  path: string,
  options: { body?: unknown; key?: string; signal?: AbortSignal } = {},
): Promise<T> {
  const key = options.key ?? session.key();
  const res = await fetch(path, {
    method,
    headers: headers(
      key,
      options.body === undefined
        ? { accept: 'application/json' }
        : { 'content-type': 'application/json', accept: 'application/json' },
    ),
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    signal: options.signal,
    credentials: 'omit',
  });
  if (!res.ok) {
    const error = await problemOf(res);
    if (res.status === 401 && options.key === undefined) onUnauthorized(error);
    throw error;
  }
  return (await res.json()) as T;
}

export interface SseFrame {
  id: string | null;
  event: string;
  data: string;
}

/**
 * Reads an SSE response with fetch, because EventSource cannot send the Authorization header and the key must
 * never go in a URL. Parses `id:` / `event:` / `data:` frames per the HTML spec (comments and `retry:` ignored).
 */
export async function readEventStream(
  path: string,
  lastEventId: string | null,
  signal: AbortSignal,
  onFrame: (frame: SseFrame) => void,
): Promise<void> {
  const res = await fetch(path, {
    headers: headers(session.key(), {
      accept: 'text/event-stream',
      ...(lastEventId ? { 'last-event-id': lastEventId } : {}),
    }),
    signal,
    credentials: 'omit',
  });
  if (!res.ok || !res.body) {
    const error = await problemOf(res);
    if (res.status === 401) onUnauthorized(error);
    throw error;
  }
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let frame: SseFrame = { id: null, event: 'message', data: '' };
  let hasData = false;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let newline: number;
    while ((newline = buffer.search(/\r\n|\r|\n/)) >= 0) {
      // A CR at the end of a chunk may be the first half of CRLF: wait for the next chunk to decide.
      if (buffer[newline] === '\r' && newline === buffer.length - 1) break;
      const line = buffer.slice(0, newline);
      buffer = buffer.slice(newline + (buffer.startsWith('\r\n', newline) ? 2 : 1));
      if (line === '') {
        if (hasData) onFrame(frame);
        frame = { id: frame.id, event: 'message', data: '' };
        hasData = false;
        continue;
      }
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'data') {
        frame.data = hasData ? `${frame.data}\n${value}` : value;
        hasData = true;
      } else if (field === 'event') frame.event = value;
      else if (field === 'id' && !value.includes('\0')) frame.id = value;
    }
  }
}
