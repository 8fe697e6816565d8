import type { NextFunction, Request, Response } from 'express';
import { missingHost, unservedTarget } from '@verity/platform';
import { Problem, sendProblem } from '../problem/problem';

/**
 * The answers to what Node's HTTP parser refuses (answerClientErrors, clientErrorAnswer) live in @verity/platform: the
 * workers' ops server gives the same ones. This is the API's answer to an HTTP/1.1 request without Host (missingHost),
 * given as the first middleware after the request id, so it carries one.
 */
export function rejectMissingHost(req: Request, res: Response, next: NextFunction): void {
  const answer = missingHost(req);
  if (answer) {
    res.setHeader('connection', 'close');
    sendProblem(req, res, new Problem(answer.status, answer.code, answer.title, answer.detail));
    return;
  }
  next();
}

/** Every method some resource of the API takes: what `OPTIONS *` (the server as a whole) is answered with. */
export const SERVER_METHODS = 'DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT';

/**
 * A request target that is no path (unservedTarget): `*` with another method than OPTIONS, or an absolute URL naming
 * another host than Host, is a 400 before anything reads Host. `OPTIONS *` asks about the server, not a resource (RFC
 * 9110, section 9.3.7): the router read `*` as `/` and answered 405 as if it were one. Answered 204 with the methods
 * the server implements.
 */
export function checkRequestTarget(req: Request, res: Response, next: NextFunction): void {
  const answer = unservedTarget(req);
  if (answer) {
    sendProblem(req, res, new Problem(answer.status, answer.code, answer.title, answer.detail));
    return;
  }
  if (req.url === '*') {
    res.setHeader('allow', SERVER_METHODS);
    res.status(204).end();
    return;
  }
  next();
}
