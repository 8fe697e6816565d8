/**
 * Summarises V8 CPU profiles (`node --cpu-prof`, written by `npm run bench -- --profile`): self time by package and
 * by function, so "the API spends its time in X" is a measurement, not a guess.
 * Usage: node dist/test/bench/profile-summary.js <file.cpuprofile>... [--top 25]
 */
import * as fs from 'node:fs';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
}

interface Profile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
}

function packageOf(url: string): string {
  if (!url) return '(native / idle / gc)';
  const nm = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (nm) return nm[1];
  if (url.startsWith('node:')) return 'node core';
  const app = /\/dist\/((?:apps|libs)\/[^/]+)/.exec(url);
  return app ? app[1] : url;
}

export function summarise(files: string[], top = 25): string {
  const byPackage = new Map<string, number>();
  const byFunction = new Map<string, number>();
  let totalMs = 0;
  for (const file of files) {
    const profile = JSON.parse(fs.readFileSync(file, 'utf8')) as Profile;
    const durationMs = (profile.endTime - profile.startTime) / 1000;
    const perSample = durationMs / Math.max(1, profile.samples.length);
    for (const node of profile.nodes) {
      const ms = (node.hitCount ?? 0) * perSample;
      if (!ms) continue;
      const { functionName, url, lineNumber } = node.callFrame;
      if (functionName === '(idle)' || functionName === '(program)') continue;
      totalMs += ms;
      const pkg = packageOf(url);
      byPackage.set(pkg, (byPackage.get(pkg) ?? 0) + ms);
      const fn = `${functionName || '(anonymous)'} ${url.replace(/^.*node_modules\//, '').replace(/^.*\/dist\//, '')}:${lineNumber + 1}`;
      byFunction.set(fn, (byFunction.get(fn) ?? 0) + ms);
    }
  }
  const list = (map: Map<string, number>) =>
    [...map.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([k, ms]) => `  ${((ms / totalMs) * 100).toFixed(1).padStart(5)}%  ${ms.toFixed(0).padStart(7)} ms  ${k}`)
      .join('\n');
  return `busy ${totalMs.toFixed(0)} ms in ${files.length} profile(s)\nby package:\n${list(byPackage)}\nby function (self time):\n${list(byFunction)}`;
}

if (require.main === module) {
  const args = process.argv.slice(2);
  const topAt = args.indexOf('--top');
  const top = topAt >= 0 ? Number(args.splice(topAt, 2)[1]) : 25;
  process.stdout.write(`${summarise(args, top)}\n`);
}
