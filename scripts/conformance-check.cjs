// Reads the checks.json files the MCP conformance suite wrote (its `-o` directory) and
// decides the run: every check must pass, except one the suite itself marks untestable
// (`details.untestable`: it needs a fixture tool, such as `test_missing_capability`, that
// a real server does not have). Prints one line per scenario and each check that did not
// pass; exits 1 on any other failure, or when no scenario ran.
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
  const untestable = checks.filter((c) => c.status === 'FAILURE' && c.details && c.details.untestable);
  const failures = checks.filter((c) => c.status === 'FAILURE' && !(c.details && c.details.untestable));
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
