import { createApiKey } from '@verity/persistence/api-keys';
import { Stack } from '../support/stack';
import { runKeysCli } from '../support/keys-cli';

/**
 * What the keys CLI prints back of its own arguments (an unknown command, a key id or prefix no key has, an option it
 * does not take) is shown with its control characters escaped, and its --json answers carry a stored label's hidden
 * characters as JSON escapes: a value pasted from elsewhere, or a label stored by another way, cannot clear the
 * operator's screen, retitle the terminal, reorder a line or forge one.
 */
describe('keys CLI: what it prints to the terminal', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'keysterm', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  const keysCli = (...args: string[]) => runKeysCli(stack.db.url, ...args);

  // Clear the screen, set the window title, a forged line, a bidi override.
  const hostile = '\u001b[2J\u001b]0;owned\u0007x\r\nrevoked key_all\u202e';
  /** Printed with no control character but the line breaks the CLI writes itself. */
  const plain = (text: string) =>
    [...text].every((c) => {
      const code = c.codePointAt(0)!;
      const control = (code < 0x20 && c !== '\n') || (code >= 0x7f && code <= 0x9f);
      const invisible = code === 0x200b || (code >= 0xe0000 && code <= 0xe007f);
      return !control && !invisible && !(code >= 0x202a && code <= 0x202e) && !(code >= 0x2066 && code <= 0x2069);
    });

  it.each([
    ['an unknown command', [hostile]],
    ['a key id or prefix no key has', ['revoke', hostile]],
    ['an option it does not take', ['create', '--role', 'operator', `--${hostile}`]],
    ['an option of list it does not take', ['list', `--${hostile}`]],
  ])('%s is quoted with its control characters escaped, exit 2', async (_, args) => {
    const answer = await keysCli(...args);
    expect(answer.code).toBe(2);
    expect({ stderr: answer.stderr, plain: plain(answer.stderr) }).toEqual({ stderr: answer.stderr, plain: true });
    expect(answer.stderr).toContain('\\u001b[2J');
    expect(answer.stderr).not.toMatch(/^revoked key_all/m);
    expect(plain(answer.stdout)).toBe(true);
  });

  it('--json prints a stored label’s hidden characters as JSON escapes: the same label once parsed, nothing raw', async () => {
    // A label the CLI would refuse, stored by another way (or before the rule): a C1 CSI, a bidi override, a zero-width
    // space, a tag character (past the first plane), an escape sequence.
    const label = 'ops\u009b2J\u202eyek-lla\u200b\u{e0041}\u001b[31m';
    const { id } = await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo', role: 'agent', label });
    const listed = await keysCli('list', '--tenant', 'demo', '--json');
    expect(listed.code).toBe(0);
    expect(plain(listed.stdout)).toBe(true);
    expect((JSON.parse(listed.stdout) as { id: string; label: string }[]).find((k) => k.id === id)?.label).toBe(label);
    const table = await keysCli('list', '--tenant', 'demo');
    expect([table.code, plain(table.stdout)]).toEqual([0, true]);
    const revoked = await keysCli('revoke', id, '--json');
    expect(revoked.code).toBe(0);
    expect(plain(revoked.stdout)).toBe(true);
    expect((JSON.parse(revoked.stdout) as { label: string }).label).toBe(label);
  });
});
