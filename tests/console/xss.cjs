// Agent-chosen text stays text (tests/console.rs sets the stage): a tool named like an
// <img> tag in the Activity view, a held bash whose command and argument names hold
// </script><script> and <img onerror>, a pod's mint answer with markup in the Lend form's
// error, and a Deny reason with markup. The page must show each as text, and no script may
// run: no dialog, no page error, no console error (a CSP refusal would be one), no element
// the text describes.
'use strict';

const h = require('./harness.cjs');
const { assert, step, shot } = h;

const RUNTIME = h.env('CONSOLE_RUNTIME');
const GRANT = h.env('XSS_GRANT');
const TOOL = h.env('XSS_TOOL');
const COMMAND = h.env('XSS_COMMAND');
const MINT = h.env('XSS_MINT');
const REASON = h.env('XSS_REASON');

/** Nothing the payloads describe exists in the DOM. */
async function noInjectedElements(page, where) {
  const found = await page.evaluate(() => ({
    scripts: [...document.scripts].map((s) => s.src),
    imgs: [...document.images].filter((i) => i.id !== 'thumb').length,
    svgs: document.querySelectorAll('svg').length,
    bold: document.querySelectorAll('main b[onmouseover], main b:not(label b)').length,
    handlers: [...document.querySelectorAll('*')].filter((e) => [...e.attributes].some((a) => a.name.startsWith('on'))).length,
  }));
  assert(found.scripts.length === 1 && found.scripts[0].endsWith('/console/app.js'), `${where}: scripts ${JSON.stringify(found.scripts)}`);
  assert(found.imgs === 0 && found.svgs === 0 && found.bold === 0 && found.handlers === 0, `${where}: injected elements ${JSON.stringify(found)}`);
}

h.run(async (browser) => {
  const { page, seen } = await h.openSignedIn(browser, { viewport: { width: 1180, height: 820 } });
  const errorsBeforeSignIn = seen.console.length;

  // The held bash: its arguments, names and values, in full and as text.
  await page.click('.tab[data-view="approvals"]');
  await page.waitForSelector('[data-approval]');
  const args = (await page.textContent('[data-approval] pre.args')).split('\n');
  assert(args.includes('command: ' + COMMAND), 'the command as text: ' + JSON.stringify(args));
  assert(args.includes('<svg onload=alert(7)>: </pre><img src=x onerror=alert(8)>'), 'an argument name as text: ' + JSON.stringify(args));
  await noInjectedElements(page, 'Approvals');
  await shot(page, 'xss-approvals');

  // The tool named like a tag, in the Activity view.
  await page.click('.tab[data-view="activity"]');
  await page.selectOption('#activity-grant', GRANT);
  await page.waitForFunction((tool) => [...document.querySelectorAll('#activity-list li')]
    .some((li) => li.dataset.tool === tool), TOOL);
  const shown = await page.evaluate((tool) => [...document.querySelectorAll('#activity-list li')]
    .find((li) => li.dataset.tool === tool).querySelector('.tool').textContent, TOOL);
  assert(shown === TOOL, 'the tool name as text: ' + shown);
  await noInjectedElements(page, 'Activity');
  await shot(page, 'xss-activity');

  // The pod's mint answer, quoted in the 502, next to the credential field.
  await page.click('.tab[data-view="lend"]');
  await page.fill('#lend-runtime', RUNTIME);
  await page.fill('#lend-session', 'xss-mint');
  await page.check('input[name="credential"][value="admin_credential"]');
  await page.fill('#lend-credential', 'pod-admin-credential');
  await page.click('#lend-submit');
  await page.waitForFunction(() => document.querySelector('[data-error-for="credential"]').textContent !== '');
  const mintError = await page.textContent('[data-error-for="credential"]');
  assert(mintError.startsWith('runtime refused to mint (HTTP 500)') && mintError.includes(MINT), 'the mint answer as text: ' + mintError);
  await noInjectedElements(page, 'Lend');
  await shot(page, 'xss-lend');

  // Deny with a reason holding markup; the pod is told it as text.
  await page.click('.tab[data-view="approvals"]');
  await page.fill('[data-approval] input', REASON);
  await page.click('[data-approval] button[data-action="deny"]');
  await page.waitForSelector('[data-approval]', { state: 'detached' });
  await noInjectedElements(page, 'Approvals after Deny');
  step('denied');

  // Only the probe's 401 before signing in, and the 502 of the mint, were expected.
  const after = seen.console.slice(errorsBeforeSignIn);
  assert(after.every((m) => / status of 502 /.test(m)), 'console after sign-in: ' + JSON.stringify(after));
  h.refuseSurprises(seen, [401, 502]);
});
