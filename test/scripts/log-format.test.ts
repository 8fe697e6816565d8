import { humanLine, wantsHumanLogs } from '../../scripts/log-format';

describe('npm start log lines', () => {
  it('turns a pino line into one a person reads, keeping every field but the noise', () => {
    const line = JSON.stringify({
      level: 30,
      time: Date.UTC(2026, 10, 30, 12, 3, 4, 512),
      app: 'dispatcher',
      pid: 42,
      operationId: 'op_1',
      outcome: 'sent',
      detail: { attempt: 1 },
      msg: 'dispatch',
    });
    expect(humanLine(line)).toBe('12:03:04.512 INFO  dispatch operationId=op_1 outcome=sent detail={"attempt":1}');
  });

  it('passes through what is not a log object', () => {
    for (const line of ['Verity is running', '{not json', '{"no":"level"}', '    at main (start.js:1:1)']) {
      expect(humanLine(line)).toBe(line);
    }
  });

  it('is human on a terminal and JSON elsewhere, unless LOG_FORMAT says otherwise', () => {
    expect(wantsHumanLogs(true, {})).toBe(true);
    expect(wantsHumanLogs(false, {})).toBe(false);
    expect(wantsHumanLogs(true, { LOG_FORMAT: 'json' })).toBe(false);
    expect(wantsHumanLogs(false, { LOG_FORMAT: 'pretty' })).toBe(true);
  });
});
