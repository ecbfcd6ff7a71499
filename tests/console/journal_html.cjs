// Opens a journal.html file (the argument) in Debian's chromium with the network off and
// every request refused, as an auditor would offline; prints one JSON line of what it saw:
// the rows, which tools, how many thumbnails decoded, and any request or script at all.
// tests/journal.rs runs it.
'use strict';

const path = require('path');
const { chromium } = require(process.env.PLAYWRIGHT_CORE);

(async () => {
  const file = process.argv[2];
  const shots = process.env.SCREENSHOTS;
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM, args: ['--no-sandbox'] });
  const requests = [];
  const errors = [];
  try {
    const context = await browser.newContext({ offline: true, viewport: { width: 1280, height: 800 } });
    await context.route('**/*', (route) => {
      const url = route.request().url();
      if (url.startsWith('file:') || url.startsWith('data:')) return route.continue();
      requests.push(url);
      return route.abort();
    });
    const page = await context.newPage();
    page.on('pageerror', (e) => errors.push(String(e)));
    page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
    await page.goto('file://' + path.resolve(file));
    const seen = await page.evaluate(() => {
      const rows = [...document.querySelectorAll('#records tr')];
      return {
        rows: rows.length,
        tools: rows.map((r) => (r.children[2] && r.children[2].querySelector('b') ? r.children[2].querySelector('b').textContent : '')),
        images: [...document.querySelectorAll('img')].map((i) => ({ complete: i.complete, width: i.naturalWidth })),
        scripts: document.scripts.length,
        text: document.body.innerText.slice(0, 4000),
      };
    });
    if (shots) {
      await page.screenshot({ path: path.join(shots, 'journal-html.png'), fullPage: true });
      await page.setViewportSize({ width: 390, height: 844 });
      await page.screenshot({ path: path.join(shots, 'journal-html-phone.png'), fullPage: true });
    }
    process.stdout.write(JSON.stringify({ ...seen, requests, errors }) + '\n');
  } finally {
    await browser.close();
  }
})().catch((e) => {
  process.stdout.write(JSON.stringify({ fatal: String(e && e.stack || e) }) + '\n');
  process.exit(1);
});
