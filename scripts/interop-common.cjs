// What both interop clients (scripts/interop-client.cjs, the SDK 1.x; scripts/interop-client-v2.cjs,
// the SDK 2.x) share: the expected tool list, the PASS/FAIL tally, a bash result's stdout and a
// bound on every step.
'use strict';

const path = require('node:path');
const fs = require('node:fs');

/** The owner's local tools, from docs/classes.md (as scripts/interop-client.cjs reads them). */
function ownerLocalTools() {
  const doc = fs.readFileSync(path.join(__dirname, '..', 'docs', 'classes.md'), 'utf8');
  const section = doc.split('\n## Local tools')[1].split('\n## ')[0];
  return section.split('\n')
    .map((line) => line.split('|').map((cell) => cell.trim()))
    .filter((cells) => /^`[a-z_]+`$/.test(cells[1] || '') && cells[3] === '✓')
    .map((cells) => cells[1].slice(1, -1))
    .sort();
}

let passed = 0;
let failed = 0;

function check(name, ok, detail) {
  if (ok) {
    passed += 1;
    console.log(`PASS: ${name}`);
  } else {
    failed += 1;
    console.log(`FAIL: ${name}${detail === undefined ? '' : ` — ${detail}`}`);
  }
}

// A bash result's stdout: the streams are in its text block, `stdout_range` says where
// (byte offsets of its UTF-8).
function stdout(r) {
  const text = Buffer.from(((r.content || [])[0] || {}).text || '', 'utf8');
  const [a, b] = (r.structuredContent && r.structuredContent.stdout_range) || [0, 0];
  return text.subarray(a, b).toString('utf8');
}

// Every step is bounded: a hang fails the step rather than the whole run.
function bounded(promise, ms = 15000) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

// The closing line the runners read, and the exit status: 1 on any failure or when nothing ran.
function finish() {
  console.log(`${passed} passed, ${failed} failed`);
  process.exitCode = failed === 0 && passed > 0 ? 0 : 1;
}

module.exports = { ownerLocalTools, check, stdout, bounded, finish };
