// The console's live view of a grant's own display (contract §23), at desktop and phone
// sizes: noVNC from /console/novnc/ draws the display; text the agent types shows in the
// view (the canvas's pixels change after tests/console.rs types, and the time it took is
// reported, not asserted: speed is the bench's); Take over, then a click in the view moves
// the display's pointer (read back by the grant's own xdotool on the Rust side); Give back.
'use strict';

const h = require('./harness.cjs');
const { assert, step, go, shot } = h;

const GRANT = h.env('OWN_GRANT');
const [W, H] = h.env('OWN_SIZE').split('x').map(Number);

/** A fingerprint of the view's pixels: the canvas noVNC draws into, as a PNG (read back
 * without getImageData, which would warn about repeated readbacks). */
function fingerprint(page) {
  return page.evaluate(() => document.querySelector('#live canvas').toDataURL());
}

h.run(async (browser) => {
  for (const [name, viewport] of [['desktop', { width: 1180, height: 820 }], ['phone', { width: 390, height: 844 }]]) {
    const { context, page, seen } = await h.openSignedIn(browser, { viewport });
    await page.click('.tab[data-view="activity"]');
    await page.waitForSelector('#view-activity:not([hidden])');
    await page.waitForSelector('#live:not([hidden]) canvas');
    await page.waitForFunction(() => /^Live/.test(document.getElementById('thumb-note').textContent));
    const tickets = seen.requests.filter((r) => r.url.endsWith(`/attach/${GRANT}/view-ticket`));
    assert(tickets.length >= 1, 'the view asked for a ticket');
    assert(!seen.requests.some((r) => /ticket|token/.test(new URL(r.url).search)), 'no credential in a URL');
    assert(await page.textContent('#wheel-button') === 'Take over', 'the agent has the wheel at first');
    // The whole display fits the page's width (a phone sees it scaled, not cropped).
    const box = await page.$eval('#live canvas', (c) => {
      const r = c.getBoundingClientRect();
      return { left: r.left, top: r.top, width: r.width, height: r.height };
    });
    assert(box.width > 0 && box.left >= 0 && box.left + box.width <= viewport.width + 1,
      `the view fits ${viewport.width} px: ${JSON.stringify(box)}`);
    assert(Math.abs(box.width / box.height - W / H) < 0.02, `the display's shape is kept: ${JSON.stringify(box)}`);

    // The agent types; the view changes.
    const before = await fingerprint(page);
    step(`ready-${name}`, box);
    await go(`typed-${name}`);
    const typedAt = Date.now();
    await page.waitForFunction((b) => document.querySelector('#live canvas').toDataURL() !== b,
      before, { polling: 20 });
    const shownMs = Date.now() - typedAt;
    await shot(page, `console-live-${name}`);
    step(`shown-${name}`, { ms: shownMs });

    // Take over, then a click in the view lands on the display where it was clicked.
    await page.click('#wheel-button');
    await page.waitForFunction(() => document.getElementById('wheel-button').textContent === 'Give back');
    assert(/You have the wheel/.test(await page.textContent('#wheel-note')), 'the note says who drives');
    const target = name === 'desktop' ? [100, 120] : [200, 150];
    // Measured again where it is now (the page around it may have moved since).
    await page.$eval('#live canvas', (c) => c.scrollIntoView({ block: 'center' }));
    const now = await page.$eval('#live canvas', (c) => {
      const r = c.getBoundingClientRect();
      return { left: r.left, top: r.top, width: r.width, height: r.height };
    });
    Object.assign(box, now);
    await page.mouse.click(box.left + (target[0] + 0.5) * box.width / W, box.top + (target[1] + 0.5) * box.height / H);
    await shot(page, `console-live-${name}-wheel`);
    // A display pixel is smaller than a CSS pixel on a phone: noVNC's rounding may land one
    // of those away.
    step(`clicked-${name}`, { x: target[0], y: target[1], within: Math.ceil(W / box.width) });
    await go(`moved-${name}`);
    await page.click('#wheel-button');
    await page.waitForFunction(() => document.getElementById('wheel-button').textContent === 'Take over');
    step(`gave-${name}`);
    await go(`next-${name}`);
    // 401: the page's first look before it signs in.
    h.refuseSurprises(seen, [401]);
    await context.close();
  }
});
