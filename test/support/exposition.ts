import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';

/**
 * A check of the Prometheus text exposition format, after `promtool check metrics` (its parser and its lint rules),
 * so the naming rules hold where promtool is not installed:
 * - every line parses: `# HELP name text`, `# TYPE name kind`, or `name{label="value",...} number`;
 * - every family has HELP and TYPE, declared before its samples, once;
 * - counters end in `_total` and nothing else does; a histogram has `_bucket` (with `le`, ending at +Inf), `_sum`
 *   and `_count`; nothing else uses those suffixes;
 * - names and label names are snake_case, carry no type (`_gauge`, `_counter`...), durations are in `_seconds`
 *   (never `_ms`, `_milliseconds`, ...), and labels never repeat within a sample.
 * Returns the problems found (empty when clean).
 */
export function lintExposition(text: string): string[] {
  const problems: string[] = [];
  const help = new Map<string, string>();
  const types = new Map<string, string>();
  const sampled = new Set<string>();
  const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
  const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+-?\d+)?$/;
  const LABEL = /^\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(,|$)/;

  const familyOf = (sample: string): string => {
    for (const suffix of ['_bucket', '_sum', '_count']) {
      const base = sample.slice(0, -suffix.length);
      if (sample.endsWith(suffix) && ['histogram', 'summary'].includes(types.get(base) ?? '')) return base;
    }
    return sample;
  };

  text.split('\n').forEach((raw, i) => {
    const line = raw.trimEnd();
    const at = `line ${i + 1}`;
    if (line === '') return;
    if (line.startsWith('#')) {
      const m = /^#\s+(HELP|TYPE)\s+(\S+)(?:\s+(.*))?$/.exec(line);
      if (!m) return; // a comment
      const [, kind, name, rest = ''] = m;
      if (!NAME.test(name)) problems.push(`${at}: invalid metric name ${name}`);
      const seen = kind === 'HELP' ? help : types;
      if (seen.has(name)) problems.push(`${at}: second ${kind} for ${name}`);
      if (sampled.has(name)) problems.push(`${at}: ${kind} for ${name} after its samples`);
      if (kind === 'HELP') {
        if (rest.trim() === '') problems.push(`${name}: empty HELP`);
        help.set(name, rest);
      } else {
        if (!['counter', 'gauge', 'histogram', 'summary', 'untyped'].includes(rest)) {
          problems.push(`${at}: unknown type ${rest} for ${name}`);
        }
        types.set(name, rest);
      }
      return;
    }
    const m = SAMPLE.exec(line);
    if (!m) {
      problems.push(`${at}: not a sample: ${line}`);
      return;
    }
    const [, name, , labelText = '', value] = m;
    if (!/^([+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?|[+-]?inf|nan)$/i.test(value)) {
      problems.push(`${at}: ${name} has a value that is not a number: ${value}`);
    }
    const labels = new Map<string, string>();
    let restLabels = labelText;
    while (restLabels.trim() !== '') {
      const l = LABEL.exec(restLabels);
      if (!l) {
        problems.push(`${at}: unparsable labels {${labelText}}`);
        break;
      }
      if (labels.has(l[1])) problems.push(`${at}: label ${l[1]} repeated`);
      labels.set(l[1], l[2]);
      restLabels = restLabels.slice(l[0].length);
    }
    const family = familyOf(name);
    sampled.add(family);
    if (!types.has(family)) problems.push(`${at}: sample ${name} without TYPE`);
    if (!help.has(family)) problems.push(`${at}: sample ${name} without HELP`);
    if (types.get(family) === 'histogram' && name.endsWith('_bucket') && !labels.has('le')) {
      problems.push(`${at}: histogram bucket without le`);
    }
    for (const label of labels.keys()) {
      if (/[A-Z]/.test(label)) problems.push(`${at}: label ${label} is not snake_case`);
    }
  });

  for (const [name, type] of types) {
    if (!help.has(name)) problems.push(`${name}: TYPE without HELP`);
    if (/[A-Z]/.test(name)) problems.push(`${name}: not snake_case`);
    if (type === 'counter' && !name.endsWith('_total')) problems.push(`${name}: a counter must end in _total`);
    if (type !== 'counter' && name.endsWith('_total')) problems.push(`${name}: only counters end in _total`);
    if (type !== 'histogram' && type !== 'summary' && /_(bucket|sum|count)$/.test(name)) {
      problems.push(`${name}: _bucket, _sum and _count are reserved for histograms and summaries`);
    }
    if (/_(gauge|counter|histogram|summary)(_|$)/.test(name)) problems.push(`${name}: the name repeats its type`);
    if (
      /_(ms|msec|millis|milliseconds|microseconds|nanoseconds|minutes|hours|days|kilobytes|megabytes)(_|$)/.test(name)
    ) {
      problems.push(`${name}: use base units (seconds, bytes)`);
    }
    if (type === 'histogram' && !new RegExp(`^${name}_bucket\\{(.*,)?le="\\+Inf"`, 'm').test(text)) {
      if (text.includes(`${name}_bucket`)) problems.push(`${name}: histogram without an le="+Inf" bucket`);
    }
  }
  return problems;
}

/** promtool, if this machine has it: on PATH, or where PROMTOOL points (CI installs it; see .ci/run). */
export function findPromtool(): string | null {
  const candidates = [
    process.env.PROMTOOL,
    ...(process.env.PATH ?? '').split(delimiter).map((d) => join(d, 'promtool')),
  ];
  return candidates.find((c): c is string => Boolean(c) && existsSync(c!)) ?? null;
}

/** `promtool check metrics` on the text: its complaints, or [] when clean. */
export function promtoolCheck(promtool: string, text: string): string[] {
  const result = spawnSync(promtool, ['check', 'metrics'], { input: text, encoding: 'utf8' });
  if (result.error) throw result.error;
  if (result.status === 0) return [];
  return `${result.stdout}${result.stderr}`.split('\n').filter((l) => l.trim() !== '');
}

/**
 * The sum of the samples named `name` whose labels include `labels` (0 when none: a counter not yet incremented has no
 * labelled sample).
 */
export function metricValue(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const found = Object.fromEntries(
      [...(m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1], l[2]]),
    );
    if (Object.entries(labels).every(([k, v]) => found[k] === v)) sum += Number(m[3]);
  }
  return sum;
}
