// handnode console. Talks only to this box's admin API, with the admin token kept in this
// tab's sessionStorage (or none, behind `tailscale serve` with --allow-login). Everything
// the API returns is put on the page as text (textContent), never parsed as HTML.
'use strict';

(() => {
  const TOKEN_KEY = 'handnode.token';
  // Test and slow-link knobs: ?refresh_ms=N (how often the grant list, the halt and an open
  // journal are re-read while the page is visible), ?calls_ms=N (how often GET /calls is
  // read while the Grants view is open and visible), ?thumb_ms=N (the screen thumbnail's
  // period, never under 2 s), ?live=0 and ?live_retry_ms=N (the live view, below).
  const params = new URLSearchParams(location.search);
  const knob = (name, fallback, min) => {
    const v = Number(params.get(name));
    return params.has(name) && Number.isFinite(v) && v >= min ? v : fallback;
  };
  const REFRESH_MS = knob('refresh_ms', 2000, 200);
  const CALLS_MS = knob('calls_ms', 1000, 200);
  const THUMB_MS = knob('thumb_ms', 2000, 2000);
  /** Longest wait between screenshot tries after failures (each try is audited). */
  const THUMB_BACKOFF_MAX_MS = 60000;
  /** Seconds one GET /approvals long-poll may wait (the API allows 60). */
  const LONG_POLL_SECS = 55;
  /** A long-poll answered sooner than this without a change means something is wrong. */
  const LONG_POLL_FLOOR_MS = 1000;
  const BACKOFF_MAX_MS = 30000;
  const THUMB_SCALE = 0.25;
  /** After a live view ends or cannot start, how long before trying again (screenshots
   * meanwhile). ?live_retry_ms=N. */
  const LIVE_RETRY_MS = knob('live_retry_ms', 5000, 200);
  /** ?live=0: keep the polling screenshot even where the live view could be shown (a
   * slow link; the screenshot's own test). */
  const LIVE = params.get('live') !== '0';
  const THUMB_MAX_BYTES = 262144;
  const ACTIVITY_LIMIT = 100;
  /** Journal records the page keeps (the oldest go first); journal.html has them all. */
  const JOURNAL_KEEP = 1000;
  /** `Journal-Next-Since` pages one refresh follows before the next refresh goes on. */
  const JOURNAL_PAGES = 4;
  /** What the agent is answered when the lender stops a call (grants::running). */
  const STOPPED = 'stopped by the person who lent the box';
  const RENEW_SECS = 3600;
  const MAX_TTL_SECS = 86400;
  const VIEWS = ['grants', 'lend', 'approvals', 'activity'];

  const $ = (id) => document.getElementById(id);

  /** An element with text children only: strings become text nodes, never markup. */
  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('data-') || k.startsWith('aria-')) e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c);
    return e;
  }

  const state = {
    signedIn: false,
    view: 'grants',
    grants: [],
    grantsAt: 0, // performance.now() when `grants` was read
    approvals: [],
    approvalsAt: 0,
    etag: null,
    pollAbort: null,
    activityGrant: '',
    activityCalls: -1,
    activityStale: 0,
    lentBanner: null, // the grant id a "Lent to …" banner is about
    calls: [], // GET /calls
    callsAt: 0,
    callsSupported: true, // false on a handnode that predates GET /calls
    halt: null, // GET /halt
    haltSupported: true,
    recent: [], // GET /approvals' recent decisions, newest first
    journals: null, // GET /journals once read
    journalSupported: true, // false on a handnode that predates the journal (GET /audit then)
    journal: { id: '', seq: 0, count: 0 }, // what #activity-list shows
    wheelIdleSecs: 0, // --wheel-idle-secs, as POST /attach/{id}/wheel last said (0: not yet)
  };

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  /** One admin API request; resolves to {status, data, headers}, or throws ApiError.
   * `opts.raw`: `data` is the body's text, not parsed (JSON lines, HTML). */
  async function api(method, path, body, opts = {}) {
    const headers = {};
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = 'Bearer ' + token;
    const init = { method, headers, cache: 'no-store', credentials: 'omit', redirect: 'error' };
    if (opts.signal) init.signal = opts.signal;
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch(path, init);
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw new ApiError(0, 'handnode did not answer: ' + e.message);
    }
    const text = await res.text();
    let data = null;
    if (opts.raw && res.ok) return { status: res.status, data: text, headers: res.headers };
    if (text) {
      try { data = JSON.parse(text); } catch (_) { data = text; }
    }
    if (!res.ok) {
      const msg = data && typeof data === 'object' && typeof data.error === 'string'
        ? data.error : 'HTTP ' + res.status;
      if (res.status === 401 && state.signedIn) {
        signOut('handnode refused the token (401 unauthorized): sign in again.');
      }
      throw new ApiError(res.status, msg);
    }
    return { status: res.status, data, headers: res.headers };
  }

  function banner(text, bad) {
    state.lentBanner = null;
    const b = $('banner');
    b.textContent = text || '';
    b.hidden = !text;
    b.classList.toggle('bad', !!bad);
  }

  function busy(buttons, on) {
    for (const b of buttons) {
      b.disabled = on;
      b.setAttribute('aria-busy', on ? 'true' : 'false');
    }
  }

  // ---- time ----

  function fmtLeft(secs) {
    secs = Math.max(0, Math.floor(secs));
    const h = Math.floor(secs / 3600), m = Math.floor((secs % 3600) / 60), s = secs % 60;
    const two = (n) => String(n).padStart(2, '0');
    return h > 0 ? `${h}:${two(m)}:${two(s)}` : `${m}:${two(s)}`;
  }
  function clock(iso) {
    const d = new Date(iso);
    return Number.isNaN(d.getTime()) ? String(iso) : d.toLocaleTimeString();
  }
  /** Seconds left now on something that had `secs` left at `at` (performance.now()). */
  function leftNow(secs, at) {
    return secs - (performance.now() - at) / 1000;
  }
  function tick() {
    for (const e of document.querySelectorAll('[data-left]')) {
      const left = leftNow(Number(e.dataset.left), Number(e.dataset.at));
      e.textContent = left > 0 ? fmtLeft(left) : 'now';
    }
    // How long a call has run: its elapsed_ms when read, plus the time since.
    for (const e of document.querySelectorAll('[data-elapsed]')) {
      const ms = Number(e.dataset.elapsed) + performance.now() - Number(e.dataset.at);
      e.textContent = fmtLeft(ms / 1000);
    }
  }
  function fmtMs(ms) {
    ms = Number(ms);
    if (!Number.isFinite(ms)) return '';
    return ms < 1000 ? `${Math.round(ms)} ms` : ms < 60000 ? `${(ms / 1000).toFixed(1)} s` : fmtLeft(ms / 1000);
  }

  // ---- sign in / out ----

  function showSignedIn(on) {
    $('tabs').hidden = !on;
    $('signout').hidden = !on || !sessionStorage.getItem(TOKEN_KEY);
    $('halt').hidden = !on;
    if (!on) {
      $('halt-confirm').hidden = true;
      $('halted').hidden = true;
      for (const v of VIEWS) $('view-' + v).hidden = true;
      $('view-login').hidden = false;
    }
  }

  async function signIn(fromForm) {
    try {
      const r = await api('GET', '/attach');
      state.signedIn = true;
      $('login-error').textContent = '';
      banner('');
      showSignedIn(true);
      takeGrants(r.data);
      route();
      refreshHalt();
      refreshGrantsSoon();
      approvalsLoop();
      return true;
    } catch (e) {
      showSignedIn(false);
      if (e.status === 401 || e.status === 429) {
        const hadToken = !!sessionStorage.getItem(TOKEN_KEY);
        sessionStorage.removeItem(TOKEN_KEY);
        let msg = '';
        if (e.status === 429) msg = 'Too many failed sign-ins from here: wait a minute, then try again.';
        else if (fromForm) msg = 'Wrong token: handnode answered 401 unauthorized. Paste the token again (or check --allow-login if you come through tailscale serve).';
        else if (hadToken) msg = 'The token this tab kept was refused: sign in again.';
        $('login-error').textContent = msg;
        $('login-token').focus();
      } else {
        $('login-error').textContent = e.message;
      }
      return false;
    }
  }

  function signOut(message) {
    state.signedIn = false;
    sessionStorage.removeItem(TOKEN_KEY);
    if (state.pollAbort) state.pollAbort.abort();
    state.grants = [];
    state.approvals = [];
    state.recent = [];
    state.calls = [];
    state.halt = null;
    state.etag = null;
    clearTimeout(callsTimer);
    callsTimer = null;
    renderGrants();
    renderApprovals();
    showSignedIn(false);
    $('login-error').textContent = message || '';
  }

  $('login-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const button = $('login-submit');
    if (button.disabled) return;
    const token = $('login-token').value.trim();
    $('login-error').textContent = '';
    if (!token) {
      $('login-error').textContent = 'Paste the admin token first.';
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, token);
    busy([button], true);
    try {
      if (await signIn(true)) $('login-token').value = '';
    } finally {
      busy([button], false);
    }
  });
  $('signout').addEventListener('click', () => signOut(''));

  // ---- views ----

  function route() {
    if (!state.signedIn) return;
    const want = location.hash.replace(/^#/, '');
    const view = VIEWS.includes(want) ? want : 'grants';
    if (view !== state.view) banner('');
    state.view = view;
    for (const v of VIEWS) $('view-' + v).hidden = v !== state.view;
    $('view-login').hidden = true;
    for (const t of document.querySelectorAll('.tab')) {
      if (t.dataset.view === state.view) t.setAttribute('aria-current', 'page');
      else t.removeAttribute('aria-current');
    }
    if (state.view === 'activity') {
      renderActivityChoices();
      refreshActivity();
    }
    refreshCalls();
    scheduleThumb();
  }
  window.addEventListener('hashchange', route);
  for (const t of document.querySelectorAll('.tab')) {
    t.addEventListener('click', () => { location.hash = '#' + t.dataset.view; });
  }

  // ---- grants ----

  let grantsTimer = null;
  let grantsInFlight = false;
  let grantsAgain = false;

  function takeGrants(data) {
    state.grants = Array.isArray(data && data.grants) ? data.grants : [];
    state.grantsAt = performance.now();
    // "Lent to …" is about one grant: once it is revoked or ended, the banner goes.
    if (state.lentBanner && !state.grants.some((g) => g.id === state.lentBanner && g.state !== 'ended')) {
      banner('');
    }
    renderGrants();
    if (state.view === 'activity') {
      renderActivityChoices();
      if (state.journalSupported) {
        // The journal is read from the last record the page has: cheap at every refresh.
        refreshActivity();
      } else {
        const g = state.grants.find((x) => x.id === state.activityGrant);
        // The audit writer commits within ~100 ms of a call, so read once more a turn later.
        if (g && g.calls !== state.activityCalls) {
          state.activityCalls = g.calls;
          state.activityStale = 2;
        }
        if (state.activityStale > 0) {
          state.activityStale -= 1;
          refreshActivity();
        }
      }
    }
    scheduleThumb();
  }

  async function refreshGrants() {
    clearTimeout(grantsTimer);
    grantsTimer = null;
    if (!state.signedIn) return;
    if (grantsInFlight) { grantsAgain = true; return; }
    grantsInFlight = true;
    try {
      const grants = api('GET', '/attach');
      refreshHalt();
      takeGrants((await grants).data);
    } catch (e) {
      if (e.status !== 401) banner('Could not read the grants: ' + e.message, true);
    } finally {
      grantsInFlight = false;
    }
    if (grantsAgain) { grantsAgain = false; return refreshGrants(); }
    refreshGrantsSoon();
  }
  function refreshGrantsSoon() {
    clearTimeout(grantsTimer);
    grantsTimer = null;
    if (state.signedIn && document.visibilityState === 'visible') {
      grantsTimer = setTimeout(refreshGrants, REFRESH_MS);
    }
  }

  const cards = new Map();

  function fact(dl, name) {
    const dd = el('dd');
    dl.append(el('dt', { text: name }), dd);
    return dd;
  }

  function makeCard(id) {
    const c = { id, grant: null };
    c.root = el('article', { class: 'card', 'data-grant': id });
    c.title = el('span', { class: 'card-title' });
    c.state = el('span', { class: 'state' });
    c.root.append(el('div', { class: 'card-head' }, c.title, c.state));
    c.runtime = el('div', { class: 'sub mono' });
    c.root.append(c.runtime);
    const dl = el('dl', { class: 'facts' });
    c.profile = fact(dl, 'profile');
    c.shell = fact(dl, 'shell');
    c.tools = fact(dl, 'tools');
    c.allow = fact(dl, 'allow');
    c.deny = fact(dl, 'deny');
    c.expires = fact(dl, 'expires');
    c.calls = fact(dl, 'calls');
    c.jobs = fact(dl, 'jobs');
    c.folder = fact(dl, 'lent folder');
    c.screen = fact(dl, 'screen');
    c.approve = fact(dl, 'approve');
    c.remembered = fact(dl, 'approved for grant');
    c.ended = fact(dl, 'ended');
    c.error = fact(dl, 'last error');
    c.by = fact(dl, 'lent by');
    c.dl = dl;
    c.root.append(dl);
    // What this grant runs now (GET /calls), each with its Stop.
    c.now = el('ul', { class: 'now', 'data-now': id });
    c.nowNote = el('p', { class: 'now-note', 'data-now-note': id });
    c.nowBox = el('div', { class: 'now-box' }, el('h4', { text: 'Now' }), c.now, c.nowNote);
    c.root.append(c.nowBox);
    c.note = el('p', { class: 'note' });

    c.renewBtn = el('button', { type: 'button', text: 'Renew +1 h', 'data-action': 'renew' });
    c.revokeBtn = el('button', { type: 'button', text: 'Revoke', 'data-action': 'revoke' });
    c.activityBtn = el('button', { type: 'button', class: 'quiet', text: 'Activity', 'data-action': 'activity' });
    c.actions = el('div', { class: 'actions' }, c.renewBtn, c.revokeBtn, c.activityBtn);
    c.root.append(c.actions, c.note);

    // Renew: a fresh secret (or admin credential), since handnode keeps none for us.
    c.renewKind = el('select', { 'aria-label': 'Credential kind' },
      el('option', { value: 'secret', text: 'attach secret' }),
      el('option', { value: 'admin_credential', text: 'pod admin credential' }));
    c.renewSecret = el('input', { type: 'password', autocomplete: 'off', spellcheck: false, 'aria-label': 'Secret or admin credential' });
    c.renewGo = el('button', { type: 'submit', class: 'primary', text: 'Renew', 'data-action': 'renew-go' });
    c.renewCancel = el('button', { type: 'button', text: 'Cancel' });
    c.renewError = el('p', { class: 'error' });
    c.renewForm = el('form', { class: 'subpanel', noValidate: true, hidden: true },
      el('label', { text: 'Renew for one more hour with a fresh credential from the pod' }),
      c.renewKind, c.renewSecret, c.renewError,
      el('div', { class: 'actions' }, c.renewGo, c.renewCancel));
    c.root.append(c.renewForm);

    c.revokeGo = el('button', { type: 'button', class: 'danger', text: 'Revoke now', 'data-action': 'revoke-go' });
    c.revokeCancel = el('button', { type: 'button', text: 'Cancel' });
    c.revokeError = el('p', { class: 'error' });
    c.revokePanel = el('div', { class: 'subpanel', hidden: true },
      el('p', { text: 'The agent loses the box at once and its running tools are killed.' }),
      c.revokeError, el('div', { class: 'actions' }, c.revokeGo, c.revokeCancel));
    c.root.append(c.revokePanel);

    c.renewBtn.addEventListener('click', () => {
      c.revokePanel.hidden = true;
      c.renewForm.hidden = !c.renewForm.hidden;
      if (!c.renewForm.hidden) c.renewSecret.focus();
    });
    c.renewCancel.addEventListener('click', () => {
      c.renewForm.hidden = true;
      c.renewSecret.value = '';
      c.renewError.textContent = '';
    });
    c.renewForm.addEventListener('submit', (ev) => { ev.preventDefault(); renew(c); });
    c.revokeBtn.addEventListener('click', () => {
      c.renewForm.hidden = true;
      c.revokePanel.hidden = !c.revokePanel.hidden;
    });
    c.revokeCancel.addEventListener('click', () => { c.revokePanel.hidden = true; });
    c.revokeGo.addEventListener('click', () => revoke(c));
    c.activityBtn.addEventListener('click', () => {
      state.activityGrant = c.id;
      state.activityCalls = -1;
      location.hash = '#activity';
      route();
    });
    return c;
  }

  function show(dd, text) {
    dd.textContent = text;
    dd.hidden = text === '';
    dd.previousSibling.hidden = text === '';
  }

  /** The tools a grant lends: the box's own by name, the browser's counted, named when opened. */
  function showTools(dd, tools) {
    if (!Array.isArray(tools)) return show(dd, '');
    const key = tools.join(',');
    if (dd.dataset.tools === key && !dd.hidden) return;
    dd.dataset.tools = key;
    const browser = tools.filter((t) => String(t).startsWith('browser_'));
    const own = tools.filter((t) => !String(t).startsWith('browser_'));
    dd.textContent = own.length || !browser.length ? (own.join(', ') || 'none') : '';
    if (browser.length) {
      if (own.length) dd.append(' and ');
      dd.append(el('details', { class: 'inline' },
        el('summary', { text: `${browser.length} browser tool${browser.length === 1 ? '' : 's'}` }),
        el('span', { class: 'mono', text: browser.join(', ') })));
    }
    dd.hidden = false;
    dd.previousSibling.hidden = false;
  }

  /** Who lent a grant, in words: the principals the API records are terse. */
  function principalText(p) {
    if (!p) return '';
    return {
      token: 'you, with the admin token',
      'local-socket': 'you, on this box',
      local: 'a process on this box (--insecure-local)',
      desktop: 'you, on the desktop notification',
    }[p] || String(p);
  }

  function listText(v) {
    if (v === undefined || v === null) return '';
    if (Array.isArray(v)) return v.join(', ');
    return String(v);
  }

  function updateCard(c, g) {
    c.grant = g;
    const ended = g.state === 'ended';
    c.root.classList.toggle('ended', ended);
    c.title.textContent = g.session;
    c.state.textContent = g.state === 'redialing' && g.redial_in_secs !== undefined
      ? `redialing in ${g.redial_in_secs} s` : g.state;
    c.state.className = 'state ' + g.state;
    c.runtime.textContent = g.runtime;
    show(c.profile, g.profile);
    if (g.shell !== undefined) {
      const because = g.shell === 'yes' && g.shell_because ? ` (${g.shell_because})` : '';
      const meaning = { yes: 'shell-equivalent', gated: 'gated: every shell tool asks you', no: 'no shell' }[g.shell] || g.shell;
      show(c.shell, meaning + because);
    } else {
      show(c.shell, '');
    }
    if (ended) {
      show(c.expires, '');
    } else {
      c.expires.textContent = '';
      const left = el('span', { 'data-left': String(g.expires_in_secs), 'data-at': String(state.grantsAt) });
      c.expires.append('in ', left, ` (at ${clock(g.expires_at)})`);
      c.expires.hidden = false;
      c.expires.previousSibling.hidden = false;
    }
    show(c.calls, String(g.calls ?? 0));
    show(c.jobs, g.jobs === undefined ? '' : String(g.jobs));
    // What is lent: the tools the agent sees, and the lists that made them.
    showTools(c.tools, g.tools);
    show(c.allow, listText(g.allow));
    show(c.deny, listText(g.deny));
    show(c.folder, g.folder || '');
    show(c.screen, g.display === 'own'
      ? `its own${g.own_display && g.own_display.running ? ` (${g.own_display.display}, running)` : ' (starts on first use)'}` : '');
    show(c.approve, g.approve === 'shell' ? 'every shell tool' : listText(g.approve));
    show(c.remembered, listText(g.approved_for_grant));
    show(c.ended, ended ? String(g.ended ?? '') : '');
    show(c.error, g.last_error ? String(g.last_error) : '');
    show(c.by, principalText(g.principal));
    c.renewBtn.hidden = ended;
    c.revokeBtn.hidden = ended;
    c.nowBox.hidden = ended || !state.callsSupported;
    if (ended) {
      c.renewForm.hidden = true;
      c.revokePanel.hidden = true;
      c.renewSecret.value = '';
    }
  }

  function place(container, nodes) {
    nodes.forEach((n, i) => {
      if (container.children[i] !== n) container.insertBefore(n, container.children[i] || null);
    });
  }

  function renderGrants() {
    const live = state.grants.filter((g) => g.state !== 'ended');
    const ended = state.grants.filter((g) => g.state === 'ended').reverse();
    const keep = new Set(state.grants.map((g) => g.id));
    for (const [id, c] of cards) {
      if (!keep.has(id)) { c.root.remove(); cards.delete(id); }
    }
    const build = (gs) => gs.map((g) => {
      let c = cards.get(g.id);
      if (!c) { c = makeCard(g.id); cards.set(g.id, c); }
      updateCard(c, g);
      return c.root;
    });
    place($('grants-live'), build(live));
    place($('grants-ended'), build(ended));
    $('grants-empty').hidden = live.length > 0;
    $('ended-empty').hidden = ended.length > 0;
    renderNow();
  }

  // ---- now: what runs, and Stop (§22) ----

  let callsTimer = null;
  let callsInFlight = false;
  /** One row per call or job in flight, by its GET /calls id, kept while it is listed so a
   * Stop in flight keeps its button. */
  const nowRows = new Map();
  const CALL_STATES = { running: 'running', waiting_approval: 'waiting for your yes', job: 'job' };

  function callsWanted() {
    return state.signedIn && state.callsSupported && state.view === 'grants'
      && document.visibilityState === 'visible';
  }

  async function refreshCalls() {
    clearTimeout(callsTimer);
    callsTimer = null;
    if (!callsWanted() || callsInFlight) return;
    callsInFlight = true;
    try {
      const r = await api('GET', '/calls');
      state.calls = Array.isArray(r.data && r.data.calls) ? r.data.calls : [];
      state.callsAt = performance.now();
    } catch (e) {
      if (e.status === 404) {
        state.callsSupported = false; // a handnode that predates GET /calls
        state.calls = [];
        renderGrants();
      }
    } finally {
      callsInFlight = false;
    }
    renderNow();
    clearTimeout(callsTimer);
    callsTimer = callsWanted() ? setTimeout(refreshCalls, CALLS_MS) : null;
  }

  function makeNowRow(call) {
    const r = { id: String(call.id), grant: call.grant ?? null };
    r.tool = el('span', { class: 'tool' });
    r.state = el('span', { class: 'chip' });
    r.elapsed = el('span', { class: 'ms', 'aria-label': 'running for' });
    r.args = el('pre', { class: 'args' });
    r.stop = el('button', { type: 'button', class: 'danger small', text: 'Stop', 'data-action': 'stop' });
    r.root = el('li', { 'data-call': r.id },
      el('div', { class: 'now-head' }, r.tool, r.state, r.elapsed, r.stop), r.args);
    r.stop.addEventListener('click', () => stopCall(r));
    return r;
  }

  function nowNote(grant) {
    return grant === null ? document.querySelector('[data-now-note="owner"]')
      : (cards.get(grant) || {}).nowNote;
  }

  async function stopCall(r) {
    if (r.stop.disabled) return; // a double click stops once
    busy([r.stop], true);
    const what = r.tool.textContent;
    const note = nowNote(r.grant);
    const say = (text, bad) => {
      if (!note) return;
      note.textContent = text;
      note.classList.toggle('bad', !!bad);
    };
    try {
      await api('DELETE', '/calls/' + encodeURIComponent(r.id));
      r.root.classList.add('stopped');
      say(`Stopped ${what}: the agent was answered "${STOPPED}".`);
    } catch (e) {
      busy([r.stop], false);
      say(e.status === 404 ? `${what} had already ended.` : `Could not stop ${what}: ${e.message}`, e.status !== 404);
    }
    refreshCalls();
  }

  function renderNow() {
    const listed = new Set();
    const byGrant = new Map();
    for (const call of state.calls) {
      const id = String(call.id);
      listed.add(id);
      let r = nowRows.get(id);
      const fresh = !r;
      if (!r) { r = makeNowRow(call); nowRows.set(id, r); }
      r.tool.textContent = reveal(String(call.tool));
      r.state.textContent = CALL_STATES[call.state] || String(call.state);
      r.state.className = 'chip ' + (call.state === 'waiting_approval' ? 'warn' : 'ok');
      r.root.dataset.state = String(call.state);
      r.root.dataset.tool = String(call.tool);
      r.elapsed.dataset.elapsed = String(Number(call.elapsed_ms) || 0);
      r.elapsed.dataset.at = String(state.callsAt);
      r.args.textContent = revealArguments(call.arguments);
      const key = call.grant ?? null;
      // A new call: the last Stop's note is old news.
      const note = fresh ? nowNote(key) : null;
      if (note) note.textContent = '';
      if (!byGrant.has(key)) byGrant.set(key, []);
      byGrant.get(key).push(r.root);
    }
    for (const [id, r] of nowRows) {
      if (!listed.has(id)) { r.root.remove(); nowRows.delete(id); }
    }
    const fill = (list, rows) => {
      if (!rows.length) {
        if (!list.querySelector(':scope > .empty')) {
          list.textContent = '';
          list.append(el('li', { class: 'empty', text: 'Nothing runs now.' }));
        }
        return;
      }
      const empty = list.querySelector(':scope > .empty');
      if (empty) empty.remove();
      place(list, rows);
    };
    for (const [id, c] of cards) {
      if (c.grant && c.grant.state !== 'ended') fill(c.now, byGrant.get(id) || []);
    }
    const owner = byGrant.get(null) || [];
    const ownerBox = $('owner-now');
    // The owner's own /mcp calls: shown while there are some (a note of a Stop stays a turn).
    const ownerNote = document.querySelector('[data-now-note="owner"]');
    ownerBox.hidden = !state.callsSupported || (owner.length === 0 && ownerNote.textContent === '');
    fill(document.querySelector('[data-now="owner"]'), owner);
    tick();
  }

  // ---- stop everything: the halt (§22) ----

  /** Who halted, in words. */
  function haltedBy(by) {
    if (by === 'halt-key') return 'the halt key on the box\'s keyboard';
    return principalText(by);
  }

  function takeHalt(h) {
    state.halt = h && typeof h === 'object' ? h : null;
    const on = !!(state.halt && state.halt.halted);
    const box = $('halted');
    box.hidden = !on;
    $('halt').disabled = on;
    $('halt').textContent = on ? 'Everything is stopped' : 'Stop everything';
    if (!on) { $('resume-error').textContent = ''; return; }
    $('halt-confirm').hidden = true;
    const h2 = state.halt;
    let text = 'Everything is stopped (halted)';
    if (h2.since) text += ` since ${clock(h2.since)}`;
    if (h2.by) text += ` by ${haltedBy(h2.by)}`;
    text += h2.reason ? `: "${reveal(String(h2.reason))}".` : '.';
    text += ' No tool runs, nothing is lent and no grant dials until you resume.';
    $('halted-text').textContent = text;
  }

  let haltInFlight = false;
  async function refreshHalt() {
    if (!state.signedIn || !state.haltSupported || haltInFlight) return;
    haltInFlight = true;
    try {
      takeHalt((await api('GET', '/halt')).data);
    } catch (e) {
      if (e.status === 404) state.haltSupported = false;
    } finally {
      haltInFlight = false;
    }
  }

  $('halt').addEventListener('click', () => {
    const form = $('halt-confirm');
    form.hidden = !form.hidden;
    $('halt-error').textContent = '';
    if (!form.hidden) $('halt-go').focus();
  });
  $('halt-cancel').addEventListener('click', () => { $('halt-confirm').hidden = true; });
  $('halt-confirm').addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape') $('halt-confirm').hidden = true;
  });
  $('halt-confirm').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const go = $('halt-go');
    if (go.disabled) return;
    const body = {};
    const reason = $('halt-reason').value.trim();
    if (reason) body.reason = reason;
    $('halt-error').textContent = '';
    busy([go], true);
    try {
      const r = await api('POST', '/halt', body);
      $('halt-reason').value = '';
      takeHalt(r.data);
      refreshGrants();
      refreshCalls();
    } catch (e) {
      $('halt-error').textContent = e.status === 404
        ? 'This handnode cannot halt (it predates the halt): revoke each grant instead.'
        : 'Nothing was stopped: ' + e.message;
    } finally {
      busy([go], false);
    }
  });
  $('resume').addEventListener('click', async () => {
    const button = $('resume');
    if (button.disabled) return;
    $('resume-error').textContent = '';
    busy([button], true);
    try {
      takeHalt((await api('POST', '/resume')).data);
      refreshGrants();
    } catch (e) {
      $('resume-error').textContent = 'Still stopped: ' + e.message;
    } finally {
      busy([button], false);
    }
  });

  async function renew(c) {
    const buttons = [c.renewGo, c.renewBtn, c.revokeBtn];
    if (c.renewGo.disabled) return;
    const g = c.grant;
    c.renewError.textContent = '';
    c.note.textContent = '';
    const left = Math.max(0, Math.floor(leftNow(g.expires_in_secs, state.grantsAt)));
    const body = {
      runtime: g.runtime,
      session: g.session,
      profile: g.profile,
      ttl_secs: Math.min(MAX_TTL_SECS, left + RENEW_SECS),
    };
    // The same lists, folder and display, or handnode would replace the grant instead of
    // renewing it.
    for (const k of ['allow', 'deny', 'approve', 'folder', 'display']) {
      if (g[k] !== undefined && g[k] !== null) body[k] = g[k];
    }
    body[c.renewKind.value] = c.renewSecret.value.trim();
    busy(buttons, true);
    try {
      const r = await api('POST', '/attach', body);
      c.renewSecret.value = '';
      c.renewForm.hidden = true;
      banner('');
      if (r.data && r.data.id === g.id) {
        // handnode cannot check a secret: only the pod can, at the next dial.
        c.note.textContent = `Renewed until ${clock(r.data.expires_at)}.` + (r.data.new_secret
          ? ' The new secret is used at the next dial and is not checked now: if the pod refuses it, the grant ends (and says it was this renewal).'
          : '');
      } else {
        c.note.textContent = 'handnode replaced this grant with a new one (its lists differed).';
      }
      refreshGrants();
    } catch (e) {
      c.renewError.textContent = e.message;
    } finally {
      busy(buttons, false);
    }
  }

  async function revoke(c) {
    const buttons = [c.revokeGo, c.renewBtn, c.revokeBtn];
    if (c.revokeGo.disabled) return;
    c.revokeError.textContent = '';
    busy(buttons, true);
    try {
      await api('DELETE', '/attach/' + encodeURIComponent(c.id));
      c.revokePanel.hidden = true;
    } catch (e) {
      c.revokeError.textContent = e.status === 404 ? 'It had already ended.' : e.message;
    } finally {
      busy(buttons, false);
      refreshGrants();
    }
  }

  // ---- lend ----

  const lendForm = $('lend-form');
  const radio = (name) => {
    const r = lendForm.querySelector(`input[name="${name}"]:checked`);
    return r ? r.value : '';
  };
  const names = (text) => text.split(/[\s,]+/).filter((s) => s !== '');

  function lendWarning() {
    const profile = radio('profile');
    const approve = radio('approve');
    const w = $('lend-warning');
    let text = '';
    // data-shell comes from the daemon's own table (profiles::Profile), rendered into the page.
    const checked = lendForm.querySelector('input[name="profile"]:checked');
    const shell = checked ? checked.dataset.shell : '';
    if (shell === 'yes') {
      // The boundaries named from the same rendered table, so a profile added there is named.
      const bounded = Array.from(lendForm.querySelectorAll('input[name="profile"][data-shell="no"]'), (r) => r.value);
      const only = bounded.length > 1 ? `${bounded.slice(0, -1).join(', ')} and ${bounded[bounded.length - 1]} are boundaries` : `${bounded.join('')} is a boundary`;
      text = `${profile} is shell-equivalent: with bash, or a mouse and keyboard that can open a terminal, the agent can do anything you can do on this box. Only ${only}. Lend it only to a session you would give a shell here.`;
      if (approve !== 'none') text += ' Approval does not make it a boundary: an allowed command does everything it says.';
    } else if (shell === 'list') {
      text = 'A list that contains a shell tool (bash, mouse, key, …) is shell-equivalent; the grant\'s shell field will say so.';
    }
    w.textContent = text;
    w.hidden = text === '';
    $('lend-allow-field').hidden = profile !== 'custom';
  }
  lendForm.addEventListener('change', lendWarning);
  $('lend-approve').addEventListener('input', () => {
    if ($('lend-approve').value.trim()) lendForm.querySelector('input[name="approve"][value="named"]').checked = true;
  });

  /** The form field an API error is about, from the start of its message. */
  function fieldOf(status, message) {
    if (status === 502) return 'credential';
    const m = message.toLowerCase();
    const table = [
      ['runtime', 'runtime'], ['session', 'session'], ['profile files needs', 'folder'],
      ['folder', 'folder'], ['a lent folder', 'folder'], ['profile', 'profile'], ['custom', 'profile'],
      ['the browser profile', 'profile'], ['ttl_secs', 'ttl_secs'], ['provide exactly one', 'credential'],
      ['secret', 'credential'], ['admin_credential', 'credential'], ['approve', 'approve'],
      ['unknown tool in allow', 'allow'], ['allow', 'allow'], ['unknown tool in deny', 'deny'],
      ['deny', 'deny'], ['this grant would have no tools', 'allow'],
      ['display', 'display'], ['"display":"own"', 'display'],
    ];
    for (const [prefix, field] of table) if (m.startsWith(prefix)) return field;
    return 'form';
  }

  function fieldError(field, message) {
    const p = lendForm.querySelector(`[data-error-for="${field}"]`)
      || lendForm.querySelector('[data-error-for="form"]');
    p.textContent = message;
    const box = p.closest('.field');
    if (box && box.hidden) lendForm.querySelector('[data-error-for="form"]').textContent = message;
  }

  /** What is wrong with a Lend body, field by field: [[field, message], …]. */
  function lendProblems(body, approve) {
    const out = [];
    if (!/^wss?:\/\/[^\/?#:\s][^\s]*$/i.test(body.runtime)) out.push(['runtime', 'runtime must be a ws:// or wss:// URL']);
    if (!/^[a-z0-9-]{1,32}$/.test(body.session)) out.push(['session', 'session must match [a-z0-9-]{1,32}']);
    if (body.profile === 'custom' && !(body.allow && body.allow.length)) out.push(['allow', 'profile custom needs a non-empty allow list']);
    if (approve === 'named' && !(Array.isArray(body.approve) && body.approve.length)) {
      out.push(['approve', 'name the tools to ask about, or choose another option']);
    }
    if (!body.secret && !body.admin_credential) out.push(['credential', 'provide exactly one of secret or admin_credential']);
    return out;
  }

  /** Fields we sent that the grant JSON does not echo: a handnode too old for them. */
  function ignoredFields(sent, grant) {
    return ['allow', 'deny', 'approve', 'folder', 'display'].filter((k) => sent[k] !== undefined && grant && grant[k] === undefined);
  }

  lendForm.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const button = $('lend-submit');
    if (button.disabled) return; // a double click sends once
    for (const p of lendForm.querySelectorAll('.error')) p.textContent = '';
    const profile = radio('profile');
    const body = {
      runtime: $('lend-runtime').value.trim(),
      session: $('lend-session').value.trim(),
      profile,
      ttl_secs: Number(radio('ttl')),
    };
    if (profile === 'custom') body.allow = names($('lend-allow').value);
    const deny = names($('lend-deny').value);
    if (deny.length) body.deny = deny;
    const folder = $('lend-folder').value.trim();
    if (folder) body.folder = folder;
    if ($('lend-own-display').checked) body.display = 'own';
    const approve = radio('approve');
    if (approve === 'shell') body.approve = 'shell';
    else if (approve === 'named') body.approve = names($('lend-approve').value);
    body[radio('credential')] = $('lend-credential').value.trim();
    // Every problem the page can see, at once, before anything is sent (the API names only
    // the first; its words are used here too).
    const problems = lendProblems(body, approve);
    if (problems.length) {
      for (const [field, message] of problems) fieldError(field, message);
      return;
    }
    busy([button], true);
    try {
      const r = await api('POST', '/attach', body);
      $('lend-credential').value = '';
      location.hash = '#grants';
      route();
      const ignored = ignoredFields(body, r.data);
      if (ignored.length) {
        banner(`Lent to ${r.data.session}, but this handnode ignored ${ignored.join(' and ')} (it predates ${ignored.length > 1 ? 'them' : 'it'}): the grant is what the ${r.data.profile} profile alone gives. Revoke it if that is not what you meant.`, true);
      } else {
        banner(`Lent to ${r.data.session} (${r.data.profile}) until ${clock(r.data.expires_at)}.`);
        state.lentBanner = r.data.id;
      }
      refreshGrants();
    } catch (e) {
      fieldError(fieldOf(e.status, e.message), e.message);
    } finally {
      busy([button], false);
    }
  });

  // ---- approvals ----

  const approvalCards = new Map();
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  async function approvalsLoop() {
    if (state.pollAbort) return; // one loop per sign-in
    const abort = new AbortController();
    state.pollAbort = abort;
    let backoff = 1000;
    try {
      while (state.signedIn && !abort.signal.aborted) {
        const seen = state.etag;
        const q = seen ? `?wait=${LONG_POLL_SECS}&seen=${encodeURIComponent(seen)}` : '';
        const started = performance.now();
        try {
          const r = await api('GET', '/approvals' + q, undefined, { signal: abort.signal });
          state.etag = r.headers.get('ETag');
          state.approvals = Array.isArray(r.data && r.data.approvals) ? r.data.approvals : [];
          state.recent = Array.isArray(r.data && r.data.recent) ? r.data.recent : [];
          state.approvalsAt = performance.now();
          $('approvals-note').hidden = true;
          renderApprovals();
          // Never a loop faster than the long-poll: no ETag to wait on, or an early answer
          // that changed nothing, waits like an error.
          const early = performance.now() - started < LONG_POLL_FLOOR_MS;
          if (!state.etag || (early && state.etag === seen)) {
            await sleep(backoff);
            backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
          } else {
            backoff = 1000;
          }
        } catch (e) {
          if (e.name === 'AbortError' || !state.signedIn) return;
          const note = $('approvals-note');
          note.hidden = false;
          if (e.status === 404) {
            note.textContent = 'This handnode does not hold calls for approval (it predates approvals).';
            return;
          }
          note.textContent = 'Waiting for approvals failed: ' + e.message + '. Retrying.';
          await sleep(backoff);
          backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
        }
      }
    } finally {
      if (state.pollAbort === abort) state.pollAbort = null;
    }
  }

  // ---- what a person is shown before allowing a call (contract §14) ----
  // The same view as the daemon's src/reveal.rs (tests/console.rs compares the two):
  // controls, format, private-use and unassigned characters, blank letters and non-ASCII
  // blanks as \u{hex} (a run of more than three counted, \u{2800}×N); a literal \u{ as
  // \\u{; runs of more than three spaces as ␠×N; every argument on a line
  // of its own, command first; an env that sets a code-running variable named first.
  const CODE_ENV = [
    'BASH_ENV', 'ENV', 'PROMPT_COMMAND', 'PS4', 'SHELLOPTS', 'BASHOPTS', 'BASH_XTRACEFD', 'IFS',
    'PATH', 'LD_PRELOAD', 'LD_LIBRARY_PATH', 'LD_AUDIT', 'GCONV_PATH', 'NODE_OPTIONS',
    'PERL5OPT', 'PYTHONSTARTUP', 'PYTHONPATH'];
  const CODE_ENV_PREFIXES = ['BASH_FUNC_', 'LD_', 'GIT_'];
  const MAX_SPACE_RUN = 3;
  const isCodeEnv = (name) => CODE_ENV.includes(name) || CODE_ENV_PREFIXES.some((p) => name.startsWith(p));
  const RUST_WHITESPACE = [0x9, 0xa, 0xb, 0xc, 0xd, 0x85, 0xa0, 0x1680, 0x2028, 0x2029, 0x202f,
    0x205f, 0x3000];
  // src/base/reveal.rs's ESCAPED_RANGES, the same table (its unit test compares them).
  const ESCAPED_RANGES = [
    [0xad, 0xad], [0xb6, 0xb6], [0x34f, 0x34f], [0x600, 0x605], [0x61c, 0x61c], [0x6dd, 0x6dd],
    [0x70f, 0x70f], [0x890, 0x891], [0x8e2, 0x8e2], [0x115f, 0x1160], [0x17b4, 0x17b5],
    [0x180b, 0x180f], [0x200b, 0x200f], [0x202a, 0x202e], [0x2060, 0x206f], [0x2800, 0x2800],
    [0x3164, 0x3164], [0xe000, 0xf8ff], [0xfdd0, 0xfdef], [0xfe00, 0xfe0f], [0xfeff, 0xfeff],
    [0xffa0, 0xffa0], [0xfff0, 0xfffb], [0xfffe, 0xffff], [0x110bd, 0x110bd],
    [0x110cd, 0x110cd], [0x13430, 0x1343f], [0x1bca0, 0x1bca3], [0x1d173, 0x1d17a],
    [0x1fffe, 0x1ffff], [0x2fffe, 0x2ffff], [0x3fffe, 0x3ffff], [0x40000, 0xdffff],
    [0xe0000, 0x10ffff]];
  function needsEscape(cp) {
    return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || RUST_WHITESPACE.includes(cp)
      || (cp >= 0x2000 && cp <= 0x200a) || ESCAPED_RANGES.some(([lo, hi]) => cp >= lo && cp <= hi);
  }
  function reveal(text) {
    let out = '';
    let spaces = 0;
    const flush = () => {
      out += spaces > MAX_SPACE_RUN ? `␠×${spaces}` : ' '.repeat(spaces);
      spaces = 0;
    };
    const chars = Array.from(String(text));
    for (let i = 0; i < chars.length; i++) {
      const c = chars[i];
      if (c === ' ') { spaces++; continue; }
      flush();
      const cp = c.codePointAt(0);
      if (needsEscape(cp)) {
        // A run of one escaped character is counted, as spaces are.
        let run = 1;
        while (chars[i + 1] === c) { i++; run++; }
        const one = `\\u{${cp.toString(16)}}`;
        out += run > MAX_SPACE_RUN ? `${one}×${run}` : one.repeat(run);
      } else if (c === '\\' && chars[i + 1] === 'u' && chars[i + 2] === '{') out += '\\\\';
      else out += c;
    }
    flush();
    return out;
  }
  const byKey = (a, b) => (a === b ? 0 : a < b ? -1 : 1);
  function revealLines(prefix, v, out) {
    if (v && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length > 0) {
      const keys = Object.keys(v).sort((a, b) =>
        (a !== 'command') - (b !== 'command') || byKey(a, b));
      for (const k of keys) revealLines(prefix === '' ? reveal(k) : `${prefix}.${reveal(k)}`, v[k], out);
    } else if (Array.isArray(v) && v.length > 0) {
      v.forEach((item, i) => revealLines(`${prefix}[${i}]`, item, out));
    } else {
      const text = typeof v === 'string' ? reveal(v) : reveal(JSON.stringify(v));
      out.push(prefix === '' ? text : `${prefix}: ${text}`);
    }
  }
  function revealArguments(args) {
    const out = [];
    const env = args && typeof args === 'object' && args.env;
    if (env && typeof env === 'object' && !Array.isArray(env)) {
      const code = Object.keys(env).sort(byKey).filter(isCodeEnv).map(reveal);
      if (code.length > 0) out.push('env sets ' + code.join(', '));
    }
    revealLines('', args, out);
    return out.join('\n');
  }

  function makeApproval(a) {
    const c = { id: a.id };
    c.root = el('article', { class: 'card', 'data-approval': a.id });
    c.tool = el('span', { class: 'card-title tool' });
    c.left = el('span', { class: 'chip warn' });
    c.root.append(el('div', { class: 'card-head' }, c.tool, c.left));
    c.sub = el('div', { class: 'sub' });
    c.args = el('pre', { class: 'args' });
    c.reason = el('input', { type: 'text', autocomplete: 'off', placeholder: 'Reason for a Deny (optional)', 'aria-label': 'Reason' });
    c.allow = el('button', { type: 'button', class: 'primary', text: 'Allow', 'data-action': 'allow' });
    c.deny = el('button', { type: 'button', class: 'danger', text: 'Deny', 'data-action': 'deny' });
    c.remember = el('button', { type: 'button', text: 'Allow for this grant', 'data-action': 'remember' });
    c.error = el('p', { class: 'error' });
    c.root.append(c.sub, c.args, c.reason, el('div', { class: 'actions' }, c.allow, c.deny, c.remember), c.error);
    c.allow.addEventListener('click', () => decide(c, 'allow', false));
    c.deny.addEventListener('click', () => decide(c, 'deny', false));
    c.remember.addEventListener('click', () => decide(c, 'allow', true));
    return c;
  }

  async function decide(c, decision, remember) {
    const buttons = [c.allow, c.deny, c.remember];
    if (c.allow.disabled) return;
    c.error.textContent = '';
    const body = { decision };
    const reason = c.reason.value.trim();
    if (reason) body.reason = reason;
    if (remember) body.remember = true;
    busy(buttons, true);
    try {
      await api('POST', '/approvals/' + encodeURIComponent(c.id), body);
      c.decided = true;
      c.root.remove();
      approvalCards.delete(c.id);
      updateApprovalCount(state.approvals.filter((a) => a.id !== c.id).length);
      refreshGrants();
    } catch (e) {
      c.error.textContent = e.status === 404
        ? 'No longer waiting: already decided, expired or withdrawn.' : e.message;
      busy(buttons, false);
    }
  }

  function updateApprovalCount(n) {
    const badge = $('approvals-count');
    badge.textContent = String(n);
    badge.hidden = n === 0;
    document.title = n > 0 ? `(${n}) handnode` : 'handnode';
    $('approvals-empty').hidden = n > 0;
  }

  function renderApprovals() {
    const keep = new Set(state.approvals.map((a) => a.id));
    for (const [id, c] of approvalCards) {
      if (!keep.has(id)) { c.root.remove(); approvalCards.delete(id); }
    }
    const nodes = [];
    for (const a of state.approvals) {
      let c = approvalCards.get(a.id);
      if (!c) { c = makeApproval(a); approvalCards.set(a.id, c); }
      c.tool.textContent = reveal(a.tool);
      c.sub.textContent = `${reveal(a.session)} · ${a.profile} · lent by ${reveal(principalText(a.principal))} · asked at ${clock(a.created_at)}`;
      if (!a.arguments_truncated) {
        c.args.textContent = revealArguments(a.arguments);
      } else if (!c.whole) {
        // GET /approvals cuts arguments past its 64 KiB budget; a person decides on the
        // whole command, so fetch this one whole.
        c.whole = 'loading';
        c.args.textContent = reveal(String(a.arguments)) + '… (loading all of it)';
        api('GET', '/approvals/' + encodeURIComponent(a.id)).then(({ data }) => {
          c.whole = true;
          c.args.textContent = revealArguments(data.arguments);
        }).catch(() => { c.whole = false; });
      }
      c.left.textContent = '';
      if (a.expires_in_secs !== undefined) {
        c.left.append('answer within ', el('span', { 'data-left': String(a.expires_in_secs), 'data-at': String(state.approvalsAt) }));
      } else {
        c.left.append('until ' + clock(a.expires_at));
      }
      nodes.push(c.root);
    }
    place($('approvals-list'), nodes);
    updateApprovalCount(state.approvals.length);
    renderRecent();
    tick();
  }

  const DECISIONS = { allow: 'allowed', deny: 'denied', expired: 'expired', withdrawn: 'withdrawn' };

  /** The last decisions (GET /approvals' recent, newest first), so a decided card is not
   * simply gone. Their arguments come revealed on one line from the daemon: shown as they
   * are, as text. */
  function renderRecent() {
    const list = $('recent-list');
    list.textContent = '';
    for (const d of state.recent) {
      const word = DECISIONS[d.decision] || String(d.decision);
      const who = d.decision === 'expired' ? 'nobody answered in time' : `by ${principalText(d.by)}`;
      const cls = d.decision === 'allow' ? 'ok' : d.decision === 'deny' ? 'bad' : 'warn';
      list.append(el('li', { 'data-decision': String(d.decision) },
        el('div', { class: 'now-head' },
          el('span', { class: 'chip ' + cls, text: word }),
          el('span', { class: 'tool', text: reveal(String(d.tool)) }),
          el('span', { class: 'ms', text: clock(d.at) })),
        el('div', { class: 'sub', text: `${who}${d.session ? ' · ' + reveal(String(d.session)) : ''}${d.reason ? ' · "' + reveal(String(d.reason)) + '"' : ''}` }),
        el('pre', { class: 'args', text: String(d.arguments ?? '') })));
    }
    $('recent-empty').hidden = state.recent.length > 0;
  }

  // ---- activity: the journal (§22), or the audit log on a handnode without one ----

  /** The journals to choose from: every kept journal (ended grants' too, the owner's /mcp
   * by day), and the grants of GET /attach that have none yet. Newest first. */
  function journalChoices() {
    const byId = new Map(state.grants.map((g) => [g.id, g]));
    const out = [];
    const seen = new Set();
    const grantLabel = (g) => `${g.session} · ${g.profile} · ${g.state} · ${g.id.slice(0, 8)}`;
    for (const g of state.grants.slice().reverse()) {
      if (g.state !== 'ended' && !(state.journals || []).some((j) => j.id === g.id)) {
        out.push({ id: g.id, label: grantLabel(g) + ' · no calls yet', grant: g, calls: false });
        seen.add(g.id);
      }
    }
    for (const j of state.journals || []) {
      if (seen.has(j.id)) continue;
      seen.add(j.id);
      const g = byId.get(j.id);
      const label = j.grant === null
        ? `your own /mcp calls · ${j.day}`
        : g ? grantLabel(g) : `ended grant ${String(j.id).slice(0, 8)} · last call ${clock(j.updated_at)}`;
      out.push({ id: String(j.id), label, grant: g, owner: j.grant === null, calls: true });
    }
    return out;
  }

  function renderActivityChoices() {
    const select = $('activity-grant');
    const journal = state.journalSupported;
    const choices = journal ? journalChoices()
      : state.grants.slice().reverse().map((g) => ({
        id: g.id, label: `${g.session} · ${g.profile} · ${g.state} · ${g.id.slice(0, 8)}`, grant: g, calls: g.calls > 0,
      }));
    // Open on the newest grant that has calls to show, else the newest live one (never on the
    // owner's own /mcp, which the screen below feeds).
    if (!state.activityGrant && choices.length && !(journal && state.journals === null)) {
      const pick = choices.find((c) => c.calls && !c.owner)
        || choices.find((c) => c.grant && c.grant.state !== 'ended') || choices[0];
      state.activityGrant = pick.id;
    }
    const want = choices.map((c) => `${c.id}|${c.label}`).join(',');
    if (select.dataset.built !== want) {
      select.textContent = '';
      for (const c of choices) select.append(el('option', { value: c.id, text: c.label }));
      if (!choices.length) select.append(el('option', { value: '', text: journal ? 'no journal yet' : 'no grants in the last 10 minutes' }));
      select.dataset.built = want;
    }
    if (state.activityGrant && choices.some((c) => c.id === state.activityGrant)) select.value = state.activityGrant;
    $('journal-download').hidden = !journal || !state.activityGrant;
  }
  $('activity-grant').addEventListener('change', () => {
    state.activityGrant = $('activity-grant').value;
    state.activityCalls = -1;
    state.journal = { id: '', seq: 0, count: 0 };
    $('activity-list').textContent = '';
    refreshActivity();
  });

  let activityInFlight = false;
  let activityAgain = false;
  async function refreshActivity() {
    if (!state.signedIn) return;
    if (activityInFlight) { activityAgain = true; return; }
    activityInFlight = true;
    try {
      await readJournals();
      renderActivityChoices();
      scheduleThumb();
      const id = state.activityGrant;
      if (!id) return;
      if (state.journalSupported) {
        await readJournal(id);
      } else {
        const r = await api('GET', `/audit?grant=${encodeURIComponent(id)}&limit=${ACTIVITY_LIMIT}`);
        if (id !== state.activityGrant) return;
        renderActivity(Array.isArray(r.data && r.data.calls) ? r.data.calls : [], !!(r.data && r.data.more));
      }
    } catch (e) {
      const more = $('activity-more');
      more.hidden = false;
      more.textContent = `Could not read the ${state.journalSupported ? 'journal' : 'audit'}: ${e.message}`;
    } finally {
      activityInFlight = false;
    }
    if (activityAgain) { activityAgain = false; refreshActivity(); }
  }

  /** GET /journals; a handnode that predates the journal (404) keeps the audit view. */
  async function readJournals() {
    if (!state.journalSupported) return;
    try {
      const r = await api('GET', '/journals');
      state.journals = Array.isArray(r.data && r.data.journals) ? r.data.journals : [];
    } catch (e) {
      if (e.status !== 404) throw e;
      state.journalSupported = false;
      state.journals = null;
    }
  }

  /** The records of journal `id` after the last one shown (`?since=`), appended in order. */
  async function readJournal(id) {
    const j = state.journal;
    const list = $('activity-list');
    if (j.id !== id) {
      state.journal = { id, seq: 0, count: 0 };
      list.textContent = '';
      $('activity-more').hidden = true;
    }
    for (let page = 0; page < JOURNAL_PAGES; page++) {
      let r;
      try {
        r = await api('GET', `/attach/${encodeURIComponent(id)}/journal?since=${state.journal.seq}`, undefined, { raw: true });
      } catch (e) {
        if (e.status !== 404) throw e;
        r = { data: '', headers: new Headers() }; // no call yet, so no journal yet
      }
      if (id !== state.activityGrant || state.journal.id !== id) return;
      for (const line of String(r.data).split('\n')) {
        if (!line.trim()) continue;
        let rec;
        try { rec = JSON.parse(line); } catch (_) { continue; }
        if (!rec || typeof rec !== 'object') continue;
        const seq = Number(rec.seq ?? rec.first_seq);
        if (Number.isFinite(seq) && seq <= state.journal.seq && rec.kind !== 'dropped') continue;
        list.append(journalRow(rec));
        state.journal.count += 1;
        if (Number.isFinite(Number(rec.seq))) state.journal.seq = Math.max(state.journal.seq, Number(rec.seq));
      }
      // The page keeps the newest JOURNAL_KEEP; journal.html has every one.
      let cut = 0;
      while (list.children.length > JOURNAL_KEEP) { list.firstElementChild.remove(); cut += 1; }
      if (cut || state.journal.cut) {
        state.journal.cut = (state.journal.cut || 0) + cut;
        const more = $('activity-more');
        more.hidden = false;
        more.textContent = `Showing the newest ${JOURNAL_KEEP} calls; download journal.html for all of them.`;
      }
      const next = r.headers.get('Journal-Next-Since');
      if (!next) break;
      state.journal.seq = Math.max(state.journal.seq, Number(next) || 0);
    }
    $('activity-empty').hidden = list.children.length > 0;
  }

  const THUMB_DATA = /^data:image\/(jpeg|png);base64,[A-Za-z0-9+/]+=*$/;

  /** One journal record as a row: everything in it is the agent's, so all of it is text. */
  function journalRow(rec) {
    if (rec.kind === 'dropped') {
      return el('li', { class: 'dropped' }, el('span', { class: 'hint',
        text: `${rec.records} older calls were dropped to keep the journal within its bound (from #${rec.first_seq}).` }));
    }
    const outcome = rec.stopped ? 'stopped' : String(rec.outcome);
    const cls = outcome === 'ok' ? 'ok' : (outcome === 'tool_error' || outcome === 'stopped' ? 'warn' : 'bad');
    const li = el('li', { 'data-tool': String(rec.tool), 'data-seq': String(rec.seq) },
      el('span', { class: 'when', text: clock(rec.started_at) }),
      el('span', { class: 'tool', text: reveal(String(rec.tool)) }),
      el('span', { class: 'chip ' + cls, text: outcome }),
      el('span', { class: 'ms', text: fmtMs(rec.duration_ms) }));
    const a = rec.approval;
    if (a && typeof a === 'object') {
      const word = DECISIONS[a.decision] || String(a.decision);
      const who = a.decision === 'expired' ? 'nobody answered in time' : `by ${principalText(a.by)}`;
      li.append(el('p', { class: 'line approval',
        text: `${word} ${who} at ${clock(a.at)}${a.reason && a.reason !== rec.stopped ? ': "' + reveal(String(a.reason)) + '"' : ''}` }));
    }
    if (rec.stopped) li.append(el('p', { class: 'line stopped', text: reveal(String(rec.stopped)) }));
    const args = rec.arguments;
    const none = args === null || args === undefined
      || (typeof args === 'object' && !Array.isArray(args) && Object.keys(args).length === 0);
    if (!none) li.append(el('pre', { class: 'args', text: revealArguments(args) }));
    // A stopped call's summary is the stop's text, already shown.
    if (rec.summary !== undefined && rec.summary !== '' && rec.summary !== rec.stopped) {
      const summary = String(rec.summary);
      const cut = rec.summary_cut && !summary.endsWith('…') ? '…' : '';
      li.append(el('pre', { class: 'summary', text: summary + cut }));
    }
    const t = rec.thumbnail;
    if (t && typeof t === 'object' && typeof t.data_url === 'string' && THUMB_DATA.test(t.data_url)) {
      li.append(el('img', { class: 'shot', src: t.data_url, alt: 'The screen after this call',
        width: Number(t.width) || 0, height: Number(t.height) || 0, loading: 'lazy' }));
    } else if (t && t.dropped) {
      li.append(el('p', { class: 'line hint', text: 'Its picture of the screen was dropped to keep the journal within its bound.' }));
    } else if (rec.thumbnail_error) {
      li.append(el('p', { class: 'line hint', text: 'No picture of the screen: ' + String(rec.thumbnail_error) }));
    }
    return li;
  }

  /** journal.html as a file: fetched with the token (a link could not carry it), then saved. */
  $('journal-download').addEventListener('click', async () => {
    const button = $('journal-download');
    const id = state.activityGrant;
    if (button.disabled || !id) return;
    $('journal-error').textContent = '';
    busy([button], true);
    try {
      const r = await api('GET', `/attach/${encodeURIComponent(id)}/journal.html`, undefined, { raw: true });
      const url = URL.createObjectURL(new Blob([r.data], { type: 'text/html' }));
      const a = el('a', { href: url, download: `handnode-journal-${id}.html` });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60000);
    } catch (e) {
      $('journal-error').textContent = e.status === 404
        ? 'No journal for this grant yet: it has made no call.' : 'Could not download the journal: ' + e.message;
    } finally {
      busy([button], false);
    }
  });

  /** The audit log's calls (a handnode that predates the journal), newest first. */
  function renderActivity(calls, more) {
    const list = $('activity-list');
    list.textContent = '';
    for (const c of calls) {
      const outcome = String(c.outcome);
      const cls = outcome === 'ok' ? 'ok' : (outcome === 'tool_error' ? 'warn' : 'bad');
      const li = el('li', { 'data-tool': String(c.tool) },
        el('span', { class: 'when', text: new Date(Number(c.ts_ms)).toLocaleTimeString() }),
        el('span', { class: 'tool', text: String(c.tool) }),
        el('span', { class: 'chip ' + cls, text: outcome }),
        el('span', { class: 'ms', text: `${c.duration_ms} ms` }));
      if (c.args !== undefined) li.append(el('pre', { class: 'args', text: JSON.stringify(c.args, null, 2) }));
      if (c.args_omitted) li.append(el('pre', { class: 'args', text: '(arguments too large to show)' }));
      list.append(li);
    }
    $('activity-empty').hidden = calls.length > 0;
    const m = $('activity-more');
    m.hidden = !more;
    m.textContent = more ? `Showing the newest ${calls.length}; older calls may be in the audit log.` : '';
  }

  // ---- screen thumbnail (the owner's screenshot tool on /mcp, or a grant's own display) ----

  let thumbTimer = null;
  let thumbBusy = false;
  let thumbStarted = -Infinity;
  /** The wait before the next screenshot: THUMB_MS, doubled after each failure. */
  let thumbDelay = THUMB_MS;
  let rpcId = 0;

  function thumbWanted() {
    // Not before a journal is chosen: whose screen it is depends on it (§19).
    return state.signedIn && state.view === 'activity' && document.visibilityState === 'visible'
      && state.activityGrant !== '' && state.grants.some((g) => g.state === 'attached');
  }

  // ---- live view (§23) ----
  // A grant's own display on Xvnc, or the box's own display (the lender's desktop, through
  // x11vnc or wayvnc: the grant JSON's live_view says whether one is installed), is shown
  // live with noVNC (Debian's novnc, served at /console/novnc/), watch-only until the
  // lender takes the wheel. Without noVNC, or while a view cannot be opened, the screenshot
  // above goes on.

  /** noVNC's RFB class: null not tried yet, false not installed here. */
  let RFBClass = null;
  /** The open view: {id, rfb, wheel}, or null. */
  let live = null;
  let liveRetryAt = 0;

  async function noVNC() {
    if (RFBClass === null) {
      try {
        RFBClass = (await import('/console/novnc/core/rfb.js')).default || false;
      } catch (_) {
        RFBClass = false;
      }
    }
    return RFBClass;
  }

  /** Whether grant `g` uses the box's own display (the lender's desktop), not one of its
   * own; a browser grant drives neither. */
  function onBoxDisplay(g) {
    return g.display !== 'own' && g.profile !== 'browser';
  }

  /** The grant whose screen the Activity view shows, if it can be shown live. */
  function liveGrant() {
    if (!LIVE || !thumbWanted()) return null;
    const g = state.grants.find((x) => x.id === state.activityGrant);
    if (!g) return null;
    if (g.display === 'own') return g.own_display && g.own_display.live_view ? g : null;
    return onBoxDisplay(g) && g.live_view === true ? g : null;
  }

  function stopLive() {
    const was = live;
    live = null;
    if (was) was.rfb.disconnect();
    $('live').hidden = true;
    $('live').replaceChildren();
    $('live-bar').hidden = true;
  }

  /** How long without the lender's input gives the wheel back, as POST /wheel last said. */
  function idleText(secs) {
    if (!(secs > 0)) return 'A while without your input gives it back.';
    const minutes = secs % 60 === 0 ? secs / 60 : 0;
    if (minutes === 1) return 'One idle minute gives it back.';
    return `${minutes ? `${minutes} idle minutes` : `${secs} idle seconds`} give it back.`;
  }

  /** Who has the wheel, in the bar and in what the view sends. */
  function showWheel(holder) {
    if (!live) return;
    live.wheel = holder;
    const mine = holder === 'lender';
    live.rfb.viewOnly = !mine;
    $('live').classList.toggle('lender', mine);
    $('wheel-button').textContent = mine ? 'Give back' : 'Take over';
    // The box's display has one wheel, shared by every grant on it (§23).
    const whose = live.box
      ? 'your own screen, and every grant on it is refused its mouse and keys'
      : 'this display, and the agent\'s mouse and keys are refused';
    $('wheel-note').textContent = mine
      ? `You have the wheel: your clicks and keys reach ${whose}. ${idleText(state.wheelIdleSecs)}`
      : 'The agent has the wheel; you are watching (your clicks and keys are not sent).';
  }

  /** What the note under the screen says it is: the lender's own desktop must never pass
   * for a sandbox (a lender watching from a phone reads this line, not the pixels). */
  function whoseScreen(g, streaming) {
    if (g.display === 'own') return `${streaming ? 'Live: t' : 'T'}he grant's own display (not yours)`;
    return `${streaming ? 'Live: y' : 'Y'}our own screen: this box's desktop, which the agent sees and can drive (not a sandbox)`;
  }

  /** Open (or keep) the live view when it can be shown; true when it is shown, so the
   * screenshot is not taken. */
  async function syncLive() {
    const g = liveGrant();
    if (live && (!g || g.id !== live.id)) stopLive();
    if (!g) return false;
    if (live) {
      if (!live.pending) showWheel(g.wheel);
      return true;
    }
    if (performance.now() < liveRetryAt) return false;
    const RFB = await noVNC();
    if (!RFB) return false;
    let ticket;
    try {
      // A WebSocket cannot carry the token: a one-use ticket goes as its subprotocol.
      ticket = (await api('POST', `/attach/${encodeURIComponent(g.id)}/view-ticket`)).data;
    } catch (e) {
      liveRetryAt = performance.now() + LIVE_RETRY_MS;
      return false;
    }
    // The grant list may have been re-read meanwhile: the same grant is the same id.
    if (live || (liveGrant() || {}).id !== g.id) return !!live;
    const box = $('live');
    box.replaceChildren();
    // The box's display says its size at connect; until then the page's default shape.
    const [w, h] = String((g.own_display || {}).size || '').split('x').map(Number);
    box.style.aspectRatio = w > 0 && h > 0 ? `${w} / ${h}` : '';
    box.hidden = false;
    $('live-bar').hidden = false;
    $('thumb').hidden = true;
    const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const url = `${scheme}//${location.host}/attach/${encodeURIComponent(g.id)}/view`;
    const rfb = new RFB(box, url, { shared: true, wsProtocols: ['binary', ticket.protocol] });
    rfb.scaleViewport = true;
    rfb.resizeSession = false;
    rfb.viewOnly = true;
    live = { id: g.id, rfb, wheel: null, pending: false, box: onBoxDisplay(g) };
    rfb.addEventListener('connect', () => {
      if (!live || live.rfb !== rfb) return;
      // The canvas has the display's size now: the frame takes its shape (noVNC rescales).
      const canvas = box.querySelector('canvas');
      if (live.box && canvas && canvas.width > 0 && canvas.height > 0) {
        box.style.aspectRatio = `${canvas.width} / ${canvas.height}`;
      }
      $('thumb-note').textContent = whoseScreen(g, true) + '.';
    });
    rfb.addEventListener('disconnect', () => {
      if (!live || live.rfb !== rfb) return;
      stopLive();
      liveRetryAt = performance.now() + LIVE_RETRY_MS;
      $('thumb-note').textContent = 'The live view closed; showing screenshots, and trying again shortly.';
      scheduleThumb();
    });
    showWheel(g.wheel);
    return true;
  }

  $('wheel-button').addEventListener('click', async () => {
    if (!live) return;
    const view = live;
    const take = view.wheel !== 'lender';
    view.pending = true;
    $('wheel-button').disabled = true;
    try {
      const r = await api('POST', `/attach/${encodeURIComponent(view.id)}/wheel`, { take });
      state.wheelIdleSecs = Number(r.data.idle_secs);
      // The box's display has one wheel: every grant on it changed hands.
      for (const g of state.grants) {
        if (g.id === view.id || (view.box && onBoxDisplay(g))) g.wheel = r.data.wheel;
      }
      if (live === view) showWheel(r.data.wheel);
    } catch (e) {
      $('wheel-note').textContent = `Could not ${take ? 'take' : 'give back'} the wheel: ${e.message}`;
    } finally {
      view.pending = false;
      $('wheel-button').disabled = false;
    }
  });

  function scheduleThumb() {
    if (!thumbWanted() && live) stopLive();
    if (thumbBusy || thumbTimer !== null) return;
    if (!thumbWanted()) {
      const note = $('thumb-note');
      if (state.view === 'activity' && !state.grants.some((g) => g.state === 'attached')) {
        $('thumb').hidden = true;
        note.textContent = 'No grant is attached: nothing is watching the screen.';
      }
      return;
    }
    const wait = Math.max(0, thumbStarted + thumbDelay - performance.now());
    thumbTimer = setTimeout(takeThumb, wait);
  }

  async function takeThumb() {
    thumbTimer = null;
    if (!thumbWanted()) return;
    thumbBusy = true;
    thumbStarted = performance.now();
    const note = $('thumb-note');
    const img = $('thumb');
    try {
      const g = state.grants.find((x) => x.id === state.activityGrant);
      $('screen-title').textContent = !g ? 'Screen'
        : (g.display === 'own' ? 'Screen: the grant\'s own display' : 'Screen: yours, this box\'s desktop');
      // A grant with a display of its own (§19): its screen, not the owner's.
      if (await syncLive()) return;
      const own = !!(g && g.display === 'own');
      let result;
      let r;
      if (own) {
        r = await api('GET', `/attach/${encodeURIComponent(g.id)}/screen`);
        result = r.data;
      } else {
        rpcId += 1;
        r = await api('POST', '/mcp', {
          jsonrpc: '2.0', id: rpcId, method: 'tools/call',
          params: { name: 'screenshot', arguments: { scale: THUMB_SCALE, format: 'jpeg', max_bytes: THUMB_MAX_BYTES } },
        });
        result = r.data && r.data.result;
      }
      const blocks = result && Array.isArray(result.content) ? result.content : [];
      const image = blocks.find((b) => b && b.type === 'image' && typeof b.data === 'string');
      const text = blocks.filter((b) => b && b.type === 'text').map((b) => String(b.text)).join(' ');
      if (image && !result.isError && /^image\/(png|jpeg)$/.test(image.mimeType)) {
        img.src = `data:${image.mimeType};base64,${image.data}`;
        img.hidden = false;
        note.textContent = g
          ? `${whoseScreen(g, false)}, taken ${new Date().toLocaleTimeString()}.`
          : `Taken ${new Date().toLocaleTimeString()}.`;
        thumbDelay = THUMB_MS;
      } else {
        const err = r.data && r.data.error ? r.data.error.message : text;
        thumbFailed(err || 'the screenshot tool gave no image');
      }
    } catch (e) {
      thumbFailed(e.message);
    } finally {
      thumbBusy = false;
      scheduleThumb();
    }
  }

  /** A failed screenshot: say why, and wait twice as long before the next try (a box
   * without a display fails every time, and each try is a call in the audit). */
  function thumbFailed(why) {
    $('thumb').hidden = true;
    thumbDelay = Math.min(thumbDelay * 2, THUMB_BACKOFF_MAX_MS);
    $('thumb-note').textContent = `No screen: ${why}. Trying again in ${Math.round(thumbDelay / 1000)} s (each try is a screenshot call, audited).`;
  }

  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'visible') {
      // Someone is looking again: try the screen soon, not after the backed-off wait.
      thumbDelay = THUMB_MS;
      refreshGrants();
      refreshCalls();
      scheduleThumb();
    } else {
      clearTimeout(grantsTimer);
      grantsTimer = null;
    }
  });

  // ---- start ----

  $('box').textContent = location.host;
  lendWarning();
  setInterval(tick, 1000);
  signIn(false);
})();
