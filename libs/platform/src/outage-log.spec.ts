import { OutageLog } from './outage-log';

describe('OutageLog', () => {
  it('logs the first failure, counts the next ones, reminds after remindMs with their number', () => {
    let now = 1_000;
    const log = new OutageLog(60_000, () => now);
    expect(log.failed()).toEqual({ unlogged: 0 });
    expect(log.failed()).toBeUndefined();
    now += 59_999;
    expect(log.failed()).toBeUndefined();
    now += 1;
    expect(log.failed()).toEqual({ unlogged: 2 });
    expect(log.failed()).toBeUndefined();
  });

  it('a success ends the outage with its number of failures; the next failure is logged at once', () => {
    let now = 0;
    const log = new OutageLog(60_000, () => now);
    expect(log.succeeded()).toBeUndefined();
    log.failed();
    log.failed();
    log.failed();
    expect(log.succeeded()).toBe(3);
    expect(log.succeeded()).toBeUndefined();
    now += 1;
    expect(log.failed()).toEqual({ unlogged: 0 });
  });
});
