/**
 * The console's shell: the page every console route answers with, and its policy. The script and the stylesheet are
 * built by esbuild from console/client (`npm run build`). The shell has no inline script or style: the CSP forbids both.
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
