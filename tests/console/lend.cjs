// The console end to end (tests/console.rs starts the daemon and the stub pod): sign in
// (a wrong token first), lend a grant with approval, see it attached, allow a held bash,
// read its activity and the screen thumbnail's pacing, revoke; a screenshot of each view,
// on a desktop and on a phone.
'use strict';

const fs = require('fs');
const path = require('path');
const h = require('./harness.cjs');
const { assert, step, go, shot } = h;

const RUNTIME = h.env('CONSOLE_RUNTIME');
const SECRET = h.env('CONSOLE_SECRET');
const SESSION = h.env('CONSOLE_SESSION');
const SESSION_ERROR = h.env('SESSION_ERROR');
const COMMAND = h.env('BASH_COMMAND');
const SECRET_CHOICE_ERROR = h.env('SECRET_CHOICE_ERROR');
const FOLDER = h.env('CONSOLE_FOLDER');
/** The thumbnail's period the page promises (ms). */
const THUMB_MS = 2000;
/** Slack for timer and event-loop jitter when checking that period (ms). */
const JITTER_MS = 50;
const PHONE = { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 };

const posts = (seen, suffix) => seen.requests.filter((r) => r.method === 'POST' && r.url.endsWith(suffix));
const view = async (page, name) => {
  await page.click(`.tab[data-view="${name}"]`);
  await page.waitForSelector(`#view-${name}:not([hidden])`);
};

/** The README's picture: the desktop's Grants view (a held call under Now, Stop everything in
 * the header) and the phone's Approvals, side by side. */
async function readmePicture(browser, desktop, phone) {
  await desktop.click('.tab[data-view="grants"]');
  const left = (await desktop.screenshot({ clip: { x: 0, y: 0, width: 1180, height: 650 } })).toString('base64');
  await desktop.click('.tab[data-view="approvals"]');
  await phone.evaluate(() => window.scrollTo(0, 0));
  const right = (await phone.screenshot({ clip: { x: 0, y: 0, width: 390, height: 620 } })).toString('base64');
  const page = await browser.newPage({ viewport: { width: 992, height: 400 } });
  await page.setContent(`<body style="margin:0;padding:14px;background:#d9dee4;display:flex;gap:14px;align-items:flex-start">
    <img style="width:720px;border-radius:8px;box-shadow:0 1px 5px #0004" src="data:image/png;base64,${left}">
    <img style="width:230px;border-radius:14px;box-shadow:0 1px 5px #0004" src="data:image/png;base64,${right}">
    </body>`);
  await page.waitForFunction(() => [...document.images].every((i) => i.complete));
  const file = path.join(h.env('SCREENSHOTS'), 'console-readme.png');
  fs.mkdirSync(path.dirname(file), { recursive: true });
  await page.screenshot({ path: file, fullPage: true });
  step('screenshot', { file });
  await page.close();
}

h.run(async (browser) => {
  // ---- sign in: a wrong token first ----
  const context = await browser.newContext({ viewport: { width: 1180, height: 820 } });
  const page = await context.newPage();
  page.setDefaultTimeout(h.STEP_MS);
  const seen = h.watch(page);
  await page.goto(h.BASE + '?refresh_ms=250');
  await page.waitForSelector('#view-login:not([hidden])');
  await shot(page, 'console-login');
  await h.signIn(page, 'not-the-token');
  await page.waitForFunction(() => /^Wrong token/.test(document.getElementById('login-error').textContent));
  assert(await page.evaluate(() => sessionStorage.getItem('handnode.token')) === null, 'a refused token is not kept');
  await shot(page, 'console-login-wrong-token');
  await h.signIn(page, h.TOKEN);
  await page.waitForSelector('#view-grants:not([hidden])');
  assert(await page.evaluate(() => sessionStorage.getItem('handnode.token')) === h.TOKEN, 'the token is in sessionStorage');
  assert(await page.evaluate(() => document.cookie) === '', 'no cookie');
  assert(await page.evaluate(() => localStorage.length) === 0, 'nothing in localStorage');
  const bearer = seen.requests.filter((r) => r.url.includes(h.TOKEN));
  assert(bearer.length === 0, 'the token never goes into a URL');
  step('signed-in');

  const phone = await h.openSignedIn(browser, PHONE);
  await shot(phone.page, 'phone-grants-empty');

  // ---- lend: the API's own error next to its field, then once on a double click ----
  await view(page, 'lend');
  await page.fill('#lend-runtime', RUNTIME);
  await page.fill('#lend-session', 'Not_A_Session');
  // Every profile of the daemon's table is offered; the boundaries warn of nothing. This
  // daemon has no --browser-command: browser is offered disabled, saying why, before submit.
  assert(await page.isDisabled('input[name="profile"][value="browser"]'), 'browser needs --browser-command');
  assert(/needs handnode's --browser-command/.test(await page.textContent('label:has(input[value="browser"])')), 'and says why');
  await page.check('input[name="profile"][value="observe"]');
  assert(!(await page.isVisible('#lend-warning')), 'observe is a boundary: no shell warning');
  await page.check('input[name="profile"][value="desktop"]');
  const warning = await page.textContent('#lend-warning');
  assert(await page.isVisible('#lend-warning') && /shell-equivalent/.test(warning), 'desktop shows the boundary warning: ' + warning);
  // The boundaries it names come from the daemon's table: every one, apps included.
  assert(/Only observe, browser, files and apps are boundaries\./.test(warning), 'the warning names every boundary: ' + warning);
  await page.check('input[name="approve"][value="shell"]');
  await page.click('label.preset:has(input[value="7200"])');
  await page.click('label.preset:has(input[value="3600"])');
  await page.check('input[name="credential"][value="secret"]');
  await page.fill('#lend-credential', SECRET);
  await page.click('#lend-submit');
  await page.waitForFunction(() => document.querySelector('[data-error-for="session"]').textContent !== '');
  const sessionError = await page.textContent('[data-error-for="session"]');
  assert(sessionError === SESSION_ERROR, `the session error is the API's own: ${sessionError}`);
  assert(await page.textContent('[data-error-for="form"]') === '', 'and only next to its field');
  await shot(page, 'console-lend-error');
  await page.fill('#lend-session', SESSION);
  const before = posts(seen, '/attach').length;
  await page.dblclick('#lend-submit');
  await page.waitForSelector('#view-grants:not([hidden])');
  await page.waitForSelector('#grants-live [data-grant]');
  const id = await page.getAttribute('#grants-live [data-grant]', 'data-grant');
  assert(posts(seen, '/attach').length === before + 1, 'a double click lends once');
  assert(await page.inputValue('#lend-credential') === '', 'the secret is cleared once sent');
  step('lent', { id });

  // ---- attached ----
  await go('attached');
  await page.waitForFunction((id) => {
    const s = document.querySelector(`[data-grant="${id}"] .state`);
    return s && s.textContent === 'attached';
  }, id);
  const shell = await h.fact(page, id, 'shell');
  assert(/^gated/.test(shell), 'approve shell makes the grant gated: ' + shell);
  assert(await h.fact(page, id, 'profile') === 'desktop', 'profile shown');
  assert(/^in (59|1:00):\d\d/.test(await h.fact(page, id, 'expires')), 'the expiry counts down from an hour: ' + await h.fact(page, id, 'expires'));
  await shot(page, 'console-grants');
  await phone.page.waitForSelector(`[data-grant="${id}"] .state.attached`);
  await shot(phone.page, 'phone-grants');
  await h.noSidewaysScroll(phone.page, 'Grants');
  await phone.page.click('.tab[data-view="lend"]');
  await phone.page.check('input[name="profile"][value="owner"]');
  await shot(phone.page, 'phone-lend');
  await h.noSidewaysScroll(phone.page, 'Lend');
  step('attached', { id });

  // ---- renew +1 h: the API's error without a secret, then once with one ----
  await go('renew');
  await view(page, 'grants');
  const card = `[data-grant="${id}"]`;
  await page.click(`${card} button[data-action="renew"]`);
  await page.click(`${card} button[data-action="renew-go"]`);
  await page.waitForFunction((card) => document.querySelector(`${card} form .error`).textContent !== '', card);
  const renewError = await page.textContent(`${card} form .error`);
  assert(renewError === SECRET_CHOICE_ERROR, 'renew without a secret: ' + renewError);
  await page.fill(`${card} form input[type="password"]`, SECRET);
  const beforeRenew = posts(seen, '/attach').length;
  await page.dblclick(`${card} button[data-action="renew-go"]`);
  await page.waitForFunction((card) => /^Renewed until/.test(document.querySelector(`${card} .note`).textContent), card);
  assert(posts(seen, '/attach').length === beforeRenew + 1, 'a double click renews once');
  assert(await page.inputValue(`${card} form input[type="password"]`) === '', 'the renew secret is cleared');
  await page.waitForFunction((card) => /^in (1:59|2:00):\d\d/.test(
    [...document.querySelectorAll(`${card} dt`)].find((dt) => dt.textContent === 'expires').nextElementSibling.textContent), card);
  await shot(page, 'console-renewed');
  step('renewed');

  // ---- a held bash: Allow ----
  await go('approval');
  await page.waitForSelector('#approvals-count:not([hidden])');
  assert(await page.textContent('#approvals-count') === '1', 'the tab counts one waiting call');
  await view(page, 'approvals');
  await page.waitForSelector('[data-approval]');
  assert(await page.textContent('[data-approval] .tool') === 'bash', 'the held tool');
  const args = await page.textContent('[data-approval] pre.args');
  assert(args.split('\n').includes('command: ' + COMMAND), 'the arguments in full: ' + JSON.stringify(args));
  await shot(page, 'console-approvals');
  await phone.page.click('.tab[data-view="approvals"]');
  await phone.page.waitForSelector('[data-approval]');
  await shot(phone.page, 'phone-approvals');
  await h.noSidewaysScroll(phone.page, 'Approvals');
  await readmePicture(browser, page, phone.page);
  const approvalId = await page.getAttribute('[data-approval]', 'data-approval');
  await page.dblclick('[data-approval] button[data-action="allow"]');
  await page.waitForSelector('[data-approval]', { state: 'detached' });
  const sent = posts(seen, '/approvals/' + approvalId).length;
  assert(sent === 1, `a double click decides once (${sent} POSTs)`);
  await phone.page.waitForSelector('[data-approval]', { state: 'detached' });
  step('allowed');

  // ---- activity and the screen thumbnail ----
  await go('activity');
  await view(page, 'grants');
  await page.click(`[data-grant="${id}"] button[data-action="activity"]`);
  await page.waitForSelector('#view-activity:not([hidden])');
  assert(await page.inputValue('#activity-grant') === id, 'the card opens its own activity');
  await page.waitForSelector('#activity-list li[data-tool="bash"]');
  const row = await page.textContent('#activity-list li[data-tool="bash"]');
  assert(/ok/.test(row), 'the allowed bash ran: ' + row);
  const mcp = () => posts(seen, '/mcp');
  await page.waitForFunction(() => document.getElementById('thumb-note').textContent !== '');
  const firstShots = mcp().length;
  assert(firstShots >= 1, 'the thumbnail asked /mcp for a screenshot');
  // One more, to measure the period between request starts (this box has no display: each
  // failure doubles the wait, so a third would take 8 s more).
  await h.requests(page, seen, (r) => r.method === 'POST' && r.url.endsWith('/mcp'), firstShots + 1);
  const starts = mcp().map((r) => r.at);
  for (let i = 1; i < starts.length; i++) {
    assert(starts[i] - starts[i - 1] >= THUMB_MS - JITTER_MS, `screenshots ${starts[i] - starts[i - 1]} ms apart`);
  }
  const note = await page.textContent('#thumb-note');
  const img = await page.getAttribute('#thumb', 'src');
  assert((img && img.startsWith('data:image/')) || /^No screen: /.test(note), 'the thumbnail shows the screen or why not: ' + note);
  await shot(page, 'console-activity');
  await phone.page.click('.tab[data-view="activity"]');
  await phone.page.waitForSelector('#activity-list li[data-tool="bash"]');
  await shot(phone.page, 'phone-activity');
  await h.noSidewaysScroll(phone.page, 'Activity');
  await phone.page.click('.tab[data-view="grants"]');

  // Hidden: no screenshot and no grant list is asked for; visible again: both resume.
  const setVisibility = (v) => page.evaluate((v) => {
    Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => v });
    document.dispatchEvent(new Event('visibilitychange'));
  }, v);
  await setVisibility('hidden');
  const hiddenAt = Date.now();
  const shotsWhenHidden = mcp().length;
  await page.waitForTimeout(THUMB_MS + 1000); // a quiet period: nothing may arrive in it
  // Nor the calls, the halt or the journal (read on the same refresh).
  const late = seen.requests.filter((r) => r.at > hiddenAt + JITTER_MS
    && /^\/(mcp|attach|calls|halt|journals)$|\/journal$/.test(new URL(r.url).pathname));
  assert(mcp().length === shotsWhenHidden && late.length === 0, 'a hidden page asks nothing: ' + JSON.stringify(late));
  await setVisibility('visible');
  await h.requests(page, seen, (r) => r.method === 'POST' && r.url.endsWith('/mcp'), shotsWhenHidden + 1);
  step('activity');

  // ---- revoke ----
  await go('revoke');
  await view(page, 'grants');
  await page.click(`[data-grant="${id}"] button[data-action="revoke"]`);
  await page.click(`[data-grant="${id}"] button[data-action="revoke-go"]`);
  await page.waitForSelector(`#grants-ended [data-grant="${id}"]`);
  assert(await h.fact(page, id, 'ended') === 'cancelled', 'a revoked grant ends cancelled');
  assert(await page.isHidden(`[data-grant="${id}"] button[data-action="renew"]`), 'an ended grant has no renew');
  await shot(page, 'console-grants-ended');
  await phone.page.waitForSelector(`#grants-ended [data-grant="${id}"]`);
  await shot(phone.page, 'phone-grants-ended');
  step('revoked');

  // A deny list is either honoured (echoed in the grant JSON) or, on a handnode that
  // predates custom lists, loudly said to be ignored: never silently dropped.
  const p = phone.page;
  await p.click('.tab[data-view="lend"]');
  await p.fill('#lend-runtime', 'ws://127.0.0.1:1');
  await p.fill('#lend-session', 'deny-check');
  await p.check('input[name="profile"][value="desktop"]');
  await p.check('input[name="approve"][value="none"]');
  await p.fill('#lend-deny', 'key, mouse');
  await p.fill('#lend-credential', 'unused-secret');
  await p.click('#lend-submit');
  await p.waitForSelector('#view-grants:not([hidden]) #grants-live [data-grant]');
  const other = await p.getAttribute('#grants-live [data-grant]', 'data-grant');
  const echoed = await p.evaluate(async (id) => {
    const r = await fetch('/attach/' + id, { headers: { Authorization: 'Bearer ' + sessionStorage.getItem('handnode.token') } });
    return (await r.json()).deny;
  }, other);
  const said = await p.textContent('#banner');
  if (echoed === undefined) {
    assert(/ignored deny/.test(said) && await p.isVisible('#banner.bad'), 'an ignored deny is said: ' + said);
  } else {
    assert(JSON.stringify(echoed) === JSON.stringify(['key', 'mouse']), 'deny as sent: ' + JSON.stringify(echoed));
  }
  await shot(p, 'phone-lend-deny');
  await p.click(`[data-grant="${other}"] button[data-action="revoke"]`);
  await p.click(`[data-grant="${other}"] button[data-action="revoke-go"]`);
  await p.waitForSelector(`#grants-ended [data-grant="${other}"]`);

  // files: the folder is required (the error lands on the folder field), then lent, shown
  // on the card, and sent again on renew.
  await p.click('.tab[data-view="lend"]');
  await p.fill('#lend-runtime', 'ws://127.0.0.1:1');
  await p.fill('#lend-session', 'folder-check');
  await p.check('input[name="profile"][value="files"]');
  await p.fill('#lend-deny', '');
  await p.fill('#lend-folder', '');
  assert(!(await p.isVisible('#lend-warning')), 'files is a boundary: no shell warning');
  await p.fill('#lend-credential', 'unused-secret');
  await p.click('#lend-submit');
  await p.waitForSelector('[data-error-for="folder"]:not(:empty)');
  const folderError = await p.textContent('[data-error-for="folder"]');
  assert(/needs "folder"/.test(folderError), 'the missing folder is said by its field: ' + folderError);
  await p.fill('#lend-folder', FOLDER);
  await p.fill('#lend-credential', 'unused-secret');
  await p.click('#lend-submit');
  await p.waitForSelector('#view-grants:not([hidden]) #grants-live [data-grant]');
  const lent = await p.getAttribute('#grants-live [data-grant]', 'data-grant');
  const folderCard = await p.textContent(`[data-grant="${lent}"]`);
  assert(folderCard.includes(FOLDER), "the card shows the lent folder: " + folderCard);
  await shot(p, 'phone-lend-folder');
  await p.click(`[data-grant="${lent}"] button[data-action="revoke"]`);
  await p.click(`[data-grant="${lent}"] button[data-action="revoke-go"]`);
  await p.waitForSelector(`#grants-ended [data-grant="${lent}"]`);

  // One long-poll at a time: each GET /approvals waits for a change, and this session made
  // two (the held call, its Allow). A loop faster than the long-poll would show hundreds.
  const polls = seen.requests.filter((r) => r.method === 'GET' && new URL(r.url).pathname === '/approvals');
  assert(polls.length <= 6, `${polls.length} GET /approvals in one session`);

  h.refuseSurprises(seen, [400, 401]);
  h.refuseSurprises(phone.seen, [400, 401]); // 400: files without a folder
});
