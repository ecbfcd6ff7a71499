// What a person is shown before allowing a call (contract §14), in the console: the Rust
// test holds the three spoofs of issue 22 (hidden code in env, a command padded with
// spaces, a right-to-left override) and compares each card's text with the daemon's own
// rendering (src/reveal.rs). Here: every card shown, as text, no raw bidi control or long
// run of spaces anywhere on the page.
'use strict';

const h = require('./harness.cjs');
const { assert, step, shot } = h;

const COUNT = Number(h.env('REVEAL_COUNT'));

h.run(async (browser) => {
  const { page, seen } = await h.openSignedIn(browser, { viewport: { width: 1180, height: 820 } });
  await page.click('.tab[data-view="approvals"]');
  await page.waitForFunction((n) => document.querySelectorAll('[data-approval]').length === n, COUNT);
  const cards = await page.evaluate(() => [...document.querySelectorAll('[data-approval]')]
    .map((c) => ({ id: c.dataset.approval, args: c.querySelector('pre.args').textContent })));
  const text = await page.evaluate(() => document.body.innerText);
  assert(!/[\u202a-\u202e\u2066-\u2069\u200b-\u200d\u2060\ufeff]/.test(text), 'a raw bidi or invisible character on the page');
  assert(!/ {4}/.test(cards.map((c) => c.args).join('\n')), 'a long run of spaces in the arguments');
  await shot(page, 'reveal-approvals');
  step('shown', { cards });
  h.refuseSurprises(seen, [401]);
});
