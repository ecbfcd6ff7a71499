// Agent-chosen text stays text (tests/console.rs sets the stage): a tool named like an
// <img> tag in the Activity view's journal, a held bash whose command and argument names hold
// </script><script> and <img onerror> (in Approvals and in its grant's Now list), a pod's
// mint answer with markup in the Lend form's error, and a Deny reason with markup (in the
// recent decisions and the journal's summary). The page must show each as text, and no script may
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

  // The same held bash in its grant's Now list.
  await page.click('.tab[data-view="grants"]');
  const now = `[data-now="${GRANT}"] li[data-tool="bash"]`;
  await page.waitForSelector(now);
  const nowArgs = (await page.textContent(`${now} pre.args`)).split('\n');
  assert(nowArgs.includes('command: ' + COMMAND) && nowArgs.includes('<svg onload=alert(7)>: </pre><img src=x onerror=alert(8)>'),
    'the Now list shows the arguments as text: ' + JSON.stringify(nowArgs));
  await noInjectedElements(page, 'Now');
  await shot(page, 'xss-now');

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
  // The decision stays, its tool, arguments and reason as text.
  await page.waitForSelector('#recent-list li[data-decision="deny"]');
  const recent = await page.textContent('#recent-list li[data-decision="deny"]');
  assert(recent.includes(REASON) && recent.includes('</script><script>alert(2)</script>'), 'the recent decision as text: ' + recent);
  await noInjectedElements(page, 'recent decisions');
  await shot(page, 'xss-recent');
  step('denied');

  // The denied bash in the journal: its arguments, the reason and the summary as text.
  await page.click('.tab[data-view="activity"]');
  await page.waitForSelector('#activity-list li[data-tool="bash"]');
  const row = await page.evaluate(() => {
    const li = document.querySelector('#activity-list li[data-tool="bash"]');
    return { args: li.querySelector('pre.args').textContent, approval: li.querySelector('.approval').textContent,
      summary: li.querySelector('pre.summary').textContent };
  });
  assert(row.args.split('\n').includes('command: ' + COMMAND), 'the journal shows the command as text: ' + JSON.stringify(row));
  assert(row.approval.includes(REASON) && row.summary.includes(REASON), 'the reason as text: ' + JSON.stringify(row));
  await noInjectedElements(page, 'the journal after Deny');
  await shot(page, 'xss-journal');

  // Only the probe's 401 before signing in, and the 502 of the mint, were expected.
  const after = seen.console.slice(errorsBeforeSignIn);
  assert(after.every((m) => / status of 502 /.test(m)), 'console after sign-in: ' + JSON.stringify(after));
  h.refuseSurprises(seen, [401, 502]);
});
