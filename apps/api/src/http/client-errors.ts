import { randomUUID } from 'node:crypto';
import { STATUS_CODES, type Server } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from '@verity/platform';
import { type ProblemCode, problemType } from '../problem/problem';

interface ClientErrorAnswer {
  status: number;
  code: ProblemCode;
  title: string;
  detail: string;
}

/** The parser's codes Node answers with a status of its own; every other refusal is a 400 (see clientErrorAnswer). */
const ANSWER_OF_PARSER_CODE = new Map<string, ClientErrorAnswer>([
  [
    'HPE_HEADER_OVERFLOW',
    {
      status: 431,
      code: 'bad-request',
      title: 'Request header fields too large',
      detail: 'the request line and headers together must stay under 16 KiB',
    },
  ],
  [
    'ERR_HTTP_REQUEST_TIMEOUT',
    { status: 408, code: 'request-timeout', title: 'Request timeout', detail: 'the request did not arrive in time' },
  ],
]);

const MALFORMED_REQUEST: ClientErrorAnswer = {
  status: 400,
  code: 'bad-request',
  title: 'Malformed HTTP request',
  detail:
    'the request is not well-formed HTTP/1.1: a byte HTTP does not allow in the request line or a header ' +
    '(percent-encode it), or a body whose framing cannot be read',
};

/** What Node's HTTP parser refused, as the problem Verity answers (Node's own statuses: 431, 408, else 400). */
export function clientErrorAnswer(errorCode: string | undefined): ClientErrorAnswer {
  return (errorCode !== undefined && ANSWER_OF_PARSER_CODE.get(errorCode)) || MALFORMED_REQUEST;
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
    'content-type: application/problem+json; charset=utf-8',
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
 * with no body. Answered here like every other refusal: problem+json with a request id (logged with the parser's
 * code, so the id a caller quotes can be found). The connection is closed: after a parse error nobody can tell where
 * the next request would begin.
 *
 * Not answered at all while a request on the same connection is still being handled (a pipelined request, or a
 * body whose framing broke after its route began): the refusal would read as that request's answer, though it may
 * have done what it asked. The connection is cut instead, and the caller knows only that it does not know.
 */
export function answerClientErrors(server: Server, logger: Logger): void {
  server.on('clientError', (error: NodeJS.ErrnoException, socket: Duplex) => {
    const inFlight = (socket as Duplex & { _httpMessage?: unknown })._httpMessage;
    if (error.code === 'ECONNRESET' || !socket.writable || inFlight) {
      socket.destroy();
      return;
    }
    const requestId = randomUUID();
    const answer = clientErrorAnswer(error.code);
    logger.debug({ requestId, code: error.code, status: answer.status }, 'request refused by the HTTP parser');
    socket.end(clientErrorResponse(answer, requestId));
    // http.Server sockets allow half-open connections: without this one would stay open until the client closed it.
    (socket as Duplex & { destroySoon?: () => void }).destroySoon?.();
  });
}
