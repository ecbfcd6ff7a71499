// The console's Activity of a grant with a display of its own (contract §19): the
// thumbnail shows that display, from GET /attach/{id}/screen, and never asks /mcp for the
// owner's screen. tests/console.rs starts the display (one screenshot by the agent) first.
'use strict';

const h = require('./harness.cjs');
const { assert, step, shot } = h;

const GRANT = h.env('OWN_GRANT');

h.run(async (browser) => {
  const { page, seen } = await h.openSignedIn(browser, { viewport: { width: 1180, height: 820 } });
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
  await shot(page, 'console-own-display');
  step('shown', { screens: screens.length });
  h.refuseSurprises(seen, [401]);
});
