// The console's live view of the box's own display (contract §23): a grant without
// "display":"own" is shown live through x11vnc and noVNC, and the page says plainly that it
// is the lender's own screen. At 1180×820: text the agent types into an xterm on the box's
// display changes the view; Take over, the Rust side sees the agent's mouse refused; Give
// back. On a phone (390×844, touch): a tap on the view moves the box's pointer only while
// the lender holds the wheel (the pointer is read back by the Rust side with xdotool).
// BOX_MODE=fallback: without x11vnc the page shows the screenshot, named the same way.
'use strict';

const h = require('./harness.cjs');
const { assert, step, go, shot } = h;

const GRANT = h.env('BOX_GRANT');
const [W, H] = h.env('BOX_SIZE').split('x').map(Number);
/** Where the xterm is on the box's display: x, y, width, height in display pixels. */
const TERM = h.env('BOX_TERM').split(',').map(Number);

/** A fingerprint of a region of the view: copied into a small canvas and read as a PNG
 * (noVNC's canvas holds the display at its own size; getImageData on it would warn about
 * repeated readbacks). */
function pixelsOf([x, y, w, hh]) {
  const src = document.querySelector('#live canvas');
  const c = document.createElement('canvas');
  c.width = w;
  c.height = hh;
  c.getContext('2d').drawImage(src, x, y, w, hh, 0, 0, w, hh);
  return c.toDataURL();
}

/** Whether the view shows more than one colour (a frame came, not a blank canvas). */
function notBlank() {
  const src = document.querySelector('#live canvas');
  const c = document.createElement('canvas');
  c.width = 64;
  c.height = 40;
  const ctx = c.getContext('2d', { willReadFrequently: true });
  ctx.drawImage(src, 0, 0, 64, 40);
  const d = ctx.getImageData(0, 0, 64, 40).data;
  for (let i = 4; i < d.length; i += 4) {
    if (d[i] !== d[0] || d[i + 1] !== d[1] || d[i + 2] !== d[2]) return true;
  }
  return false;
}

/** The two above, defined in the page for waitForFunction (through the DevTools protocol,
 * which the console's CSP does not govern). */
function helpers(page) {
  return page.evaluate(`window.livebox = { pixelsOf: ${pixelsOf}, notBlank: ${notBlank} }`);
}

async function canvasBox(page) {
  await page.$eval('#live canvas', (c) => c.scrollIntoView({ block: 'center' }));
  return page.$eval('#live canvas', (c) => {
    const r = c.getBoundingClientRect();
    return { left: r.left, top: r.top, width: r.width, height: r.height };
  });
}

/** The Activity view, live: the note says whose screen it is. */
async function openLive(browser, options) {
  const opened = await h.openSignedIn(browser, options);
  const { page, seen } = opened;
  await page.click('.tab[data-view="activity"]');
  await page.waitForSelector('#view-activity:not([hidden])');
  assert(await page.inputValue('#activity-grant') === GRANT, 'the only grant is chosen');
  await page.waitForSelector('#live:not([hidden]) canvas');
  await page.waitForFunction(() => /^Live: your own screen/.test(document.getElementById('thumb-note').textContent));
  const note = await page.textContent('#thumb-note');
  assert(/not a sandbox/.test(note), 'the note says it is the lender\'s own desktop: ' + note);
  assert(seen.requests.some((r) => r.url.endsWith(`/attach/${GRANT}/view-ticket`)), 'the view asked for a ticket');
  assert(!seen.requests.some((r) => /ticket|token/.test(new URL(r.url).search)), 'no credential in a URL');
  // No screenshot of the owner's screen while the live view shows it.
  assert(!seen.requests.some((r) => r.url.endsWith('/mcp')), 'the owner\'s screenshot was taken');
  assert(await page.textContent('#wheel-button') === 'Take over', 'the agent has the wheel at first');
  const box = await canvasBox(page);
  assert(box.width > 0 && box.left >= 0 && box.left + box.width <= options.viewport.width + 1,
    `the view fits ${options.viewport.width} px: ${JSON.stringify(box)}`);
  // The box's display says its size only when the view connects: the frame takes its shape.
  await page.waitForFunction(([w, hh]) => {
    const r = document.querySelector('#live canvas').getBoundingClientRect();
    return r.height > 0 && Math.abs(r.width / r.height - w / hh) < 0.02;
  }, [W, H]);
  await helpers(page);
  // The first frame: the display as it is, not noVNC's empty canvas.
  await page.waitForFunction(() => window.livebox.notBlank(), undefined, { polling: 100 });
  return opened;
}

async function wheel(page, take) {
  await page.click('#wheel-button');
  const want = take ? 'Give back' : 'Take over';
  await page.waitForFunction((w) => document.getElementById('wheel-button').textContent === w, want);
}

/** Without x11vnc (the grant JSON says "live_view":false): the screenshot, named as the
 * lender's own screen, and no view asked for. */
async function fallback(browser) {
  const { context, page, seen } = await h.openSignedIn(browser, { viewport: { width: 390, height: 844 } });
  await page.click('.tab[data-view="activity"]');
  await page.waitForSelector('#view-activity:not([hidden])');
  await page.waitForFunction(() => {
    const img = document.getElementById('thumb');
    return img && !img.hidden && img.src.startsWith('data:image/jpeg');
  });
  const note = await page.textContent('#thumb-note');
  assert(/^Your own screen: this box's desktop, which the agent sees and can drive \(not a sandbox\), taken /.test(note),
    'the note says whose screen it is: ' + note);
  assert(await page.textContent('#screen-title') === 'Screen: yours, this box\'s desktop', 'the heading says whose');
  assert(await page.$eval('#live', (e) => e.hidden), 'no live view');
  assert(!seen.requests.some((r) => /\/view(-ticket)?$/.test(r.url)), 'a view was asked for');
  assert(seen.requests.some((r) => r.method === 'POST' && r.url.endsWith('/mcp')), 'the owner\'s screenshot');
  await shot(page, 'console-livebox-fallback');
  h.refuseSurprises(seen, [401]);
  await context.close();
}

h.run(async (browser) => {
  if (process.env.BOX_MODE === 'fallback') return fallback(browser);
  // ---- at a desk ----
  {
    const viewport = { width: 1180, height: 820 };
    const { context, page, seen } = await openLive(browser, { viewport });
    const before = await page.evaluate((term) => window.livebox.pixelsOf(term), TERM);
    step('ready-desktop');
    await go('typed');
    const typedAt = Date.now();
    await page.waitForFunction(([b, term]) => window.livebox.pixelsOf(term) !== b, [before, TERM], { polling: 50 });
    step('shown', { ms: Date.now() - typedAt });
    await shot(page, 'console-livebox-desktop');

    await wheel(page, true);
    const note = await page.textContent('#wheel-note');
    assert(/You have the wheel: your clicks and keys reach your own screen, and every grant on it/.test(note),
      'the note says whose screen and that the wheel is shared: ' + note);
    assert(await page.$eval('#live', (e) => e.classList.contains('lender')), 'the frame shows who drives');
    await shot(page, 'console-livebox-desktop-wheel');
    step('took-desktop');
    await go('refused');
    await wheel(page, false);
    step('gave-desktop');
    await go('next-desktop');
    h.refuseSurprises(seen, [401]);
    await context.close();
  }

  // ---- on a phone, by touch ----
  {
    const viewport = { width: 390, height: 844 };
    const { context, page, seen } = await openLive(browser, { viewport, hasTouch: true, isMobile: true });
    await h.noSidewaysScroll(page, 'the live view');
    const tap = async ([x, y]) => {
      const b = await canvasBox(page);
      await page.touchscreen.tap(b.left + (x + 0.5) * b.width / W, b.top + (y + 0.5) * b.height / H);
      // A display pixel is smaller than a CSS pixel here: noVNC's rounding may land one of
      // those away.
      return { x, y, within: Math.ceil(W / b.width) };
    };
    step('ready-phone');
    await go('parked');
    step('tapped-watching', await tap([600, 500]));
    await go('not-moved');
    await page.tap('#wheel-button');
    await page.waitForFunction(() => document.getElementById('wheel-button').textContent === 'Give back');
    step('tapped-wheel', await tap([400, 300]));
    await go('moved');
    await shot(page, 'console-livebox-phone-wheel');
    await page.tap('#wheel-button');
    await page.waitForFunction(() => document.getElementById('wheel-button').textContent === 'Take over');
    step('gave-phone');
    await go('parked-again');
    step('tapped-given-back', await tap([700, 600]));
    await go('next-phone');
    h.refuseSurprises(seen, [401]);
    await context.close();
  }
});
