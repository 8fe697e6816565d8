// Runs before the build in `npm start`, in plain JavaScript, so an old Node.js is told what it needs instead of
// failing somewhere in the TypeScript compiler or a dependency.
'use strict';
const major = Number(process.versions.node.split('.')[0]);
const wanted = 'Node.js 24 (the current LTS; 22 also works)';
if (major < 20) {
  console.error(`Verity needs ${wanted}; this is Node.js ${process.versions.node}.`);
  console.error('Install it with your version manager (`nvm install` reads .nvmrc), or run once with');
  console.error('  npx -p node@24 npm start');
  process.exit(1);
}
if (major < 22) {
  console.warn(
    `Node.js ${process.versions.node} reached end of life in April 2026; Verity is tested on ${wanted}. ` +
      'It still runs here, but use `nvm install` (.nvmrc) or `npx -p node@24 npm start`.',
  );
}
