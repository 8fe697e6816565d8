import { createLogger } from '@verity/platform';
import { withProducerOnLink } from '../../../test/support/producer';
import { SweepSchedule } from './sweep-schedule';

describe('SweepSchedule.stop', () => {
  it('waits for the check under way, so the connection is not closed under it (no failed check logged)', async () => {
    await withProducerOnLink('sweep-schedule', async ({ producer, redis, link }) => {
      const warnings: string[] = [];
      const logger = createLogger('sweep-schedule-spec', 'silent');
      logger.warn = ((_fields: unknown, msg: string) => void warnings.push(msg)) as typeof logger.warn;
      const schedule = new SweepSchedule(producer, redis, { everyMs: 60_000, checkEveryMs: 60_000 }, logger);
      await schedule.start();
      // A periodic check whose first command is held on its way to Redis: the check is under way.
      const holding = link.hold();
      const order: string[] = [];
      const checking = schedule.check('periodic').then(() => order.push('check ended'));
      await holding;
      const stopping = (async () => {
        await schedule.stop();
        order.push('stop resolved');
      })();
      link.release();
      await Promise.all([checking, stopping]);
      expect(order).toEqual(['check ended', 'stop resolved']);
      // What the shutdown does next: the producer's connection closes, with nothing left running on it.
      await producer.close();
      redis.disconnect();
      expect(warnings).toEqual([]);
      // And a reconnect or a tick after the stop checks nothing.
      await schedule.check('reconnect');
      expect(warnings).toEqual([]);
    });
  }, 15_000);
});
