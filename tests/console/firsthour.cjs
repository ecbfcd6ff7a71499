// A new user's first hour (issue 30), on a desktop (1280×800) and on a phone (390×844):
// grant cards show what is lent, and a renewal with a new secret says it is not checked yet; Lend says before submit that `browser` needs
// --browser-command, and shows every problem at once; the "Lent to …" banner goes when that
// grant is revoked; Activity opens on the grant that has calls, and on a box without a
// display backs off the failing screenshot instead of asking every 2 s.
'use strict';

const h = require('./harness.cjs');
const { assert, step, shot } = h;

const RUNTIME = h.env('CONSOLE_RUNTIME');
const BUSY = h.env('BUSY_GRANT'); // desktop, deny bash,bash_start, approve key; has calls
const QUIET = h.env('QUIET_GRANT'); // newer, attached, no calls
const SIZES = [
  ['desktop', { viewport: { width: 1280, height: 800 } }],
  ['phone', { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 }],
];
/** How long the page is watched for screenshot calls once the first one failed (ms). */
const WATCH_MS = 5000;

const posts = (seen, suffix) => seen.requests.filter((r) => r.method === 'POST' && r.url.endsWith(suffix));

h.run(async (browser) => {
  for (const [size, options] of SIZES) {
    const { page, seen } = await h.openSignedIn(browser, options, '?refresh_ms=250');
    await page.waitForSelector(`[data-grant="${BUSY}"]`);

    // ---- what is lent ----
    const tools = await h.fact(page, BUSY, 'tools');
    // No upstream here: the grant lends the box's own tools only, as its tools/list does.
    assert(/^sys_info, screenshot, mouse, key, /.test(tools) && !/\bbash\b/.test(tools) && !/browser tool/.test(tools), `${size}: the tools lent: ${tools}`);
    assert(await h.fact(page, BUSY, 'deny') === 'bash, bash_start', `${size}: the deny list`);
    assert(await h.fact(page, BUSY, 'approve') === 'key', `${size}: the approve list`);
    assert(await h.fact(page, BUSY, 'lent by') === 'you, with the admin token', `${size}: who lent it, in words`);
    const cards = await page.textContent('#grants-live');
    assert(!/lent by\s*token/.test(cards), `${size}: no "lent by token": ${cards}`);
    if (size === 'desktop') {
      // Renewing with another secret: accepted, and said to be unchecked until the next dial.
      const card = `[data-grant="${BUSY}"]`;
      await page.click(`${card} button[data-action="renew"]`);
      await page.fill(`${card} form input[type="password"]`, 'a-different-secret');
      await page.click(`${card} button[data-action="renew-go"]`);
      await page.waitForFunction((card) => /^Renewed until/.test(document.querySelector(`${card} .note`).textContent), card);
      const note = await page.textContent(`${card} .note`);
      assert(/new secret is used at the next dial and is not checked now/.test(note), 'renewal note: ' + note);
    }
    await shot(page, `firsthour-grants-${size}`);
    if (size === 'phone') await h.noSidewaysScroll(page, 'Grants');

    // ---- Lend: browser says why before submit; every problem at once, nothing sent ----
    await page.click('.tab[data-view="lend"]');
    await page.waitForSelector('#view-lend:not([hidden])');
    assert(await page.isDisabled('input[name="profile"][value="browser"]'), `${size}: browser is not offered`);
    assert(await page.isVisible('label:has(input[value="browser"]) .unavailable'), `${size}: and says why`);
    await page.fill('#lend-runtime', 'http://not-a-pod');
    await page.fill('#lend-session', 'Not_A_Session');
    await page.fill('#lend-credential', '');
    const before = posts(seen, '/attach').length;
    await page.click('#lend-submit');
    for (const field of ['runtime', 'session', 'credential']) {
      await page.waitForFunction((f) => document.querySelector(`[data-error-for="${f}"]`).textContent !== '', field);
    }
    assert(posts(seen, '/attach').length === before, `${size}: nothing is sent while the form has problems`);
    await shot(page, `firsthour-lend-errors-${size}`);
    if (size === 'phone') await h.noSidewaysScroll(page, 'Lend');

    // ---- the "Lent to …" banner goes with its grant ----
    const session = `banner-${size}`;
    await page.fill('#lend-runtime', RUNTIME);
    await page.fill('#lend-session', session);
    await page.fill('#lend-credential', 'banner-secret');
    await page.click('#lend-submit');
    await page.waitForFunction((s) => document.getElementById('banner').textContent.startsWith(`Lent to ${s}`), session);
    const lent = await page.evaluate(async (s) => {
      const auth = { Authorization: 'Bearer ' + sessionStorage.getItem('handnode.token') };
      const list = await (await fetch('/attach', { headers: auth })).json();
      const g = list.grants.find((x) => x.session === s && x.state !== 'ended');
      // Revoked elsewhere (another tab, the CLI): this page learns it from its next read.
      await fetch('/attach/' + g.id, { method: 'DELETE', headers: auth });
      return g.id;
    }, session);
    await page.waitForSelector(`#grants-ended [data-grant="${lent}"]`);
    await page.waitForSelector('#banner', { state: 'hidden' });
    step('banner-gone', { size });

    // ---- Activity: the grant with calls; the failing screenshot backs off ----
    await page.click('.tab[data-view="activity"]');
    await page.waitForSelector('#view-activity:not([hidden])');
    assert(await page.inputValue('#activity-grant') === BUSY, `${size}: Activity opens on the grant with calls, not the newest`);
    await page.waitForSelector('#activity-list li[data-tool="sys_info"]');
    await page.waitForFunction(() => /Trying again in/.test(document.getElementById('thumb-note').textContent));
    const note = await page.textContent('#thumb-note');
    assert(/^No screen: /.test(note), `${size}: says why: ${note}`);
    const failedAt = posts(seen, '/mcp').length;
    await page.waitForTimeout(WATCH_MS); // a window in which a 2 s poll would ask twice
    const more = posts(seen, '/mcp').length - failedAt;
    assert(more <= 1, `${size}: ${more} screenshot calls in ${WATCH_MS} ms after a failure`);
    await shot(page, `firsthour-activity-${size}`);
    if (size === 'phone') await h.noSidewaysScroll(page, 'Activity');
    assert(QUIET !== BUSY, 'two grants');
    h.refuseSurprises(seen, [401]); // the page's first read, before signing in
    await page.context().close();
  }
});
