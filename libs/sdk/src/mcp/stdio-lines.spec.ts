import { PassThrough } from 'node:stream';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { MAX_STDIO_LINE_BYTES, jsonRpcLines } from './stdio-lines';

/**
 * jsonRpcLines in front of the MCP SDK's stdio transport, as the verity-mcp bin wires them. The transport closes (and
 * the bin exits 0 with no word) on any chunk that would take what it holds past its 10 MiB: every line passed on must
 * fit in it, line feed included.
 */
async function wired() {
  const answered: JSONRPCMessage[] = [];
  const lines = jsonRpcLines((message) => answered.push(message));
  const transport = new StdioServerTransport(lines, new PassThrough());
  const received: JSONRPCMessage[] = [];
  let closed = false;
  transport.onmessage = (message) => received.push(message);
  transport.onclose = () => (closed = true);
  transport.onerror = () => undefined;
  await transport.start();
  return {
    write: (chunk: Buffer | string) => lines.write(chunk),
    answered,
    received,
    closed: () => closed,
    /** Until the transport has closed or received the message with this id. */
    async settled(id: number): Promise<void> {
      while (!closed && !received.some((m) => (m as { id?: unknown }).id === id)) {
        await new Promise((resolve) => setImmediate(resolve));
      }
    },
  };
}

const ping = (id: number) => `${JSON.stringify({ jsonrpc: '2.0', id, method: 'ping' })}\n`;

/** A ping whose params pad it to `bytes` (its line feed not counted), `fill` repeated in a string. */
function paddedPing(id: number, bytes: number, fill: Buffer): Buffer {
  const head = Buffer.from(`{"jsonrpc":"2.0","id":${id},"method":"ping","params":{"pad":"`);
  const tail = Buffer.from('"}}');
  const pad = Buffer.alloc(bytes - head.length - tail.length, fill);
  return Buffer.concat([head, pad, tail]);
}

describe('jsonRpcLines before the SDK stdio transport', () => {
  /** The wired transport once it was sent a ping padded to `bytes` before its line feed, then a plain one. */
  async function afterPaddedPing(bytes: number, fill: Buffer) {
    const stdio = await wired();
    stdio.write(Buffer.concat([paddedPing(1, bytes, fill), Buffer.from('\n')]));
    stdio.write(ping(2));
    await stdio.settled(2);
    return stdio;
  }
  const receivedIds = (stdio: Awaited<ReturnType<typeof wired>>) =>
    stdio.received.map((m) => (m as { id?: unknown }).id);

  it('answers a line that with its line feed passes the transport’s bound, and keeps serving', async () => {
    // Exactly MAX_STDIO_LINE_BYTES before its line feed: one byte more than the transport holds.
    const stdio = await afterPaddedPing(MAX_STDIO_LINE_BYTES, Buffer.from('x'));

    expect(stdio.closed()).toBe(false);
    expect(receivedIds(stdio)).toEqual([2]);
    expect(stdio.answered).toEqual([
      { jsonrpc: '2.0', id: null, error: { code: -32600, message: expect.stringContaining('longer than') } },
    ]);
  }, 30_000);

  it.each<[string, number, Buffer]>([
    // 4 MiB, well inside the bound; decoded and encoded again, each 0xFF byte became U+FFFD's three bytes (12 MiB).
    [
      'passes on a message holding bytes that are no UTF-8 as the bytes it read, not a longer re-encoding',
      4 * 1024 * 1024,
      Buffer.from([0xff]),
    ],
    ['passes on a line that fits the transport’s bound with its line feed', MAX_STDIO_LINE_BYTES - 1, Buffer.from('x')],
  ])(
    '%s',
    async (_title, bytes, fill) => {
      const stdio = await afterPaddedPing(bytes, fill);

      expect(stdio.closed()).toBe(false);
      expect(receivedIds(stdio)).toEqual([1, 2]);
      expect(stdio.answered).toEqual([]);
    },
    30_000,
  );
});

describe('jsonRpcLines: JSON whose parsed value is not what the line says', () => {
  /** A tools/call of submit_execution whose params are written out as `params` (raw JSON text). */
  const submit = (id: number, params: string) =>
    `{"jsonrpc":"2.0","id":${id},"method":"tools/call","params":{"name":"submit_execution","arguments":` +
    `{"agent_id":"a","intent":"i","operations":[{"key":"pay","connector":"payments","action":"charge",` +
    `"params":${params}}]}}}\n`;

  it.each([
    ['a member given twice (JSON.parse keeps the last)', '{"amount":100,"amount":99999999}', 'is given twice'],
    ['a number a double rounds', '{"amount":9007199254740993}', 'cannot keep exactly'],
    ['a number that parses to Infinity (sent on as null)', '{"amount":1e309}', 'not finite'],
    ['a negative one that parses to -Infinity', '{"amount":-1e309}', 'not finite'],
  ])('answers a line holding %s -32600 with its id, as /mcp does, and passes nothing on', async (_, params, said) => {
    const stdio = await wired();
    stdio.write(submit(7, params));
    stdio.write(ping(8));
    await stdio.settled(8);

    expect(stdio.received.map((m) => (m as { id?: unknown }).id)).toEqual([8]);
    expect(stdio.answered).toEqual([
      {
        jsonrpc: '2.0',
        id: 7,
        error: {
          code: -32600,
          message: expect.stringMatching(
            new RegExp(`^Invalid Request: params\\.arguments\\.operations\\[0\\]\\.params\\.amount .*${said}`),
          ),
        },
      },
    ]);
  });

  it('passes on numbers a double keeps (0.1, 1e22, 1.50, a 15-digit whole number)', async () => {
    const stdio = await wired();
    stdio.write(submit(7, '{"a":0.1,"b":1e22,"c":1.50,"d":123456789012345,"e":-0}'));
    await stdio.settled(7);

    expect(stdio.received.map((m) => (m as { id?: unknown }).id)).toEqual([7]);
    expect(stdio.answered).toEqual([]);
  });
});

describe('jsonRpcLines: an id that is itself what the line hides', () => {
  it.each([
    ['given twice', '{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}\n'],
    ['a number a double rounds', '{"jsonrpc":"2.0","id":9007199254740993,"method":"ping"}\n'],
  ])('answers an id %s with id null, as /mcp does: neither reading of it is the request’s', async (_, line) => {
    const stdio = await wired();
    stdio.write(line);
    stdio.write(ping(8));
    await stdio.settled(8);

    expect(stdio.received.map((m) => (m as { id?: unknown }).id)).toEqual([8]);
    expect(stdio.answered).toEqual([
      { jsonrpc: '2.0', id: null, error: { code: -32600, message: expect.stringMatching(/^Invalid Request: id /) } },
    ]);
  });
});
