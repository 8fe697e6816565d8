/**
 * What no string a Verity endpoint accepts may hold, wherever it appears (a field, a key, a params value, a path id, a
 * query parameter): C0 control characters other than tab, line feed and carriage return, and DEL — U+0000 in
 * particular, which Postgres cannot store (22021 / 22P05) — and UTF-16 surrogates without their pair, which are no
 * Unicode text. The API's schemas and the workers' operations server read the same rule.
 */
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const CONTROL = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

export function textIssue(value: string): { rule: string; message: string } | null {
  if (CONTROL.test(value)) {
    return {
      rule: 'no_control_characters',
      message: 'control characters (NUL, U+0001–U+001F other than tab and newlines, DEL) are not allowed',
    };
  }
  if (LONE_SURROGATE.test(value)) {
    return { rule: 'valid_unicode', message: 'not valid Unicode: a UTF-16 surrogate without its pair' };
  }
  return null;
}
