// Reads the checks.json files the MCP conformance suite wrote (its `-o` directory) and
// decides the run: every check must pass, except one that needs a fixture tool a real
// server does not have: the suite marks most of those untestable (`details.untestable`,
// e.g. `test_missing_capability`); the tasks scenarios instead fail with the server's own
// correct answer to calling a tool it lacks (`-32602 unknown tool: slow_compute`).
// Prints one line per scenario and each check that did not pass; exits 1 on any other
// failure, or when no scenario ran.
//   node scripts/conformance-check.cjs <results dir> <scenario>...
'use strict';

const fs = require('node:fs');
const path = require('node:path');

const [dir, ...scenarios] = process.argv.slice(2);
let bad = 0;
for (const scenario of scenarios) {
  const runs = fs.readdirSync(dir).filter((d) => d.startsWith(`server-${scenario}-`));
  if (runs.length !== 1) {
    console.log(`FAIL: ${scenario}: ${runs.length} result directories`);
    bad += 1;
    continue;
  }
  const checks = JSON.parse(fs.readFileSync(path.join(dir, runs[0], 'checks.json'), 'utf8'));
  const count = (s) => checks.filter((c) => c.status === s).length;
  const needsFixture = (c) => (c.details && c.details.untestable)
    || /^Invalid params: unknown tool: [a-z_]+$/.test(c.errorMessage || '');
  const untestable = checks.filter((c) => c.status === 'FAILURE' && needsFixture(c));
  const failures = checks.filter((c) => c.status === 'FAILURE' && !needsFixture(c));
  const ok = failures.length === 0 && count('SUCCESS') > 0;
  console.log(`${ok ? 'PASS' : 'FAIL'}: ${scenario}: ${count('SUCCESS')} passed, ${failures.length} failed, `
    + `${untestable.length} untestable without fixture tools, ${count('SKIPPED')} skipped, `
    + `${count('WARNING')} warnings`);
  for (const c of [...failures, ...untestable]) {
    console.log(`    ${failures.includes(c) ? 'failed' : 'untestable'}: ${c.id}: ${(c.errorMessage || '').slice(0, 200)}`);
  }
  if (!ok) bad += 1;
}
if (scenarios.length === 0) bad += 1;
process.exitCode = bad === 0 ? 0 : 1;
