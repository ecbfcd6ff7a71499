// Shared by the console's browser tests (tests/console.rs runs them): Debian's chromium
// through playwright-core, a line protocol with the Rust test on stdin/stdout, and a
// record of everything the page did that a test may want to refuse (console errors, page
// errors, dialogs, requests).
//
// To the Rust test:   "@<step> <json>"   (a step reached; "@fail" with a message, "@done")
// From the Rust test: "go <step>"        (the pod has done its part; carry on)
'use strict';

const fs = require('fs');
const path = require('path');
const readline = require('readline');

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (run this through cargo test --test console)`);
  return v;
};

const { chromium } = require(env('PLAYWRIGHT_CORE'));
const BASE = env('CONSOLE_URL');
const TOKEN = env('CONSOLE_TOKEN');
const SHOTS = env('SCREENSHOTS');
/** Longest any one wait here may take before the test fails (ms). */
const STEP_MS = Number(process.env.CONSOLE_STEP_MS || 30000);

const input = readline.createInterface({ input: process.stdin });
const queued = [];
const waiters = [];
input.on('line', (line) => {
  const w = waiters.shift();
  if (w) w(line); else queued.push(line);
});

function step(name, data) {
  process.stdout.write(`@${name} ${JSON.stringify(data === undefined ? {} : data)}\n`);
}

/** Wait for the Rust test's "go <name>". */
function go(name) {
  return new Promise((resolve, reject) => {
    const check = (line) => (line === `go ${name}` ? resolve()
      : reject(new Error(`expected "go ${name}" from the Rust test, got "${line}"`)));
    if (queued.length) return check(queued.shift());
    const timer = setTimeout(() => reject(new Error(`watchdog: no "go ${name}" within ${STEP_MS} ms`)), STEP_MS);
    waiters.push((line) => { clearTimeout(timer); check(line); });
  });
}

function assert(cond, message) {
  if (!cond) throw new Error('assertion failed: ' + message);
}

/** Everything a page did that a test may refuse, recorded from the start. */
function watch(page) {
  const seen = { console: [], pageErrors: [], dialogs: [], requests: [] };
  page.on('console', (m) => {
    if (m.type() === 'error' || m.type() === 'warning') seen.console.push(`${m.type()}: ${m.text()}`);
  });
  page.on('pageerror', (e) => seen.pageErrors.push(String(e)));
  page.on('dialog', (d) => { seen.dialogs.push(d.message()); d.dismiss().catch(() => {}); });
  page.on('request', (r) => seen.requests.push({ method: r.method(), url: r.url(), at: Date.now() }));
  return seen;
}

/**
 * Fail on any dialog, page error, request to another origin, or console message other than
 * the failed-resource lines of the statuses a test caused on purpose.
 */
function refuseSurprises(seen, allowedStatuses) {
  assert(seen.dialogs.length === 0, 'a dialog opened (script ran): ' + JSON.stringify(seen.dialogs));
  assert(seen.pageErrors.length === 0, 'page errors: ' + JSON.stringify(seen.pageErrors));
  const origin = new URL(BASE).origin;
  const foreign = seen.requests.filter((r) => !r.url.startsWith('data:') && new URL(r.url).origin !== origin);
  assert(foreign.length === 0, 'requests to another origin: ' + JSON.stringify(foreign));
  const expected = new RegExp(`^error: Failed to load resource: the server responded with a status of (${allowedStatuses.join('|')}) `);
  const other = seen.console.filter((m) => !expected.test(m));
  assert(other.length === 0, 'console errors or warnings: ' + JSON.stringify(other));
}

/** Resolve once `seen` holds `n` requests matching `pred` (a signal, not a timer). */
function requests(page, seen, pred, n) {
  return new Promise((resolve, reject) => {
    const count = () => seen.requests.filter(pred).length;
    if (count() >= n) return resolve();
    const timer = setTimeout(() => {
      page.off('request', check);
      reject(new Error(`watchdog: ${count()} of ${n} expected requests within ${STEP_MS} ms`));
    }, STEP_MS);
    // Registered after watch()'s listener, so `seen` already holds this request.
    function check() {
      if (count() >= n) { clearTimeout(timer); page.off('request', check); resolve(); }
    }
    page.on('request', check);
  });
}

async function shot(page, name) {
  fs.mkdirSync(SHOTS, { recursive: true });
  const file = path.join(SHOTS, name + '.png');
  // From the top: a full-page capture of a scrolled page draws the sticky header mid-page.
  await page.evaluate(() => { window.scrollTo(0, 0); window.getSelection().removeAllRanges(); });
  await page.screenshot({ path: file, fullPage: true });
  step('screenshot', { file });
}

async function signIn(page, token) {
  await page.fill('#login-token', token);
  await page.click('#login-submit');
}

/** Open the console in a fresh context of `browser` and sign in with the right token. */
async function openSignedIn(browser, contextOptions, query) {
  const context = await browser.newContext(contextOptions);
  const page = await context.newPage();
  page.setDefaultTimeout(STEP_MS);
  const seen = watch(page);
  await page.goto(BASE + (query || ''));
  await page.waitForSelector('#view-login:not([hidden])');
  await signIn(page, TOKEN);
  await page.waitForSelector('#view-grants:not([hidden])');
  return { context, page, seen };
}

/** The text of the grant card's `dd` after the `dt` named `name`. */
function fact(page, id, name) {
  return page.evaluate(([id, name]) => {
    const card = document.querySelector(`[data-grant="${id}"]`);
    if (!card) return null;
    for (const dt of card.querySelectorAll('dt')) {
      if (dt.textContent === name) return dt.hidden ? '' : dt.nextElementSibling.textContent;
    }
    return null;
  }, [id, name]);
}

async function noSidewaysScroll(page, what) {
  const [scroll, inner] = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
  assert(scroll <= inner, `${what} scrolls sideways on a phone: ${scroll} > ${inner}`);
}

async function run(body) {
  let browser;
  try {
    browser = await chromium.launch({
      executablePath: env('CHROMIUM'),
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
        '--disable-component-update', '--disable-sync', '--no-first-run'],
      timeout: STEP_MS,
    });
    await body(browser);
    step('done');
  } catch (e) {
    step('fail', { message: String((e && e.stack) || e) });
    process.exitCode = 1;
  } finally {
    if (browser) await browser.close().catch(() => {});
    input.close();
  }
}

module.exports = {
  BASE, TOKEN, STEP_MS, env, step, go, assert, watch, refuseSurprises, requests, shot, signIn,
  openSignedIn, fact, noSidewaysScroll, run,
};
