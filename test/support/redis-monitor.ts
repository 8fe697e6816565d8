import { connect } from 'node:net';

/** One command Redis MONITOR reported: who sent it (`lua` for what a script ran, else the client's address) and its words. */
export interface MonitoredCommand {
  source: string;
  args: string[];
}

export interface RedisMonitor {
  onCommand(listener: (command: MonitoredCommand) => void): void;
  close(): void;
}

/**
 * MONITOR on a plain socket of its own, its lines parsed here. (ioredis' monitor mode can lose track of its replies
 * while the shared test Redis is busy with other suites, and then throws "Command queue state error".) Resolves once
 * Redis has confirmed MONITOR, so every command after that is reported.
 */
export function monitorRedis(url: string): Promise<RedisMonitor> {
  const { hostname, port } = new URL(url);
  const listeners: ((command: MonitoredCommand) => void)[] = [];
  const socket = connect(Number(port || 6379), hostname || '127.0.0.1');
  let buffered = '';
  return new Promise((resolve, reject) => {
    let confirmed = false;
    // Before the confirmation an error fails the call; after it, the monitor simply stops reporting.
    socket.on('error', (error) => {
      if (!confirmed) reject(error);
    });
    socket.on('connect', () => socket.write('MONITOR\r\n'));
    socket.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('latin1');
      let end: number;
      while ((end = buffered.indexOf('\r\n')) >= 0) {
        const line = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        if (!confirmed) {
          if (line !== '+OK') return reject(new Error(`MONITOR answered ${line}`));
          confirmed = true;
          resolve({ onCommand: (listener) => listeners.push(listener), close: () => socket.destroy() });
          continue;
        }
        const command = parseMonitorLine(line);
        if (command) for (const listener of listeners) listener(command);
      }
    });
  });
}

/** `+1700000000.123456 [0 127.0.0.1:5000] "evalsha" "abc" "2"` → `{ source: '127.0.0.1:5000', args: [...] }`. */
export function parseMonitorLine(line: string): MonitoredCommand | null {
  const head = /^\+\d+\.\d+ \[\d+ ([^\]]+)\] /.exec(line);
  if (!head) return null;
  const rest = line.slice(head[0].length);
  const args = [...rest.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((match) => unescapeMonitorWord(match[1]));
  return { source: head[1], args };
}

const ESCAPES: Record<string, string> = { n: '\n', r: '\r', t: '\t', a: '\x07', b: '\b' };

/** MONITOR's quoting of one word undone: `\xHH`, `\n`-style escapes, and a backslash before any other character. */
function unescapeMonitorWord(word: string): string {
  return word.replace(/\\(x[0-9a-fA-F]{2}|.)/g, (_, escape: string) =>
    escape.length === 3 ? String.fromCharCode(parseInt(escape.slice(1), 16)) : (ESCAPES[escape] ?? escape),
  );
}
