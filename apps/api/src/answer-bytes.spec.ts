import { AnswerBudget, SMALL_ANSWER_BYTES } from './answer-bytes';

const MB = 1024 * 1024;

describe('AnswerBudget', () => {
  it('takes bytes within the budget, and one answer larger than the whole budget only when none holds any', () => {
    const budget = new AnswerBudget(10 * MB, 1000);
    expect(budget.tryTake(6 * MB)).toBe(true);
    expect(budget.tryTake(5 * MB)).toBe(false);
    expect(budget.tryTake(4 * MB)).toBe(true);
    expect(budget.inFlight).toBe(10 * MB);
    budget.give(6 * MB);
    budget.give(4 * MB);
    expect(budget.tryTake(30 * MB)).toBe(true);
    expect(budget.tryTake(1)).toBe(false);
    budget.give(30 * MB);
    expect(budget.inFlight).toBe(0);
  });

  it('lets those waiting in first come, first served as bytes are given back; a small answer that fits may pass', async () => {
    const budget = new AnswerBudget(10 * MB, 60_000);
    expect(budget.tryTake(8 * MB)).toBe(true);
    const first = budget.take(6 * MB, 60_000);
    const second = budget.take(2 * MB, 60_000);
    expect(budget.waiting).toBe(2);
    // A large answer that would fit does not pass those waiting; a small one does.
    expect(budget.tryTake(2 * MB)).toBe(false);
    expect(budget.tryTake(SMALL_ANSWER_BYTES)).toBe(true);
    budget.give(SMALL_ANSWER_BYTES);
    budget.give(8 * MB);
    await expect(first.taken).resolves.toBe(true);
    await expect(second.taken).resolves.toBe(true);
    expect({ inFlight: budget.inFlight, waiting: budget.waiting }).toEqual({ inFlight: 8 * MB, waiting: 0 });
  });

  it('a wait ends without the bytes when its time is up or its client leaves, and the one behind may go in', async () => {
    const budget = new AnswerBudget(10 * MB, 60_000);
    expect(budget.tryTake(5 * MB)).toBe(true);
    const timedOut = budget.take(20 * MB, 0);
    await expect(timedOut.taken).resolves.toBe(false);
    const left = budget.take(20 * MB, 60_000);
    const behind = budget.take(4 * MB, 60_000);
    expect(budget.waiting).toBe(2);
    left.cancel();
    await expect(left.taken).resolves.toBe(false);
    await expect(behind.taken).resolves.toBe(true);
    expect({ inFlight: budget.inFlight, waiting: budget.waiting }).toEqual({ inFlight: 9 * MB, waiting: 0 });
  });

  it('a small answer does not pass an answer larger than the whole budget waiting for it to be free', () => {
    const budget = new AnswerBudget(10 * MB, 60_000);
    expect(budget.tryTake(MB)).toBe(true);
    const large = budget.take(20 * MB, 60_000);
    expect(budget.tryTake(1024)).toBe(false);
    large.cancel();
  });
});
