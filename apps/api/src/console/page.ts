/**
 * The console's static parts, kept as strings in a .ts module so the normal `tsc` build emits them into dist/ with
 * nothing extra to copy. The HTML shell has no inline script or style: the CSP below forbids both.
 */
export const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "connect-src 'self'",
  "img-src 'self'",
  "base-uri 'none'",
  // Forms are handled by script; if it ever failed, a form must not submit anywhere (least of all a key in a URL).
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

export const CONSOLE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>Verity review</title>
<link rel="icon" href="/console/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="/console/app.css">
<script src="/console/app.js" defer></script>
</head>
<body>
<div id="app"><main id="main"><p class="boot">Loading the review console…</p></main></div>
<noscript><p class="boot">The review console needs JavaScript.</p></noscript>
</body>
</html>
`;

export const CONSOLE_FAVICON = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="6" fill="#1f2328"/><path d="M8 16.5l5 5 11-11" fill="none" stroke="#4ac26b" stroke-width="3.5" stroke-linecap="round" stroke-linejoin="round"/></svg>`;

export const CONSOLE_CSS = `
:root {
  --fg: #1f2328; --muted: #59636e; --line: #d1d9e0; --bg: #f6f8fa; --panel: #ffffff;
  --accent: #0969da; --good: #1a7f37; --bad: #cf222e; --warn: #9a6700; --review: #8250df; --pending: #0550ae;
  font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", sans-serif;
  font-size: 15px; line-height: 1.45; color: var(--fg); background: var(--bg);
}
* { box-sizing: border-box; }
[hidden] { display: none !important; }
body { margin: 0; }
a { color: var(--accent); }
code, pre, .op-key, time { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
code { font-size: 0.92em; overflow-wrap: anywhere; }
:focus-visible { outline: 3px solid var(--accent); outline-offset: 2px; }
h1:focus, main:focus, section:focus { outline: none; }
.visually-hidden { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
.skip { position: absolute; left: 8px; top: -48px; background: var(--panel); padding: 8px 12px; z-index: 10; }
.skip:focus { top: 8px; }
.boot { padding: 24px; color: var(--muted); }
.muted { color: var(--muted); }
.hint { color: var(--muted); font-size: 0.9em; margin: 4px 0 8px; }
.error { color: var(--bad); font-weight: 600; margin: 6px 0; }
.error:empty, .result:empty { display: none; }
.result { background: #dafbe1; border: 1px solid #aceebb; padding: 8px 12px; border-radius: 6px; }

/* Header */
.top { position: relative; display: flex; flex-wrap: wrap; align-items: center; gap: 8px 20px; padding: 10px 20px; background: #1f2328; color: #fff; }
.top a { color: #fff; }
.brand { font-weight: 700; font-size: 1.1em; text-decoration: none; }
.brand span { font-weight: 400; color: #9198a1; }
.top nav { display: flex; gap: 4px 16px; flex-wrap: wrap; }
.top nav a { text-decoration: none; padding: 4px 2px; }
.top nav a:hover { text-decoration: underline; }
.top .count { background: #3d444d; color: #fff; }
.top .count-alert { background: var(--bad); margin-left: 4px; }
#find { display: flex; gap: 6px; align-items: center; margin-left: auto; }
#find label { font-size: 0.9em; color: #d1d9e0; margin: 0; }
#find input { width: 15em; padding: 5px 8px; }
#find button, #sign-out { padding: 5px 10px; }
#sign-out { background: transparent; color: #fff; border-color: #59636e; }

main { max-width: 1240px; margin: 0 auto; padding: 16px 20px 48px; }
h1 { font-size: 1.6em; margin: 8px 0 4px; overflow-wrap: anywhere; }
h2 { font-size: 1.15em; margin: 0 0 10px; }
h3 { font-size: 1em; margin: 14px 0 6px; }
.lede { color: var(--muted); margin: 0 0 12px; overflow-wrap: anywhere; }
.crumbs { font-size: 0.9em; color: var(--muted); overflow-wrap: anywhere; }
.count { display: inline-block; min-width: 1.6em; padding: 0 6px; border-radius: 999px; background: #e6eaef; text-align: center; font-weight: 600; font-size: 0.9em; }

/* Controls */
button { font: inherit; padding: 7px 14px; border-radius: 6px; border: 1px solid var(--line); background: var(--panel); color: var(--fg); cursor: pointer; }
button:hover { background: #eef1f4; }
button:disabled { opacity: 0.55; cursor: progress; }
button.primary { background: var(--good); border-color: #116329; color: #fff; }
button.danger { background: var(--bad); border-color: #a40e26; color: #fff; }
button.warning { background: #bf8700; border-color: #9a6700; color: #1f2328; }
button.quiet { background: transparent; }
.button-sub { display: block; font-size: 0.8em; font-weight: 400; opacity: 0.9; }
.buttons { display: flex; flex-wrap: wrap; gap: 8px; margin-top: 8px; }
.buttons button { text-align: left; font-weight: 600; }
input, select, textarea { font: inherit; padding: 7px 9px; border: 1px solid #818b98; border-radius: 6px; background: #fff; color: var(--fg); max-width: 100%; }
textarea { width: 100%; resize: vertical; }
label { font-weight: 600; display: block; margin-bottom: 4px; }

/* Sign-in */
.signin { max-width: 460px; margin-top: 8vh; }
.signin form { background: var(--panel); border: 1px solid var(--line); border-radius: 8px; padding: 20px; }
.signin input { width: 100%; }
.signin button { margin-top: 4px; }

/* Panels and facts */
.panel { background: var(--panel); border: 1px solid var(--line); border-radius: 8px; padding: 14px 16px; margin-bottom: 14px; min-width: 0; }
.facts { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: 4px 14px; margin: 0; }
.facts > div { display: contents; }
.facts dt { color: var(--muted); }
.facts dd { margin: 0; overflow-wrap: anywhere; }
pre.json { background: #f6f8fa; border: 1px solid var(--line); border-radius: 6px; padding: 8px 10px; margin: 0; overflow: auto; max-height: 320px; font-size: 0.85em; white-space: pre-wrap; overflow-wrap: anywhere; }
blockquote.resolution-evidence { margin: 8px 0 0; padding: 8px 12px; border-left: 4px solid var(--review); background: #fbefff; white-space: pre-wrap; }
.tag { display: inline-block; padding: 0 6px; border-radius: 4px; font-size: 0.85em; font-weight: 600; background: #e6eaef; }
.tag-bad, .tag-denied { background: #ffebe9; color: #a40e26; }
.tag-granted { background: #dafbe1; color: #116329; }
.tag-requested { background: #fff8c5; color: #7d4e00; }

/* Queues */
.filters { display: flex; flex-wrap: wrap; align-items: flex-end; gap: 10px 14px; background: var(--panel); border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; margin-bottom: 6px; }
.field { display: flex; flex-direction: column; }
.field input[type=search] { width: 16em; }
.field-check { flex-direction: row; align-items: center; gap: 6px; padding-bottom: 8px; }
.field-check label { margin: 0; font-weight: 400; }
.field-actions { flex-direction: row; gap: 6px; }
.updated { font-size: 0.85em; margin: 4px 0 10px; }
.queues { display: grid; grid-template-columns: 1fr; gap: 14px; }
.cards { list-style: none; margin: 0; padding: 0; display: flex; flex-direction: column; gap: 10px; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px; background: #fff; }
.card-overdue { border-color: var(--bad); }
.card-head { display: flex; flex-wrap: wrap; justify-content: space-between; gap: 6px 10px; margin-bottom: 6px; }
.card-title { font-weight: 700; text-decoration: none; overflow-wrap: anywhere; }
.card-title:hover .op-key { text-decoration: underline; }
.op-route { font-weight: 400; color: var(--muted); }
.card .facts { font-size: 0.92em; }
.empty { color: var(--muted); padding: 8px 0; }
.more { margin-top: 10px; }

/* The two status kinds: never blended. Execution = rounded outlined pill, lowercase; effect = square filled tag, uppercase. */
.badges { display: flex; flex-wrap: wrap; gap: 6px; align-items: center; }
.badge { display: inline-flex; flex-wrap: wrap; max-width: 100%; align-items: stretch; font-size: 0.8em; line-height: 1.2; white-space: nowrap; vertical-align: middle; }
.badge-label { padding: 3px 7px; font-weight: 600; text-transform: uppercase; letter-spacing: 0.03em; font-size: 0.85em; display: flex; align-items: center; }
.badge-value { padding: 3px 8px; font-weight: 700; display: flex; align-items: center; }
.badge-execution { border: 2px solid #59636e; border-radius: 999px; background: #fff; color: #1f2328; overflow: hidden; }
.badge-execution .badge-label { background: #eef1f4; color: #424a53; border-right: 1px solid #d1d9e0; }
.badge-execution .badge-value::before { content: ""; width: 0.6em; height: 0.6em; border-radius: 50%; margin-right: 6px; background: #59636e; }
.badge-execution.tone-done { border-color: #0550ae; } .badge-execution.tone-done .badge-value::before { background: #0969da; }
.badge-execution.tone-bad { border-color: var(--bad); } .badge-execution.tone-bad .badge-value::before { background: var(--bad); }
.badge-execution.tone-attention { border-color: #bf8700; } .badge-execution.tone-attention .badge-value::before { background: #bf8700; }
.badge-execution.tone-off .badge-value { color: var(--muted); }
.badge-effect { border-radius: 2px; border: 2px solid #1f2328; font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.badge-effect .badge-label { background: #1f2328; color: #fff; font-family: system-ui, sans-serif; }
.badge-effect .badge-value { letter-spacing: 0.02em; }
.badge-effect.tone-good { border-color: #116329; } .badge-effect.tone-good .badge-label { background: #116329; } .badge-effect.tone-good .badge-value { background: #dafbe1; color: #116329; }
.badge-effect.tone-good .badge-value::before { content: "✓ "; white-space: pre; }
.badge-effect.tone-bad { border-color: #a40e26; } .badge-effect.tone-bad .badge-label { background: #a40e26; } .badge-effect.tone-bad .badge-value { background: #ffebe9; color: #a40e26; }
.badge-effect.tone-bad .badge-value::before { content: "✕ "; white-space: pre; }
.badge-effect.tone-warn { border-color: #9a6700; } .badge-effect.tone-warn .badge-label { background: #9a6700; } .badge-effect.tone-warn .badge-value { background: #fff1c2; color: #6c4400; }
.badge-effect.tone-warn .badge-value::before { content: "? "; white-space: pre; }
.badge-effect.tone-review { border-color: #6639ba; } .badge-effect.tone-review .badge-label { background: #6639ba; } .badge-effect.tone-review .badge-value { background: #fbefff; color: #6639ba; }
.badge-effect.tone-review .badge-value::before { content: "! "; white-space: pre; }
.badge-effect.tone-pending { border-color: #0550ae; } .badge-effect.tone-pending .badge-label { background: #0550ae; } .badge-effect.tone-pending .badge-value { background: #ddf4ff; color: #0550ae; }
.badge-effect.tone-idle .badge-value { background: #f6f8fa; color: #424a53; }
.badge-effect.tone-off { border-color: #818b98; } .badge-effect.tone-off .badge-label { background: #818b98; } .badge-effect.tone-off .badge-value { background: #f6f8fa; color: #59636e; }
.badge-summary { border: 2px dashed #59636e; border-radius: 6px; }
.badge-summary .badge-label { background: #eef1f4; }
.badge-summary.tone-all_verified { border-color: #116329; } .badge-summary.tone-unknown { border-color: #9a6700; } .badge-summary.tone-none { border-color: #a40e26; }
.status-pair { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 12px; margin: 10px 0 12px; }
.status-card { background: var(--panel); border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; }
.status-card .badge { font-size: 1.05em; }
.status-card p { margin: 8px 0 0; color: var(--muted); font-size: 0.92em; }
.callout { border-radius: 8px; padding: 10px 14px; margin: 0 0 14px; border: 1px solid; }
.callout-warn { background: #fff8c5; border-color: #d4a72c; color: #4d2d00; font-weight: 600; }
.callout-info { background: #ddf4ff; border-color: #54aeff; color: #0a3069; }
.verdict { display: inline-block; padding: 1px 8px; border-radius: 4px; font-weight: 700; font-size: 0.85em; border: 1px solid; }
.verdict-pass { color: #116329; background: #dafbe1; }
.verdict-fail { color: #a40e26; background: #ffebe9; }
.verdict-not_applicable { color: #59636e; background: #f6f8fa; }

/* Operation and execution pages */
.layout { display: grid; grid-template-columns: minmax(0, 1fr); gap: 14px; }
.actions { border-width: 2px; border-color: #818b98; }
table { border-collapse: collapse; width: 100%; font-size: 0.92em; }
th, td { text-align: left; padding: 7px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { color: var(--muted); font-weight: 600; }
td code { overflow-wrap: normal; }

/* Timeline */
.stream-state { font-size: 0.88em; color: var(--muted); margin: 0 0 8px; }
.stream-state[data-state=live]::before { content: "● "; color: var(--good); }
.stream-state[data-state=reconnecting]::before, .stream-state[data-state=error]::before { content: "● "; color: var(--bad); }
.events { list-style: none; margin: 0; padding: 0; }
.event { border-left: 3px solid var(--line); padding: 4px 0 6px 10px; margin-bottom: 4px; }
.event:target { background: #fff8c5; }
.event[data-to=VERIFIED] { border-left-color: var(--good); }
.event[data-to=FAILED], .event[data-to=failed] { border-left-color: var(--bad); }
.event[data-to=UNKNOWN], .event[data-to=RECONCILING] { border-left-color: #bf8700; }
.event[data-to=MANUAL_REVIEW] { border-left-color: var(--review); }
.event-other { opacity: 0.6; }
.event-head { display: flex; flex-wrap: wrap; gap: 4px 10px; font-size: 0.8em; color: var(--muted); }
.event-type { font-weight: 600; color: var(--fg); }
.event-body { font-size: 0.9em; overflow-wrap: anywhere; }
.event details summary { font-size: 0.8em; color: var(--accent); cursor: pointer; }

@media (min-width: 1000px) {
  .queues { grid-template-columns: 1fr 1fr; align-items: start; }
  .layout { grid-template-columns: minmax(0, 1fr) minmax(0, 400px); align-items: start; }
  .timeline { position: sticky; top: 10px; max-height: calc(100vh - 20px); overflow: auto; }
}
@media (max-width: 700px) {
  html { font-size: 14px; }
  .top { padding: 8px 12px; gap: 6px 14px; }
  .brand { padding-right: 90px; }
  .top nav { width: 100%; }
  #find { margin-left: 0; width: 100%; }
  #find input { flex: 1; width: auto; min-width: 0; }
  #find label { white-space: nowrap; }
  #sign-out { position: absolute; top: 6px; right: 10px; }
  main { padding: 12px 12px 40px; }
  .status-pair { grid-template-columns: 1fr; }
  .field, .field input[type=search], .field select { width: 100%; }
  .facts { grid-template-columns: minmax(6.5em, max-content) minmax(0, 1fr); }
  table.stack thead { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); }
  table.stack, table.stack tbody, table.stack tr, table.stack td { display: block; width: 100%; }
  table.stack tr { border: 1px solid var(--line); border-radius: 8px; margin-bottom: 8px; padding: 4px 0; }
  table.stack td { border: 0; padding: 3px 10px; display: grid; grid-template-columns: 7.5em minmax(0, 1fr); gap: 8px; }
  table.stack td::before { content: attr(data-label); color: var(--muted); font-weight: 600; }
  /* A badge names its own kind, so it takes the whole row instead of a repeated label. */
  table.stack td.cell-badge { grid-template-columns: minmax(0, 1fr); }
  table.stack td.cell-badge::before { display: none; }
  .buttons button { flex: 1 1 100%; }
}
@media (prefers-reduced-motion: no-preference) { html { scroll-behavior: smooth; } }
`;
