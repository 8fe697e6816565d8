// First: tracing patches pg, ioredis and http as they are first required (see ./tracing).
import { tracing } from './tracing';
import 'reflect-metadata';
import type { IncomingMessage, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { NestFactory } from '@nestjs/core';
import { SwaggerModule } from '@nestjs/swagger';
import { DOCS_ROUTE, serveOnlyDocsPage } from './http/docs-files';
import { ExpressAdapter, NestExpressApplication } from '@nestjs/platform-express';
import express from 'express';
import { NEWER_SCHEMA, openAppDataSource, openDataSource, runMigrationsLocked, seedDemo } from '@verity/persistence';
import {
  LOGGER,
  Logger,
  StopDeadline,
  answerClientErrors,
  assertNoEviction,
  onShutdown,
  runMain,
  startProcess,
  stopWhileStarting,
  linkCallerTrace,
} from '@verity/platform';
import { ApiModule } from './api.module';
import { mountBullBoard, mountBullBoardHeaders } from './bull-board';
import { BODY_LIMIT_BYTES, bodyErrorHandler } from './http/body-errors';
import { checkRequestTarget, rejectMissingHost } from './http/client-errors';
import { refuseDocumentQuery } from './http/no-query';
import { bodyUnread, handOnBody, markBodyUnread, settleChunkedBody } from './http/parse';
import {
  bodyReadTimeout,
  parseWholeQuery,
  rejectOtherCharsets,
  rejectOtherContentCodings,
  rejectPartialPut,
  rejectRepeatedHeaders,
  rejectTransferCodings,
  rejectUnsafeJson,
  rejectUnsafeUrl,
  verifyJsonBytes,
} from './http/hostile-input';
import { requestContext } from './http/request-context';
import { answerHeaders, pageSecurityHeaders } from './http/security-headers';
import { buildOpenApi } from './openapi';
import { StreamService } from './stream/stream.service';
import { CONSOLE_ROUTE, mountConsole } from './console';
import { refuseReadBody } from './http/no-body';
import { McpOriginCheck } from './mcp/mcp-origin';
import { McpWaits } from './mcp/mcp-waits';

async function bootstrap(): Promise<void> {
  const { config, logger } = startProcess('api');
  const started = stopWhileStarting(logger);
  await assertNoEviction(config);
  // The app's own pool, which ApiModule takes over: its first session is the check that Postgres can be used. Its
  // statements are bounded by the stop's deadline once a stop begins.
  const stopDeadline = new StopDeadline();
  const dataSource = await openAppDataSource(config, stopDeadline);
  if (config.RUN_MIGRATIONS || config.SEED_DEMO) {
    // A pool of its own, without the query timeout: a migration may take longer than a request's statement.
    const ds = await openDataSource(config.DATABASE_URL, 2);
    if (config.RUN_MIGRATIONS) {
      const { unknown } = await runMigrationsLocked(ds, { log: logger, timeoutMs: config.MIGRATION_LOCK_TIMEOUT_MS });
      if (unknown.length > 0) logger.warn({ unknown }, NEWER_SCHEMA);
    }
    if (config.SEED_DEMO) await seedDemo(ds.manager);
    await ds.destroy();
  }
  // A route answers only the path the document names. Express would otherwise also route `/x/` (and `/X`) to `/x`:
  // a client resolves a secret named `..` (DELETE …/http/secrets/..) to DELETE …/http/, which clears the connector's
  // allowlist, caps and every secret. Set before the router exists (Nest's adapter creates it at once).
  const routes = express();
  routes.set('strict routing', true);
  routes.set('case sensitive routing', true);
  // Every query parameter is read, however many come before it (see parseWholeQuery).
  routes.set('query parser', parseWholeQuery);
  const app = await NestFactory.create<NestExpressApplication>(
    ApiModule.forRoot(config, dataSource, logger),
    new ExpressAdapter(routes),
    {
      logger: ['error', 'warn'],
      bodyParser: false,
    },
  );
  app.disable('x-powered-by');
  app.set('etag', false);
  // Only the proxies the operator names may say who the client is (X-Forwarded-For); by default nobody may.
  if (config.TRUST_PROXY !== undefined) app.set('trust proxy', config.TRUST_PROXY);
  // Order matters: what every answer says first (nosniff), then the request id (so every refusal carries one), then
  // what no route may receive (see http/hostile-input.ts), then the parser, its problem mapping and the check of what
  // it parsed.
  app.use(answerHeaders);
  // Every answer under Bull Board's path has its policy and Cache-Control, also a refusal below.
  mountBullBoardHeaders(app);
  app.use(requestContext(app.get<Logger>(LOGGER)));
  // A body nothing has acted on yet, until the body checks below hand it on (see answerClientErrors).
  app.use(markBodyUnread);
  // Node's own bare 400 for a missing Host is turned off (answerClientErrors, before the server listens): this is it.
  app.use(rejectMissingHost);
  // Before anything reads Host: an absolute-form target naming another host is refused, and `OPTIONS *` answered.
  app.use(checkRequestTarget);
  // The caller's own trace (its traceparent, never continued) becomes a link on the request's span.
  if (tracing) {
    app.use((req: IncomingMessage, _res: unknown, next: () => void) => {
      linkCallerTrace(req);
      next();
    });
  }
  app.use(rejectUnsafeUrl);
  app.use(rejectRepeatedHeaders);
  // Before anything reads the body: a foreign page's POST to /mcp is 403 whatever its body, and an allowed page's body
  // refusals (below) carry its Access-Control-Allow-Origin.
  app.use(new McpOriginCheck(config).use);
  app.use(rejectTransferCodings);
  app.use(rejectPartialPut);
  app.use(rejectOtherCharsets);
  app.use(rejectOtherContentCodings);
  app.use(bodyReadTimeout(config.BODY_TIMEOUT_MS));
  app.useBodyParser('json', {
    limit: BODY_LIMIT_BYTES,
    type: ['application/json', 'application/*+json'],
    verify: verifyJsonBytes,
  });
  app.use(bodyErrorHandler);
  // A chunked body the parser left unread: whether it has a byte at all (an empty one is no body).
  app.use(settleChunkedBody);
  app.use(rejectUnsafeJson);
  app.use(handOnBody);
  await mountBullBoard(app, config);
  app.use([CONSOLE_ROUTE, '/docs', '/docs-json', '/docs-yaml'], refuseReadBody);
  const consoleMissing = mountConsole(app);
  if (consoleMissing) logger.warn(consoleMissing.message);
  app.use(['/docs', '/docs-json'], pageSecurityHeaders);
  // Only the page and the files it loads: @nestjs/swagger serves the whole swagger-ui-dist directory.
  app.use(DOCS_ROUTE, serveOnlyDocsPage);
  // The document takes no query, as no /v1 route that reads none does (unknown fields are rejected, never dropped).
  app.use(['/docs-json', '/docs-yaml'], refuseDocumentQuery);
  const document = buildOpenApi(app);
  SwaggerModule.setup('docs', app, document, { jsonDocumentUrl: 'docs-json' });
  // Before the server listens, so no request meets Node's own answers (see answerClientErrors).
  answerClientErrors(app.getHttpServer() as Server, logger, { bodyUnread });
  // Node keeps a request's first 2,000 headers and drops the rest without a word: an If-Match or Idempotency-Key after
  // 2,000 short ones (8 KiB) was never read, and the write it guarded went ahead. Every header is kept; the 16 KiB
  // limit on the request line and headers bounds how many there can be.
  (app.getHttpServer() as Server).maxHeadersCount = 0;
  // A port that cannot be had stops the API with one line naming the variables, as a worker's metrics port does. It
  // listens through Nest (so Nest knows it listens: HttpAdapterHost.listening, app.getUrl()), with Nest's own logger
  // off for that call only: on a refused port it printed a colored line of its own before the one line.
  const server = app.getHttpServer() as Server;
  // The app's own start (its modules' init hooks) first, with Nest's logger: a failure there is its own, not the port's.
  await app.init();
  app.useLogger(false);
  try {
    await app.listen(config.PORT, config.HOST);
  } catch (error) {
    const why = error instanceof Error ? error.message : String(error);
    throw new Error(`cannot listen on ${config.HOST}:${config.PORT} (PORT, HOST): ${why}`);
  } finally {
    app.useLogger(['error', 'warn']);
  }
  server.keepAliveTimeout = 65_000;
  // A backstop behind bodyReadTimeout (which answers with a problem first): Node's own limit is 300 s.
  server.requestTimeout = config.BODY_TIMEOUT_MS + 5_000;
  server.headersTimeout = Math.min(server.headersTimeout, server.requestTimeout);
  // The port it really listens on: with PORT=0 the system picks one, and whoever started it reads it here.
  const listening = server.address() as AddressInfo | null;
  logger.info({ port: listening?.port ?? config.PORT, host: config.HOST, url: await app.getUrl() }, 'api listening');
  started();
  onShutdown(
    logger,
    async () => {
      // The MCP waits first, while the API still answers the read of the state each one answers with (McpWaits).
      // Bounded by the stop's deadline: a read stalled on Postgres does not push the close past the grace.
      await app.get(McpWaits).stopAll(stopDeadline);
      app.get(StreamService).closeAll();
      // server.close() (in app.close) closes the connections idle at that moment and waits for every other one. A
      // request still running at SIGTERM leaves its keep-alive connection open after its answer, and a client holds
      // that for up to keepAliveTimeout (65 s): past the forced exit, exit 1. Each is closed as soon as it is idle.
      const closeIdle = setInterval(() => server.closeIdleConnections(), 100);
      closeIdle.unref();
      await app.close();
      clearInterval(closeIdle);
      await tracing?.shutdown();
    },
    config.SHUTDOWN_GRACE_MS,
    stopDeadline,
  );
}

runMain('api', bootstrap);
