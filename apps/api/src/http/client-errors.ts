import { randomUUID } from 'node:crypto';
import { STATUS_CODES, type Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { type ProblemCode, problemType } from '../problem/problem';

interface ClientErrorAnswer {
  status: number;
  code: ProblemCode;
  title: string;
  detail: string;
}

/** What Node's HTTP parser refused, as the problem Verity answers (Node's own statuses: 431, 408, else 400). */
export function clientErrorAnswer(errorCode: string | undefined): ClientErrorAnswer {
  if (errorCode === 'HPE_HEADER_OVERFLOW') {
    return {
      status: 431,
      code: 'bad-request',
      title: 'Request header fields too large',
      detail: 'the request line and headers together must stay under 16 KiB',
    };
  }
  if (errorCode === 'ERR_HTTP_REQUEST_TIMEOUT') {
    return {
      status: 408,
      code: 'request-timeout',
      title: 'Request timeout',
      detail: 'the request did not arrive in time',
    };
  }
  return {
    status: 400,
    code: 'bad-request',
    title: 'Malformed HTTP request',
    detail: 'the request line or a header holds bytes HTTP does not allow (percent-encode them)',
  };
}

/** The whole response, as bytes for the socket: there is no request or response object to answer through. */
export function clientErrorResponse(answer: ClientErrorAnswer, requestId: string): string {
  const body = JSON.stringify({
    type: problemType(answer.code),
    title: answer.title,
    status: answer.status,
    detail: answer.detail,
  });
  return [
    `HTTP/1.1 ${answer.status} ${STATUS_CODES[answer.status] ?? 'Error'}`,
    'content-type: application/problem+json',
    `content-length: ${Buffer.byteLength(body)}`,
    `x-request-id: ${requestId}`,
    'connection: close',
    '',
    body,
  ].join('\r\n');
}

/**
 * A request Node's HTTP parser refuses — a byte outside HTTP's grammar in the request line or a header, headers over
 * the size limit, a request that timed out — never reaches express, and Node's default answer is a bare status line
 * with no body. Answered here like every other refusal: problem+json with a request id. The connection is closed:
 * after a parse error nobody can tell where the next request would begin.
 */
export function answerClientErrors(server: Server): void {
  server.on('clientError', (error: NodeJS.ErrnoException, socket: Duplex) => {
    // As Node's own handler: nothing to answer on a reset or closed socket, or once a response has begun on it.
    const started = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent;
    if (error.code === 'ECONNRESET' || !socket.writable || started) {
      socket.destroy();
      return;
    }
    socket.end(clientErrorResponse(clientErrorAnswer(error.code), randomUUID()));
  });
}
