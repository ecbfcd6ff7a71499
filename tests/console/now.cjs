// The lender sees what runs, and stops it (issue 38, contract §22; tests/console.rs sets the
// stage): a desktop (1280×800) and a phone (390×844) page. The busy grant's card lists its
// running bash, held key and bash_start job with their arguments and a ticking time; Stop
// stops each (once on a double click); Approvals keeps the decision just made and the held
// call the Stop denied; Stop everything is one click and one confirm, and its banner shows
// on every view of both pages (the phone learns of it on its refresh) until Resume; Activity
// shows the journals of the busy grant and of an ended one, in order, and downloads
// journal.html. A screenshot of each, at both sizes.
'use strict';

const fs = require('fs');
const h = require('./harness.cjs');
const { assert, step, go, shot } = h;

const BUSY = h.env('BUSY_GRANT');
const DONE = h.env('DONE_GRANT');
const JOB = h.env('JOB_ID');
const STOPPED = 'stopped by the person who lent the box';
const REASON = 'lunch break';
const DESKTOP = { viewport: { width: 1280, height: 800 } };
const PHONE = { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 };
const QUERY = '?refresh_ms=300&calls_ms=300';
const VIEWS = ['grants', 'lend', 'approvals', 'activity'];
const NOW = `[data-now="${BUSY}"]`;
const YOU = 'you, with the admin token';

async function view(page, name) {
  await page.click(`.tab[data-view="${name}"]`);
  await page.waitForSelector(`#view-${name}:not([hidden])`);
}

/** The Now rows of the busy grant's card. */
function nowRows(page) {
  return page.evaluate((now) => [...document.querySelectorAll(`${now} li[data-call]`)].map((li) => ({
    id: li.dataset.call,
    tool: li.dataset.tool,
    state: li.dataset.state,
    shown: li.querySelector('.tool').textContent,
    args: li.querySelector('pre.args').textContent,
    elapsed: li.querySelector('[data-elapsed]').textContent,
  })), NOW);
}

/** The journal rows shown: tool, outcome chip and every line of text, in page order. */
function journalRows(page) {
  return page.evaluate(() => [...document.querySelectorAll('#activity-list li[data-seq]')].map((li) => ({
    seq: Number(li.dataset.seq),
    tool: li.dataset.tool,
    outcome: li.querySelector('.chip').textContent,
    approval: (li.querySelector('.approval') || {}).textContent || '',
    stopped: (li.querySelector('.stopped') || {}).textContent || '',
    args: (li.querySelector('pre.args') || {}).textContent || '',
    summary: (li.querySelector('pre.summary') || {}).textContent || '',
  })));
}

h.run(async (browser) => {
  const desk = await h.openSignedIn(browser, DESKTOP, QUERY);
  const phone = await h.openSignedIn(browser, PHONE, QUERY);
  const pages = [[desk.page, 'desktop'], [phone.page, 'phone']];

  // ---- Now: three calls, their arguments, a time that ticks ----
  for (const [p, size] of pages) {
    assert(await p.isVisible('#halt'), `${size}: Stop everything is in the header`);
    await p.waitForFunction((now) => document.querySelectorAll(`${now} li[data-call]`).length === 3, NOW);
    const rows = await nowRows(p);
    const by = (tool) => rows.find((r) => r.tool === tool) || {};
    assert(by('bash').state === 'running' && by('bash').args === 'command: sleep 300', `${size}: the running bash: ${JSON.stringify(rows)}`);
    assert(by('key').state === 'waiting_approval' && by('key').args === 'keys: ctrl+q', `${size}: the held key: ${JSON.stringify(rows)}`);
    const job = by('bash_start');
    assert(job.state === 'job' && job.id === JOB && job.args === 'command: sleep 300', `${size}: the job: ${JSON.stringify(rows)}`);
    const before = by('bash').elapsed;
    assert(/^\d+:\d\d$/.test(before), `${size}: elapsed ${before}`);
    await p.waitForFunction(([now, before]) => {
      const e = document.querySelector(`${now} li[data-tool="bash"] [data-elapsed]`);
      return e && e.textContent !== before;
    }, [NOW, before]);
    await shot(p, `now-now-${size}`);
    if (size === 'phone') await h.noSidewaysScroll(p, 'Grants with a Now list');
  }
  step('shown');

  // ---- Stop each, from the desktop; a double click stops once ----
  const p = desk.page;
  for (const tool of ['bash', 'key', 'bash_start']) {
    await p.dblclick(`${NOW} li[data-tool="${tool}"] button[data-action="stop"]`);
    await p.waitForSelector(`${NOW} li[data-tool="${tool}"]`, { state: 'detached' });
    const note = await p.textContent(`[data-now-note="${BUSY}"]`);
    assert(note === `Stopped ${tool}: the agent was answered "${STOPPED}".`, 'the outcome: ' + note);
  }
  const deletes = desk.seen.requests.filter((r) => r.method === 'DELETE' && r.url.includes('/calls/'));
  assert(deletes.length === 3, `a double click stops once: ${deletes.length} DELETEs`);
  await p.waitForSelector(`${NOW} li.empty`);
  assert(await p.textContent(`${NOW} li.empty`) === 'Nothing runs now.', 'an empty list says nothing runs');
  await phone.page.waitForSelector(`${NOW} li.empty`);
  step('stopped');

  // ---- Approvals: Allow on the phone; the decision stays, with the Stop's deny ----
  await go('approve');
  const ph = phone.page;
  await view(ph, 'approvals');
  await ph.waitForSelector('[data-approval]');
  await ph.click('[data-approval] button[data-action="allow"]');
  await ph.waitForSelector('[data-approval]', { state: 'detached' });
  for (const [q, size] of [[ph, 'phone'], [p, 'desktop']]) {
    if (q === p) await view(p, 'approvals');
    await q.waitForSelector('#recent-list li[data-decision="allow"]');
    const recent = await q.evaluate(() => [...document.querySelectorAll('#recent-list li')].map((li) => li.textContent));
    const allowed = recent[0];
    assert(/^allowed/.test(allowed) && allowed.includes('key') && allowed.includes('keys[0]: ctrl+w') && allowed.includes(YOU),
      `${size}: the newest decision: ${JSON.stringify(recent)}`);
    assert(recent.some((t) => /^denied/.test(t) && t.includes('ctrl+q') && t.includes(YOU)),
      `${size}: the stopped held call is a deny: ${JSON.stringify(recent)}`);
    assert(await q.isHidden('#recent-empty'), `${size}: no "No decision yet"`);
    await shot(q, `now-recent-${size}`);
    if (size === 'phone') await h.noSidewaysScroll(q, 'Approvals with recent decisions');
  }
  step('allowed');

  // ---- Stop everything: one click opens the confirm, the second halts ----
  await go('halt');
  await view(p, 'grants');
  await p.waitForSelector(`${NOW} li[data-tool="bash"]`);
  await p.click('#halt');
  await p.waitForSelector('#halt-confirm:not([hidden])');
  const halts = () => desk.seen.requests.filter((r) => r.method === 'POST' && new URL(r.url).pathname === '/halt');
  assert(halts().length === 0, 'one click alone halts nothing');
  await p.fill('#halt-reason', REASON);
  await p.click('#halt-go');
  await p.waitForSelector('#halted:not([hidden])');
  assert(halts().length === 1, 'the confirm halts once');
  step('halted');

  await go('banner');
  for (const [q, size] of pages) {
    // The phone did not halt: it learns of it from GET /halt on its refresh.
    await q.waitForSelector('#halted:not([hidden])');
    for (const v of VIEWS) {
      await view(q, v);
      assert(await q.isVisible('#halted'), `${size}: the banner on ${v}`);
    }
    const text = await q.textContent('#halted-text');
    assert(text.includes(`"${REASON}"`) && text.includes(YOU) && /since \d/.test(text), `${size}: who, why, when: ${text}`);
    assert(await q.isDisabled('#halt') && await q.isVisible('#halt'), `${size}: Stop everything says it is done`);
    await view(q, 'grants');
    await q.waitForSelector(`[data-grant="${BUSY}"] .state.halted`);
    await shot(q, `now-halted-${size}`);
    if (size === 'phone') await h.noSidewaysScroll(q, 'the halted banner');
  }
  await ph.click('#resume');
  await ph.waitForSelector('#halted', { state: 'hidden' });
  await p.waitForSelector('#halted', { state: 'hidden' });
  assert(await p.isEnabled('#halt'), 'Stop everything again after Resume');
  // The confirm on a phone, then Cancel: nothing is sent.
  await ph.click('#halt');
  await ph.waitForSelector('#halt-confirm:not([hidden])');
  await shot(ph, 'now-confirm-phone');
  await h.noSidewaysScroll(ph, 'the halt confirm');
  await ph.click('#halt-cancel');
  await ph.waitForSelector('#halt-confirm', { state: 'hidden' });
  const phoneHalts = phone.seen.requests.filter((r) => r.method === 'POST' && new URL(r.url).pathname === '/halt');
  assert(phoneHalts.length === 0, 'Cancel halts nothing');
  step('resumed');

  // ---- Activity: the journals, in order ----
  await go('journal');
  for (const [q, size] of pages) {
    await view(q, 'activity');
    await q.selectOption('#activity-grant', DONE);
    const label = await q.evaluate((id) => document.querySelector(`#activity-grant option[value="${id}"]`).textContent, DONE);
    assert(/ended/.test(label), `${size}: the ended grant is offered: ${label}`);
    await q.waitForFunction(() => document.querySelectorAll('#activity-list li[data-tool="sys_info"]').length === 2);
    const ended = await journalRows(q);
    assert(ended.length === 2 && ended.every((r) => r.outcome === 'ok' && r.summary !== '' && r.args === ''), `${size}: the ended grant's journal: ${JSON.stringify(ended)}`);
    await shot(q, `now-journal-ended-${size}`);

    await q.selectOption('#activity-grant', BUSY);
    await q.waitForFunction(() => document.querySelectorAll('#activity-list li[data-tool="bash"]').length === 2
      && document.querySelectorAll('#activity-list li[data-tool="key"]').length === 2)
      .catch(async (e) => { throw new Error(`${size}: the busy grant's journal: ${JSON.stringify(await journalRows(q))}: ${e}`); });
    const rows = await journalRows(q);
    const seqs = rows.map((r) => r.seq);
    assert(seqs.every((s, i) => i === 0 || s > seqs[i - 1]), `${size}: in order: ${seqs}`);
    assert(rows[0].tool === 'bash_start' && rows[0].args === 'command: sleep 300', `${size}: the job's start first: ${JSON.stringify(rows[0])}`);
    const keys = rows.filter((r) => r.tool === 'key');
    assert(keys[0].args === 'keys: ctrl+q' && keys[0].approval.startsWith('denied by ' + YOU) && keys[0].stopped === STOPPED,
      `${size}: the stopped held key: ${JSON.stringify(keys[0])}`);
    assert(keys[1].args === 'action: press\nkeys[0]: ctrl+w' && keys[1].approval.startsWith('allowed by ' + YOU), `${size}: the allowed key: ${JSON.stringify(keys[1])}`);
    const bashes = rows.filter((r) => r.tool === 'bash');
    assert(bashes[0].outcome === 'stopped' && bashes[0].stopped === STOPPED && bashes[0].args === 'command: sleep 300', `${size}: the stopped bash: ${JSON.stringify(bashes[0])}`);
    assert(bashes[1].stopped === `halted by the person who lent the box: ${REASON}`, `${size}: the halted bash: ${JSON.stringify(bashes[1])}`);
    await shot(q, `now-journal-${size}`);
    if (size === 'phone') await h.noSidewaysScroll(q, 'Activity with a journal');
  }
  const [download] = await Promise.all([p.waitForEvent('download'), p.click('#journal-download')]);
  assert(download.suggestedFilename() === `handnode-journal-${BUSY}.html`, 'file name: ' + download.suggestedFilename());
  const html = fs.readFileSync(await download.path(), 'utf8');
  assert(html.includes('bash_start') && html.includes('ctrl+w') && html.includes(STOPPED), 'journal.html holds the calls');

  h.refuseSurprises(desk.seen, [401]);
  h.refuseSurprises(phone.seen, [401]);
  step('journal');
});
