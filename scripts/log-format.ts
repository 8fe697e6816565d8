/**
 * What `npm start` shows a person: the apps write one JSON object a line (pino), which machines want; a terminal gets
 * `12:03:04.512 INFO  dispatch  operationId=op_… outcome=sent` instead. Anything that is not a log object (a stack
 * trace, a banner) passes through as it is.
 */
const LEVELS: Record<number, string> = { 10: 'TRACE', 20: 'DEBUG', 30: 'INFO', 40: 'WARN', 50: 'ERROR', 60: 'FATAL' };
/** Fields every line has, or that the prefix already shows. */
const OMITTED = new Set(['level', 'time', 'msg', 'app', 'pid', 'hostname']);

export function humanLine(line: string): string {
  if (!line.startsWith('{')) return line;
  let entry: Record<string, unknown>;
  try {
    entry = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return line;
  }
  if (typeof entry !== 'object' || entry === null || typeof entry.level !== 'number') return line;
  const time = typeof entry.time === 'number' ? new Date(entry.time).toISOString().slice(11, 23) : '';
  const level = (LEVELS[entry.level] ?? String(entry.level)).padEnd(5);
  const fields = Object.entries(entry)
    .filter(([key]) => !OMITTED.has(key))
    .map(([key, value]) => `${key}=${typeof value === 'string' ? value : JSON.stringify(value)}`);
  return [time, level, String(entry.msg ?? ''), ...fields].filter(Boolean).join(' ');
}

/** Human lines on a terminal, JSON elsewhere; `LOG_FORMAT=json|pretty` decides instead when set. */
export function wantsHumanLogs(stdoutIsTty: boolean, env: NodeJS.ProcessEnv): boolean {
  if (env.LOG_FORMAT === 'json') return false;
  if (env.LOG_FORMAT === 'pretty') return true;
  return stdoutIsTty;
}
