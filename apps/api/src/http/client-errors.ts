import type { NextFunction, Request, Response } from 'express';
import { missingHost } from '@verity/platform';
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
