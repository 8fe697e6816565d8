import { EventEmitter } from 'node:events';
import type { HttpAdapterHost } from '@nestjs/core';
import type { Logger, RedisClient, VerityConfig } from '@verity/platform';
import type { Request, Response } from 'express';
import { McpCancellations } from './mcp-cancellations';
import { McpInFlight } from './mcp-in-flight';
import { McpWaits } from './mcp-waits';
import { McpController } from './mcp.controller';

/**
 * A POST /mcp whose client left while it was being authenticated reaches the handler with its response closed: the
 * 'close' event has been emitted already, so a listener added now never runs. Nothing of it may stay tracked for
 * cancellation (an entry per such request, holding its MCP server and SDK client, for the process's life).
 */
function setup(address: () => unknown = () => ({ address: '127.0.0.1', port: 1, family: 'IPv4' })) {
  const cancellations = new McpCancellations(
    { QUEUE_PREFIX: 'test' } as VerityConfig,
    { warn: () => undefined } as unknown as Logger,
    { publish: async () => 0 } as unknown as RedisClient,
  );
  const adapterHost = {
    httpAdapter: { getHttpServer: () => ({ address }) },
  } as unknown as HttpAdapterHost;
  const inFlight = new McpInFlight({
    MAX_MCP_REQUESTS_PER_KEY: 100,
    MAX_MCP_REQUESTS_PER_PROCESS: 200,
    MAX_STREAMS_PER_KEY: 20,
  } as VerityConfig);
  const tracked = () => (cancellations as unknown as { inFlight: Map<string, unknown> }).inFlight.size;
  // The key's places in flight: given back with everything else.
  const held = () => inFlight.heldBy('key_1');
  const waits = new McpWaits();
  // The MCP servers a stop would end the waits of: forgotten with everything else.
  const serving = () => (waits as unknown as { serving: Set<unknown> }).serving.size;
  return { controller: new McpController(adapterHost, cancellations, inFlight, waits), tracked, held, serving };
}

/** A POST /mcp calling one tool, as an MCP client sends it, over a socket `destroyed` or not. */
function toolCall(id: number, name: string, args: Record<string, unknown>, destroyed: boolean): Request {
  const socket = Object.assign(new EventEmitter(), { destroyed, remoteAddress: '203.0.113.9' });
  return Object.assign(new EventEmitter(), {
    method: 'POST',
    headers: {
      authorization: 'Bearer vk_test',
      accept: 'application/json, text/event-stream',
      // As every MCP client sends it (a body of another type is refused 415 before anything is tracked).
      'content-type': 'application/json',
    },
    rawHeaders: ['authorization', 'Bearer vk_test', 'accept', 'application/json, text/event-stream'],
    body: { jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } },
    ip: '203.0.113.9',
    socket,
    principal: { keyId: 'key_1', tenantId: 'demo', role: 'agent' },
  }) as unknown as Request;
}

describe('McpController: a request whose client left before the handler ran', () => {
  it('leaves nothing tracked and answers nobody', async () => {
    const { controller, tracked, held, serving } = setup();
    const req = toolCall(7, 'list_connectors', {}, true);
    const written: unknown[] = [];
    const res = Object.assign(new EventEmitter(), {
      closed: true,
      destroyed: true,
      headersSent: false,
      writeHead: (...args: unknown[]) => written.push(args),
      write: (chunk: unknown) => written.push(chunk),
      end: (chunk?: unknown) => written.push(chunk),
      setHeader: () => undefined,
      flushHeaders: () => undefined,
    }) as unknown as Response;

    await controller.post(req, res).catch(() => undefined);

    expect(tracked()).toBe(0);
    expect(held()).toBe(0);
    expect(serving()).toBe(0);
    expect(written).toEqual([]);
  });
});

/**
 * Over HTTP a cancellation is matched by key and JSON-RPC id only, and clients sharing a key count their ids alike
 * (the MCP SDK's client starts at 0): one client's cancellation (its own timeout sends one) names another's request.
 * A submission or a cancel stopped mid-call would leave its caller with an unknown outcome and nothing to learn it
 * by (a generated idempotency key never returned): only calls that change nothing are stopped.
 */
describe('McpController: which requests a cancellation may stop', () => {
  it.each([
    ['wait_for_execution', { execution_id: 'exe_1' }, 1],
    ['get_execution', { execution_id: 'exe_1' }, 1],
    ['submit_execution', { operations: [] }, 0],
    ['cancel_execution', { execution_id: 'exe_1' }, 0],
  ])('%s', async (name, args, expected) => {
    const { controller, tracked, held, serving } = setup();
    const req = toolCall(3, name, args, false);
    const res = Object.assign(new EventEmitter(), { closed: false, destroyed: false }) as unknown as Response;
    // The stand-in response cannot be written to: the transport's complaint about it is not this test's concern.
    const quiet = jest.spyOn(console, 'error').mockImplementation(() => undefined);
    // Tracked as the handler starts, before it waits for anything.
    const handled = controller.post(req, res).catch(() => undefined);
    expect(tracked()).toBe(expected);
    expect(held()).toBe(1);
    expect(serving()).toBe(1);
    res.emit('close');
    await handled;
    quiet.mockRestore();
    expect(tracked()).toBe(0);
    expect(held()).toBe(0);
    expect(serving()).toBe(0);
  });
});

describe('McpController: a request whose handler fails before its response is watched', () => {
  it('gives its places in flight back', async () => {
    // The server stopped listening (a shutdown, keep-alive connections still served): its address is null, and the
    // handler throws while it builds the request's client, after the places were counted.
    const { controller, tracked, held } = setup(() => null);
    const req = toolCall(5, 'list_connectors', {}, false);
    const res = Object.assign(new EventEmitter(), { closed: false, destroyed: false }) as unknown as Response;

    await expect(controller.post(req, res)).rejects.toThrow(TypeError);

    expect(held()).toBe(0);
    expect(tracked()).toBe(0);
  });
});
