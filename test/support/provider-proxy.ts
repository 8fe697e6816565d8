import { createServer, type IncomingMessage } from 'node:http';
import { listenLocally, type LocalServer } from './local-server';
import { Stack, type StackOptions } from './stack';

/** The provider's answer to a forwarded request, as a hook may replace it. */
export interface ProviderAnswer {
  status: number;
  headers: Record<string, string>;
  body: Buffer | string;
}

export interface ProviderProxyOptions {
  /** Answers a request itself (the request is then not forwarded), or never answers it; undefined forwards it. */
  answer?: (req: IncomingMessage) => ProviderAnswer | 'never' | undefined;
  /** Replaces the provider's answer to a forwarded request. */
  rewrite?: (req: IncomingMessage, answer: ProviderAnswer) => ProviderAnswer;
}

/**
 * A hostile provider in front of a stack's sandbox provider (a real server on a spare port): an app started with
 * `SANDBOX_URL` set to its url talks to the provider through it, and a test decides what to answer or change.
 */
export async function providerProxy(sandboxUrl: string, options: ProviderProxyOptions): Promise<LocalServer> {
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const own = options.answer?.(req);
      if (own === 'never') return;
      if (own) {
        res.writeHead(own.status, own.headers).end(own.body);
        return;
      }
      const headers = Object.fromEntries(
        Object.entries(req.headers).filter(
          (entry): entry is [string, string] => typeof entry[1] === 'string' && entry[0] !== 'host',
        ),
      );
      fetch(`${sandboxUrl}${req.url}`, {
        method: req.method,
        headers,
        body: chunks.length > 0 ? Buffer.concat(chunks) : undefined,
      }).then(
        async (response) => {
          const forwarded: ProviderAnswer = {
            status: response.status,
            headers: Object.fromEntries(response.headers),
            body: Buffer.from(await response.arrayBuffer()),
          };
          const sent = options.rewrite ? options.rewrite(req, forwarded) : forwarded;
          res.writeHead(sent.status, sent.headers).end(sent.body);
        },
        () => res.destroy(),
      );
    });
  });
  return listenLocally(server);
}

/**
 * A stack whose `app` talks to the provider through a providerProxy: the stack starts with none of that app, then one
 * is started with `SANDBOX_URL` set to the proxy (the other apps read the provider directly). What is started is
 * stopped again when a later step fails, so a caller that stops what it got leaves nothing running.
 */
export async function stackBehindProxy(
  options: StackOptions,
  app: 'dispatcher' | 'reconciler',
  proxyOptions: ProviderProxyOptions,
): Promise<{ stack: Stack; proxy: LocalServer }> {
  const stack = await Stack.start({ ...options, [app === 'dispatcher' ? 'dispatchers' : 'reconcilers']: 0 });
  let proxy: LocalServer | undefined;
  try {
    proxy = await providerProxy(stack.sandboxUrl, proxyOptions);
    await stack.startApp(app, { SANDBOX_URL: proxy.url });
    return { stack, proxy };
  } catch (error) {
    await stack.stop();
    await proxy?.close();
    throw error;
  }
}
