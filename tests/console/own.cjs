// The console's Activity of a grant with a display of its own (contract §19): the
// thumbnail shows that display, from GET /attach/{id}/screen, and never asks /mcp for the
// owner's screen; the journal shows the picture taken after the agent's key call. tests/console.rs starts the display (one screenshot by the agent) first.
'use strict';

const h = require('./harness.cjs');
const { assert, step, shot } = h;

const GRANT = h.env('OWN_GRANT');

h.run(async (browser) => {
  // ?live=0: this is the screenshot's test; live.cjs is the live view's.
  const { page, seen } = await h.openSignedIn(browser, { viewport: { width: 1180, height: 820 } }, '?live=0');
  await page.click('.tab[data-view="activity"]');
  await page.waitForSelector('#view-activity:not([hidden])');
  assert(await page.inputValue('#activity-grant') === GRANT, 'the only grant is chosen');
  await page.waitForFunction(() => {
    const img = document.getElementById('thumb');
    return img && !img.hidden && img.src.startsWith('data:image/jpeg');
  });
  const note = await page.textContent('#thumb-note');
  assert(/own display/.test(note), 'the note says whose screen it is: ' + note);
  const screens = seen.requests.filter((r) => r.url.endsWith(`/attach/${GRANT}/screen`));
  const owner = seen.requests.filter((r) => r.url.endsWith('/mcp'));
  assert(screens.length >= 1, "the thumbnail asked for the grant's screen");
  assert(owner.length === 0, "the owner's screen was asked for: " + owner.length);
  // The journal's picture of the screen after the agent's key call: a data: JPEG, decoded.
  await page.waitForFunction(() => {
    const img = document.querySelector('#activity-list li[data-tool="key"] img.shot');
    return img && img.complete && img.naturalWidth > 0 && img.src.startsWith('data:image/jpeg;base64,');
  });
  assert(await page.$('#activity-list li[data-tool="screenshot"] img.shot') === null, 'a screenshot changes no screen: no picture');
  await shot(page, 'console-own-display');
  step('shown', { screens: screens.length });

  // Lend one from the form: the checkbox asks for a screen of its own; with a profile
  // without display tools the refusal lands on that field.
  await page.click('.tab[data-view="lend"]');
  await page.fill('#lend-runtime', 'ws://127.0.0.1:1');
  await page.fill('#lend-session', 'own-lent');
  await page.check('input[name="profile"][value="custom"]');
  await page.fill('#lend-allow', 'sys_info');
  await page.check('#lend-own-display');
  await page.fill('#lend-credential', 'unused-secret');
  await page.click('#lend-submit');
  await page.waitForFunction(() => document.querySelector('[data-error-for="display"]').textContent !== '');
  const why = await page.textContent('[data-error-for="display"]');
  assert(/needs a profile with display tools/.test(why), 'the refusal is on the display field: ' + why);
  await page.check('input[name="profile"][value="desktop"]');
  await page.click('#lend-submit');
  await page.waitForSelector('#view-grants:not([hidden])');
  await page.waitForFunction(() => document.querySelectorAll('#grants-live [data-grant]').length === 2);
  const lent = await page.getAttribute('#grants-live [data-grant]:not([data-grant="' + GRANT + '"])', 'data-grant');
  assert(/^its own/.test(await h.fact(page, lent, 'screen')), 'the card says the screen is its own');
  assert(/running/.test(await h.fact(page, GRANT, 'screen')), 'the running one says so');
  step('lent', {});
  h.refuseSurprises(seen, [400, 401]);
});
