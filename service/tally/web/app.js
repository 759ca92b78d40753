// Tally's dashboard page: sign-in, projects and keys, the analytics of a project.
// Plain browser JavaScript (no build step); charts by plotly.js, which Tally serves from the
// plotly Python package. Every element is built with textContent, never innerHTML, and every
// value a chart shows is escaped for plotly's markup (plotText), so nothing a tracked site sends
// (paths, referrers, event names) can inject markup.
'use strict';

(() => {
  const TOKEN_KEY = 'tally.session';
  const WINDOWS = [
    [1, 'Today'],
    [7, 'Last 7 days'],
    [14, 'Last 14 days'],
    [30, 'Last 30 days'],
    [90, 'Last 90 days'],
  ];
  const DEFAULT_DAYS = 7;
  const LIVE_EVERY_MS = 5000;
  // How long an API call may go unanswered before the page says so (with "Try again"): enough
  // for a busy server's 366-day query. A test may set window.tallyApiTimeoutMs to a shorter one.
  const API_TIMEOUT_MS = 30000;
  const COLORS = ['#1d4ed8', '#0d9488', '#d97706', '#be185d', '#7c3aed', '#64748b', '#16a34a', '#dc2626'];

  const main = document.getElementById('main');
  const signOutButton = document.getElementById('signout');
  const who = document.getElementById('who');

  // --- small DOM helpers ------------------------------------------------------------------------

  function h(tag, props, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v == null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'text') el.textContent = v;
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (k === 'value') el.value = v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c != null && c !== false) el.append(c instanceof Node ? c : String(c));
    }
    return el;
  }

  // A name's or label's longest, as the server counts it: characters (code points) once trimmed.
  // maxlength counts UTF-16 units: 30 emoji filled a 60-character name field, cut without a word.
  // Too short is the server's to say (it says that spaces around are trimmed).
  function characters(input, max) {
    const check = () => {
      const n = [...input.value.trim()].length;
      input.setCustomValidity(n > max ? `At most ${max} characters (now ${n}).` : '');
    };
    input.addEventListener('input', check);
    check();
    return input;
  }

  function notice(text, kind = 'info', ...extra) {
    return h('div', { class: `notice ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, h('p', { text }), extra);
  }

  const num = (n) => Number(n).toLocaleString('en-US');
  const when = (iso) => (iso ? new Date(iso).toLocaleString() : 'never');
  const day = (iso) => new Date(iso).toLocaleDateString();

  function duration(ms) {
    if (ms < 1000) return `${ms} ms`;
    const s = Math.round(ms / 1000);
    if (s < 60) return `${s}s`;
    const m = Math.floor(s / 60);
    // Compact, so the card's value stays on one line: "12m 5s", "1h 4m".
    if (m < 60) return `${m}m ${s % 60}s`;
    return `${Math.floor(m / 60)}h ${m % 60}m`;
  }

  // --- session token: kept for this tab only --------------------------------------------------

  const token = {
    get() {
      try {
        return sessionStorage.getItem(TOKEN_KEY);
      } catch (e) {
        return null;
      }
    },
    set(value) {
      sessionStorage.setItem(TOKEN_KEY, value);
    },
    clear() {
      try {
        sessionStorage.removeItem(TOKEN_KEY);
      } catch (e) {
        /* nothing kept */
      }
    },
  };

  // An identity provider's redirect hands the token over in the fragment (#token=..., or the
  // OAuth names), which never reaches a server; it is moved to sessionStorage and out of the URL.
  function takeTokenFromFragment() {
    if (location.hash.length < 2) return false;
    const params = new URLSearchParams(location.hash.slice(1));
    const value = params.get('token') || params.get('access_token') || params.get('id_token');
    if (!value) return false;
    token.set(value);
    history.replaceState(null, '', location.pathname + location.search);
    return true;
  }

  // The token's subject, for display only (the server verifies the token on every request).
  function subject(value) {
    try {
      // base64url of UTF-8 JSON: atob gives its bytes, TextDecoder the text ("jörg", not "jÃ¶rg").
      const part = value.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
      const bytes = Uint8Array.from(atob(part), (c) => c.charCodeAt(0));
      const sub = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes)).sub;
      return typeof sub === 'string' ? sub : '';
    } catch (e) {
      return '';
    }
  }

  // --- API ---------------------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  const STATUS_TEXT = {
    404: 'Not found: this project does not exist, or it belongs to another account.',
    429: 'Too many requests. Wait a moment and try again.',
    503: "Tally's storage is unavailable right now. Try again shortly.",
  };

  // The reads of the view on screen (GET and the query API): a new render aborts them, so that
  // the server stops the queries of a view clicked past (README "Views clicked past stop").
  let reads = new AbortController();

  // A signal aborted with the view's reads, or sooner by its own abort() (a panel's older load).
  function panelReads() {
    const own = new AbortController();
    reads.signal.addEventListener('abort', () => own.abort(), { once: true });
    return own;
  }

  function apiTimeoutMs() {
    const asked = Number(window.tallyApiTimeoutMs);
    return asked > 0 ? asked : API_TIMEOUT_MS;
  }

  // One call of Tally's API. It is aborted when `signal` is (or, for a read, when the view is
  // left), and when no whole answer has come within apiTimeoutMs(): a server that takes the
  // connection but never answers must not leave the page on "Loading…" for ever.
  async function api(method, path, body, signal) {
    const headers = { authorization: `Bearer ${token.get()}` };
    if (body) headers['content-type'] = 'application/json';
    const read = method === 'GET' || path === '/api/v2/query';
    const outer = signal || (read ? reads.signal : undefined);
    const own = new AbortController();
    const follow = () => own.abort();
    if (outer && outer.aborted) own.abort();
    else if (outer) outer.addEventListener('abort', follow, { once: true });
    let late = false;
    const timer = setTimeout(() => {
      late = true;
      own.abort();
    }, apiTimeoutMs());
    let res;
    let data = null;
    try {
      res = await fetch(path, {
        method,
        headers,
        cache: 'no-store',
        body: body ? JSON.stringify(body) : undefined,
        signal: own.signal,
      });
      if (res.status !== 204) {
        try {
          data = await res.json();
        } catch (e) {
          if (own.signal.aborted) throw e; // cut off while reading: not "not JSON"
        }
      }
    } catch (e) {
      if (late) {
        const unsure = read ? '' : ' It may or may not have been done: check before trying again.';
        const seconds = Math.max(1, Math.round(apiTimeoutMs() / 1000));
        throw new ApiError(0, `Tally did not answer in time (${seconds} second${seconds === 1 ? '' : 's'}). It may be busy or stuck: try again in a moment.${unsure}`);
      }
      if (e && e.name === 'AbortError') throw new ApiError(0, 'Left for another view.');
      throw new ApiError(0, 'Tally could not be reached. Check the connection and try again.');
    } finally {
      clearTimeout(timer);
      if (outer) outer.removeEventListener('abort', follow);
    }
    if (res.status === 204) return null;
    if (res.ok) return data;
    if (res.status === 401) {
      token.clear();
      render('Your session has expired or was not accepted. Sign in again.');
      throw new ApiError(401, 'Signed out');
    }
    let message = STATUS_TEXT[res.status] || `Tally answered ${res.status}${data && data.error ? ': ' + data.error : ''}.`;
    if (res.status === 400 && data && data.details) {
      // The API's details say which rule failed, in plain words, at a path: "$.name" + "must be
      // 2 to 60 characters" reads "name must be 2 to 60 characters".
      const field = (p) => (p && p !== '$' ? p.replace(/^\$\.?/, '') : 'the request');
      message = `Please check: ${data.details.map((d) => `${field(d.path)} ${d.message}`).join('; ')}.`;
    }
    throw new ApiError(res.status, message);
  }

  // Shows an error in `where`; a 401 has already taken the page back to the sign-in form.
  function showError(where, err, retry) {
    if (err && err.status === 401) return;
    console.warn(err);
    const button = retry && h('button', { type: 'button', text: 'Try again', onclick: retry });
    where.replaceChildren(notice(err && err.message ? err.message : String(err), 'error', button));
  }

  // --- navigation: state lives in the query string (?project=ID&tab=keys&days=7) -----------------

  // The view of a dashboard is all in the URL, so a filtered view can be bookmarked and shared:
  // ?project=ID&days=N or &from=YYYY-MM-DD&to=YYYY-MM-DD, &filters=<JSON of /api/dashboard's
  // filters>, &compare=previous_period|previous_year, &panels=<panel:tab,...>. route() reads it,
  // viewParams() writes it,
  // apiQuery() turns it into the query string of /api/dashboard and /api/breakdown.
  const COMPARES = ['previous_period', 'previous_year'];
  const ISO_DATE = /^\d{4}-\d{2}-\d{2}$/;

  function parseFilters(text) {
    if (!text) return [];
    try {
      const f = JSON.parse(text);
      return Array.isArray(f) ? f.filter((x) => Array.isArray(x) && x.length === 3 && Array.isArray(x[2])) : [];
    } catch {
      return [];
    }
  }

  function route() {
    const q = new URLSearchParams(location.search);
    const days = Number(q.get('days'));
    const from = q.get('from') || '';
    const to = q.get('to') || '';
    const range = ISO_DATE.test(from) && ISO_DATE.test(to);
    return {
      project: q.get('project') || '',
      tab: ['keys', 'settings'].includes(q.get('tab')) ? q.get('tab') : 'dashboard',
      // Any whole number of days the API takes (1-90), not only the presets: a shared
      // `days=3` view showed the last 7 days.
      days: Number.isInteger(days) && days >= 1 && days <= 90 ? days : DEFAULT_DAYS,
      from: range ? from : '',
      to: range ? to : '',
      filters: parseFilters(q.get('filters')),
      compare: COMPARES.includes(q.get('compare')) ? q.get('compare') : '',
      panels: parsePanels(q.get('panels')),
    };
  }

  // The tab each panel shows, when not its first: "sources:referrer,entry-exit:exitPage". Kept
  // in the URL, so that clicking a row of a second tab (which filters, and redraws the view)
  // leaves the panel on that tab, and a shared view opens as it was seen.
  function parsePanels(text) {
    const panels = {};
    for (const part of (text || '').split(',')) {
      const [id, by] = part.split(':');
      if (id && by && Object.hasOwn(BY_LABEL, by)) panels[id] = by;
    }
    return panels;
  }

  // The URL parameters of view r (changes applied), for href() and go().
  function viewParams(r, changes = {}) {
    // the panels' tabs as the address has them now: a tab is picked without a new view
    const v = { ...r, panels: route().panels, ...changes };
    return {
      project: v.project,
      tab: v.tab && v.tab !== 'dashboard' ? v.tab : '',
      days: v.from || v.days === DEFAULT_DAYS ? '' : v.days,
      from: v.from,
      to: v.to,
      filters: v.filters && v.filters.length ? JSON.stringify(v.filters) : '',
      compare: v.compare,
      panels: Object.entries(v.panels || {})
        .map(([id, by]) => `${id}:${by}`)
        .join(','),
    };
  }

  // The API query string of view r: projectId, days or from/to, filters, compare (unless
  // extra.compare === false), then the extra parameters (e.g. {by, limit} of a breakdown).
  function apiQuery(projectId, r, extra = {}) {
    const q = new URLSearchParams({ projectId });
    if (r.from && r.to) {
      q.set('from', r.from);
      q.set('to', r.to);
    } else q.set('days', String(r.days));
    if (r.filters.length) q.set('filters', JSON.stringify(r.filters));
    if (r.compare && extra.compare !== false) q.set('compare', r.compare);
    for (const [k, v] of Object.entries(extra)) if (k !== 'compare' && v !== undefined && v !== '') q.set(k, String(v));
    return q.toString();
  }

  // The API's longest filter value, in characters (code points).
  const MAX_FILTER_VALUE = 2048;

  // The first n characters (code points) of text: never half of a surrogate pair.
  function cutText(text, n) {
    const s = String(text);
    if (s.length <= n) return s;
    let out = '';
    let count = 0;
    for (const ch of s) {
      if (count++ >= n) break;
      out += ch;
    }
    return out;
  }
  const charCount = (text) => [...String(text)].length;

  // The filter a click on a row (or bar) with this value makes: `is` the value, or, for a value
  // longer than the API takes in a filter (a referrer of up to 4096 characters), `contains` its
  // first 2048 characters, so the chip says what the numbers are.
  function clickFilter(dim, value) {
    const text = String(value);
    return charCount(text) > MAX_FILTER_VALUE ? ['contains', dim, [cutText(text, MAX_FILTER_VALUE)]] : ['is', dim, [text]];
  }

  // Clicking a row of a panel keeps only that traffic: a filter on the row's dimension,
  // replacing any earlier filter on the same dimension (as Plausible does).
  function addFilter(dim, value) {
    const r = route();
    const filters = r.filters.filter(([, d]) => d !== dim).concat([clickFilter(dim, value)]);
    go(viewParams(r, { filters }), `chip-${filters.length - 1}`);
  }

  function href(params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v) q.set(k, v);
    const s = q.toString();
    return '/' + (s ? '?' + s : '');
  }

  function go(params, focusId) {
    keepFocus(focusId);
    history.pushState(null, '', href(params));
    render();
  }

  // A view is rebuilt on every change, which drops the focus on the page's body: a keyboard or
  // screen-reader user would start again from the top. So a change remembers the control that
  // made it (its id, or the one given) and, once the new view is built, focus goes back to the
  // control with that id, or, when there is none, to the view's heading.
  let focusAfter = null;
  let said = ''; // a message for the next view (a deletion's outcome)
  let settingsSaved = false; // the next view follows a save of the settings (said by the one render)

  // What an action did, said to screen readers: one live region for the page, outside <main>, so
  // it is there before its words change (a region built with its words is often not read) and
  // no rebuilt view takes it away. A new view clears it: its words were about the last one.
  const announcer = h('div', { id: 'announcer', class: 'sr-only', role: 'status' });
  document.body.append(announcer);
  let announceTimer = 0;

  function announce(text) {
    clearTimeout(announceTimer);
    announcer.textContent = '';
    // set a moment after it is emptied: the same words again would not be read again
    announceTimer = setTimeout(() => (announcer.textContent = text), 100);
  }

  function keepFocus(id) {
    const active = document.activeElement;
    focusAfter = { id: id || (active && main.contains(active) ? active.id : '') };
  }

  function settleFocus() {
    if (!focusAfter) return;
    const wanted = focusAfter.id && document.getElementById(focusAfter.id);
    focusAfter = null;
    if (wanted) return wanted.focus();
    const active = document.activeElement;
    if (active && active !== document.body && main.contains(active)) return;
    const heading = main.querySelector('h1');
    if (!heading) return;
    heading.tabIndex = -1;
    heading.focus();
  }

  function link(text, params, props = {}) {
    return h('a', {
      ...props,
      href: href(params),
      text,
      onclick: (e) => {
        if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
        e.preventDefault();
        go(params);
      },
    });
  }

  // --- rendering -----------------------------------------------------------------------------------

  let generation = 0; // a newer render makes the older one's late answers moot
  let cleanups = [];

  function render(message, kind = 'error') {
    generation += 1;
    reads.abort();
    reads = new AbortController();
    for (const fn of cleanups) fn();
    cleanups = [];
    clearTimeout(announceTimer);
    announcer.textContent = '';
    const justSaved = settingsSaved;
    settingsSaved = false;
    const value = token.get();
    signOutButton.hidden = !value;
    who.textContent = value && subject(value) ? `Signed in as ${subject(value)}` : '';
    if (!value) return signInView(message, kind);
    const r = route();
    return r.project ? projectView(r, generation, justSaved) : projectsView(generation);
  }

  function show(...nodes) {
    main.replaceChildren(...nodes);
  }

  function signInView(message, kind) {
    document.title = 'Sign in · Tally';
    focusAfter = null; // the focus goes to the token field, below
    const input = h('textarea', {
      id: 'token-input',
      name: 'token',
      rows: 4,
      required: true,
      autocomplete: 'off',
      spellcheck: 'false',
      placeholder: 'eyJhbGciOi…',
    });
    const form = h(
      'form',
      {
        class: 'card stack',
        id: 'signin',
        onsubmit: (e) => {
          e.preventDefault();
          const value = input.value.trim().replace(/^Bearer\s+/i, '');
          if (!value) return;
          token.set(value);
          keepFocus(); // the form is gone with the sign-in view: the focus goes to the new view's heading
          render();
        },
      },
      h('label', { for: 'token-input', text: 'Session token' }),
      input,
      h('button', { type: 'submit', class: 'primary', text: 'Sign in' })
    );
    show(
      h(
        'section',
        { class: 'narrow' },
        h('h1', { text: 'Sign in to Tally' }),
        message && notice(message, kind),
        h(
          'p',
          {},
          'Tally uses sessions from your identity provider. Paste a session token below, or sign in through your provider, which brings you back here with the token in the address.'
        ),
        form,
        h('p', { class: 'muted' }, 'Running Tally locally in dev mode? ', h('code', { text: 'tally token --sub you' }), ' prints a token.'),
        h('p', { class: 'muted', text: 'The token is kept for this browser tab only, and forgotten when you sign out or close the tab.' })
      )
    );
    input.focus();
  }

  function crumbs(...parts) {
    return h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, parts.map((p, i) => [i ? h('span', { class: 'sep', text: '/' }) : null, p]));
  }

  // --- time zones ---------------------------------------------------------------------------------

  function browserZone() {
    try {
      return currentZoneName(Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC');
    } catch (e) {
      return 'UTC';
    }
  }

  // Names browsers still list (CLDR keeps the old ones) for zones IANA has renamed: the current
  // name is offered (Asia/Kathmandu, not Asia/Katmandu); the server knows both.
  const ZONE_RENAMED = {
    'Africa/Asmera': 'Africa/Asmara',
    'America/Buenos_Aires': 'America/Argentina/Buenos_Aires',
    'America/Catamarca': 'America/Argentina/Catamarca',
    'America/Coral_Harbour': 'America/Atikokan',
    'America/Cordoba': 'America/Argentina/Cordoba',
    'America/Godthab': 'America/Nuuk',
    'America/Indianapolis': 'America/Indiana/Indianapolis',
    'America/Jujuy': 'America/Argentina/Jujuy',
    'America/Louisville': 'America/Kentucky/Louisville',
    'America/Mendoza': 'America/Argentina/Mendoza',
    'Asia/Calcutta': 'Asia/Kolkata',
    'Asia/Katmandu': 'Asia/Kathmandu',
    'Asia/Rangoon': 'Asia/Yangon',
    'Asia/Saigon': 'Asia/Ho_Chi_Minh',
    'Atlantic/Faeroe': 'Atlantic/Faroe',
    'Europe/Kiev': 'Europe/Kyiv',
    'Pacific/Enderbury': 'Pacific/Kanton',
    'Pacific/Ponape': 'Pacific/Pohnpei',
    'Pacific/Truk': 'Pacific/Chuuk',
  };

  function currentZoneName(zone) {
    return ZONE_RENAMED[zone] || zone;
  }

  // A select of the browser's IANA zones (Tally refuses, in words, any the server does not know).
  function zoneSelect(id, current) {
    const listed = typeof Intl.supportedValuesOf === 'function' ? Intl.supportedValuesOf('timeZone') : [];
    const zones = [...new Set(listed.map(currentZoneName))];
    for (const z of ['UTC', current]) if (z && !zones.includes(z)) zones.push(z);
    zones.sort();
    const select = h('select', { id, name: 'timezone' }, zones.map((z) => h('option', { value: z, text: z.replaceAll('_', ' ') })));
    select.value = current;
    return select;
  }

  // --- projects -------------------------------------------------------------------------------------

  async function projectsView(gen) {
    const list = h('div', { id: 'project-list' }, h('p', { class: 'muted', text: 'Loading projects…' }));
    const created = h('div', { id: 'created' });
    const name = h('input', {
      id: 'project-name',
      name: 'name',
      required: true,
      placeholder: 'My site',
      autocomplete: 'off',
    });
    characters(name, 60);
    const zone = zoneSelect('project-zone', browserZone());
    const button = h('button', { type: 'submit', class: 'primary', text: 'Create project' });
    const form = h(
      'form',
      {
        class: 'inline-form',
        id: 'create-project',
        onsubmit: async (e) => {
          e.preventDefault();
          button.disabled = true;
          try {
            const made = await api('POST', '/api/projects', { name: name.value.trim(), timezone: zone.value });
            name.value = '';
            reveal(created, made.apiKey, 'Project created', made.projectId);
            await fill();
          } catch (err) {
            showError(created, err);
          } finally {
            button.disabled = false;
          }
        },
      },
      h('label', { for: 'project-name', class: 'sr-only', text: 'Project name' }),
      name,
      h('label', { for: 'project-zone', class: 'sr-only', text: 'Time zone' }),
      zone,
      button
    );

    async function fill() {
      try {
        const { projects } = await api('GET', '/api/projects');
        if (gen !== generation) return;
        if (!projects.length) {
          list.replaceChildren(h('p', { class: 'empty', text: 'No projects yet. Create one to get an API key and the snippet for your site.' }));
          return;
        }
        list.replaceChildren(
          h(
            'ul',
            { class: 'projects' },
            projects.map((p) =>
              h('li', { class: 'card' }, link(p.name, { project: p.id }, { class: 'project-link', dir: 'auto' }), h('span', { class: 'muted', text: `created ${day(p.createdAt)} · ${p.timezone}` }))
            )
          )
        );
      } catch (err) {
        if (gen === generation) showError(list, err, fill);
      }
    }

    const done = said ? notice(said, 'info') : null; // what the last action did, said once
    said = '';
    document.title = 'Projects · Tally';
    show(h('section', {}, h('h1', { text: 'Projects' }), done, list, h('h2', { text: 'New project' }), form, created));
    settleFocus();
    await fill();
  }

  function snippet(key) {
    return `<script src="${location.origin}/tally.js" data-api-key="${key}" defer></script>`;
  }

  async function copy(field, value, status) {
    try {
      await navigator.clipboard.writeText(value);
      status.textContent = 'Copied';
    } catch (e) {
      field.focus();
      field.select();
      // Without the clipboard API (a page not served over HTTPS), the older command may still work.
      status.textContent = document.execCommand && document.execCommand('copy') ? 'Copied' : 'Selected: press Ctrl+C (⌘C) to copy';
    }
  }

  // name: what the Copy button copies, in its accessible name ("Copy API key"): two buttons both
  // called "Copy" cannot be told apart in a screen reader's list of buttons. Said by a hidden
  // part of its text, not aria-label, so that the button is no second "label" of its field.
  function copyField(label, name, value, multiline, testid, describedBy) {
    const props = { class: 'mono', readonly: true, value, 'aria-label': label, 'aria-describedby': describedBy, 'data-testid': testid };
    const field = multiline ? h('textarea', { ...props, rows: 3 }) : h('input', props);
    const status = h('span', { class: 'muted copy-status', role: 'status' });
    const button = h('button', { type: 'button', 'data-copy': testid, onclick: () => copy(field, value, status) }, 'Copy', h('span', { class: 'sr-only', text: ` ${name}` }));
    return h('div', { class: 'copy' }, h('span', { class: 'copy-label', text: label }), h('div', { class: 'copy-row' }, field, button), status);
  }

  // The new key, shown once. Put in `where`, said, and focused: a keyboard or screen-reader user
  // would otherwise not know it is there, below the form, and might leave the page without it.
  function reveal(where, key, title, projectId) {
    const card = h(
      'div',
      { class: 'card reveal', 'data-testid': 'new-key', role: 'region', 'aria-labelledby': 'new-key-title' },
      h('h3', { id: 'new-key-title', text: title }),
      h('p', { id: 'new-key-note', text: 'This API key is shown only now: Tally keeps only a hash of it. Copy it, or the ready-made snippet, before leaving this page.' }),
      copyField('API key', 'API key', key, false, 'api-key', 'new-key-note'),
      copyField('Snippet: paste it into every page of your site, in the <head>', 'snippet', snippet(key), true, 'snippet'),
      projectId ? h('p', {}, link('Open its dashboard →', { project: projectId })) : null
    );
    where.replaceChildren(card);
    announce(`${title}: copy its API key now, it is shown only once.`);
    card.querySelector('[data-testid=api-key]').focus();
  }

  async function projectView(r, gen, justSaved) {
    const body = h('div', { 'aria-busy': 'true' }, h('p', { class: 'muted', text: 'Loading…' }));
    show(h('section', {}, crumbs(link('Projects', {})), body));
    let project;
    try {
      const { projects } = await api('GET', '/api/projects');
      project = projects.find((p) => p.id === r.project);
    } catch (err) {
      if (gen !== generation) return;
      body.removeAttribute('aria-busy');
      showError(body, err, () => render());
      return;
    }
    if (gen !== generation) return;
    if (!project) {
      // a view of its own, named as the others are (a heading, and the tab's title)
      document.title = 'Project not found · Tally';
      show(
        h(
          'section',
          {},
          crumbs(link('Projects', {})),
          h('h1', { text: 'Project not found' }),
          notice('It does not exist, or it belongs to another account.', 'error', h('p', {}, link('Back to your projects', {})))
        )
      );
      settleFocus();
      return;
    }
    const tab = (name, label) =>
      link(label, viewParams(r, { tab: name }), {
        id: `tab-${name}`,
        class: `tab${r.tab === name ? ' active' : ''}`,
        'aria-current': r.tab === name ? 'page' : null,
      });
    const content = h('div', {});
    document.title = `${project.name} · Tally`;
    main.replaceChildren(
      h(
        'section',
        {},
        crumbs(link('Projects', {}), h('span', { dir: 'auto', text: project.name })),
        h(
          'div',
          { class: 'title-row' },
          h('h1', { id: 'project-title', dir: 'auto', text: project.name }),
          h('nav', { class: 'tabs' }, tab('dashboard', 'Dashboard'), tab('keys', 'Keys & snippet'), tab('settings', 'Settings'))
        ),
        h('p', { class: 'muted zone', 'data-testid': 'project-zone', text: `Time zone: ${project.timezone}` }),
        content
      )
    );
    if (r.tab === 'keys') await keysView(project, content, gen);
    else if (r.tab === 'settings') settingsView(project, content, justSaved);
    else await dashboardView(project, r, content, gen);
    if (gen === generation) settleFocus();
  }

  // --- project settings -----------------------------------------------------------------------------

  // justSaved: the view follows a save of the settings, which it shows for the eyes (announce()
  // says it to screen readers, so this notice has no live role of its own)
  function settingsView(project, where, justSaved) {
    const status = h('div', { id: 'settings-status' }, justSaved ? h('div', { class: 'notice info' }, h('p', { text: 'Settings saved.' })) : null);
    const name = h('input', { id: 'settings-name', name: 'name', required: true, value: project.name, autocomplete: 'off' });
    characters(name, 60);
    const zone = zoneSelect('settings-zone', project.timezone);
    const bots = h('input', { id: 'settings-bots', name: 'excludeBots', type: 'checkbox', class: 'check' });
    bots.checked = project.excludeBots;
    const save = h('button', { type: 'submit', class: 'primary', id: 'settings-save', text: 'Save settings' });
    const form = h(
      'form',
      {
        class: 'card stack settings',
        id: 'project-settings',
        onsubmit: async (e) => {
          e.preventDefault();
          const body = { projectId: project.id };
          if (name.value.trim() !== project.name) body.name = name.value.trim();
          if (zone.value !== project.timezone) body.timezone = zone.value;
          if (bots.checked !== project.excludeBots) body.excludeBots = bots.checked;
          save.disabled = true;
          try {
            await api('PATCH', '/api/projects', body);
            keepFocus('settings-save');
            settingsSaved = true;
            render(); // the title and the zone line show the new values
            announce('Settings saved.');
          } catch (err) {
            showError(status, err);
            save.disabled = false;
          }
        },
      },
      h('label', { for: 'settings-name', text: 'Name' }),
      name,
      h('label', { for: 'settings-zone', text: 'Time zone: the project’s days and hours' }),
      zone,
      h('label', { class: 'check-row' }, bots, ' Leave bot traffic (crawlers, monitors, headless browsers) out of the numbers'),
      h('div', {}, save)
    );

    const confirmName = h('input', { id: 'delete-confirm', autocomplete: 'off', placeholder: project.name });
    const remove = h('button', { type: 'button', class: 'danger', id: 'delete-project', text: 'Delete this project forever', disabled: true });
    confirmName.addEventListener('input', () => {
      remove.disabled = confirmName.value.trim() !== project.name;
    });
    remove.addEventListener('click', async () => {
      remove.disabled = true;
      try {
        await api('DELETE', `/api/projects?projectId=${project.id}`);
        said = `Project “${project.name}” is deleted, with its keys and its data.`;
        go({});
      } catch (err) {
        showError(status, err);
        remove.disabled = false;
      }
    });
    const danger = h(
      'div',
      { class: 'card stack danger-zone' },
      h('h2', { text: 'Delete project' }),
      h('p', { text: 'Its API keys stop working at once, and its events and every number computed from them are deleted. This cannot be undone.' }),
      h('label', { for: 'delete-confirm', text: `Type the project’s name, ${project.name}, to confirm` }),
      confirmName,
      h('div', {}, remove)
    );
    where.replaceChildren(status, form, danger);
  }

  // --- keys -----------------------------------------------------------------------------------------

  async function keysView(project, where, gen) {
    const heading = h('h2', { id: 'keys-title', text: 'API keys' });
    const table = h('div', { id: 'keys' }, h('p', { class: 'muted', text: 'Loading keys…' }));
    const created = h('div', {});
    const label = h('input', { id: 'key-label', name: 'label', placeholder: 'Label, e.g. Staging', autocomplete: 'off' });
    characters(label, 60);
    const button = h('button', { type: 'submit', class: 'primary', text: 'Add key' });
    const form = h(
      'form',
      {
        class: 'inline-form',
        id: 'add-key',
        onsubmit: async (e) => {
          e.preventDefault();
          button.disabled = true;
          const body = { projectId: project.id };
          if (label.value.trim()) body.label = label.value.trim();
          try {
            const made = await api('POST', '/api/projects/keys', body);
            label.value = '';
            reveal(created, made.apiKey, 'Key added');
            created.dataset.keyId = made.id; // revoked, its card goes (a dead key is no key to copy)
            await fill();
          } catch (err) {
            showError(created, err);
          } finally {
            button.disabled = false;
          }
        },
      },
      h('label', { for: 'key-label', class: 'sr-only', text: 'Key label' }),
      label,
      button
    );

    function revokeButton(key) {
      let armed = false;
      // named with its key: a list of buttons all called "Revoke" does not say which key goes
      const name = key.label || key.keyPreview;
      const arm = (on) => {
        armed = on;
        button.textContent = on ? 'Confirm revoke' : 'Revoke';
        button.setAttribute('aria-label', on ? `Confirm revoke of key ${name}` : `Revoke key ${name}`);
      };
      const button = h('button', {
        type: 'button',
        class: 'danger',
        text: 'Revoke',
        'aria-label': `Revoke key ${name}`,
        'data-revoke': key.id,
        onclick: async () => {
          if (!armed) return arm(true);
          button.disabled = true;
          try {
            await api('DELETE', `/api/projects/keys?projectId=${project.id}&keyId=${key.id}`);
            announce(`Key “${name}” revoked.`);
            if (created.dataset.keyId === key.id) {
              created.replaceChildren();
              delete created.dataset.keyId;
            }
            await fill();
            // its row (and the focused button) is gone: the focus goes to the table's heading,
            // not to the top of the page
            if (gen === generation) {
              heading.tabIndex = -1;
              heading.focus();
            }
          } catch (err) {
            showError(created, err);
            button.disabled = false;
          }
        },
      });
      // Armed until the focus leaves it, or Escape (no timer: a screen-reader user takes the time
      // they need).
      button.addEventListener('blur', () => {
        if (armed && !button.disabled) arm(false);
      });
      button.addEventListener('keydown', (e) => {
        if (e.key === 'Escape' && armed && !button.disabled) {
          e.preventDefault();
          arm(false);
        }
      });
      return button;
    }

    async function fill() {
      try {
        const { keys } = await api('GET', `/api/projects/keys?projectId=${project.id}`);
        if (gen !== generation) return;
        if (!keys.length) {
          table.replaceChildren(h('p', { class: 'empty', text: 'This project has no live keys: add one below.' }));
          return;
        }
        table.replaceChildren(
          h(
            'div',
            { class: 'table-wrap' },
            h(
              'table',
              {},
              h('thead', {}, h('tr', {}, ['Label', 'Key', 'Created', 'Last used'].map((t) => h('th', { text: t })), h('th', {}, h('span', { class: 'sr-only', text: 'Actions' })))),
              h(
                'tbody',
                {},
                keys.map((k) =>
                  h(
                    'tr',
                    { 'data-key': k.id },
                    // the label names the row: a screen reader says it with each cell of the row
                    h('th', { scope: 'row', dir: 'auto', text: k.label }),
                    h('td', { class: 'mono', text: k.keyPreview }),
                    h('td', { text: when(k.createdAt) }),
                    h('td', { text: when(k.lastUsedAt) }),
                    h('td', {}, revokeButton(k))
                  )
                )
              )
            )
          )
        );
      } catch (err) {
        if (gen === generation) showError(table, err, fill);
      }
    }

    where.replaceChildren(
      heading,
      h('p', { class: 'muted', text: 'A revoked key stops working within seconds. Keys are shown in full only when created.' }),
      table,
      h('h2', { text: 'Add a key' }),
      form,
      created,
      h('h2', { text: 'Install the tracker' }),
      h('p', {}, 'Put this tag in every page of your site, with one of the project’s keys:'),
      h('pre', { class: 'mono block' }, snippet('YOUR_API_KEY')),
      h(
        'ul',
        { class: 'muted' },
        h('li', {}, h('code', { text: 'data-endpoint' }), ': send to another collect URL'),
        h('li', {}, h('code', { text: 'data-cookieless' }), ': keep no identifiers on the visitor’s device'),
        h('li', {}, h('code', { text: 'data-respect-dnt' }), ': send nothing when the browser asks not to be tracked'),
        h('li', {}, 'custom events: ', h('code', { text: "tally.track('signup', { plan: 'pro' })" }))
      )
    );
    await fill();
  }

  // --- dashboard ------------------------------------------------------------------------------------

  const CARDS = [
    ['totalEvents', 'Events', num],
    ['pageviews', 'Pageviews', num],
    ['uniqueVisitors', 'Unique visitors', num],
    ['uniqueSessions', 'Sessions', num],
    ['bounceRate', 'Bounce rate', (v) => `${v}%`],
    ['avgSessionDurationMs', 'Avg. session', duration],
  ];

  const valueSize = (text) => (String(text).length >= 12 ? ' longer' : String(text).length >= 10 ? ' long' : '');

  function card(key, label, value, text, hint) {
    return h(
      'div',
      { class: 'card metric', 'data-metric': key, 'data-value': value },
      h('span', { class: 'label', text: label }),
      // A long count gets a smaller type so that it is read whole (12,345,678 was cut to
      // "12,345,67…" in a 150 px card, and a phone scrolled sideways).
      h('strong', { class: `value${valueSize(text)}`, text }),
      hint ? h('span', { class: 'hint muted', text: hint }) : null
    );
  }

  // columns: [label, value of a row, cell class ('num' for counts, 'nowrap', 'trunc' for one line
  // cut with an ellipsis and the whole value in its title, or the default 'text')]
  // filterBy: [dimension, value of a row]: each row filters the dashboard by its value on click.
  function table(testid, columns, rows, empty, wide, filterBy) {
    if (!rows.length) return h('p', { class: 'empty', 'data-testid': testid, text: empty });
    const rowProps = (row) => {
      if (!filterBy) return {};
      const [dim, get] = filterBy;
      const value = String(get(row));
      const pick = () => addFilter(dim, value);
      return {
        class: 'filterable',
        tabindex: '0',
        title: clickFilter(dim, value)[0] === 'is' ? `Show only ${dim === 'country' ? countryName(value) : value}` : `Show only values containing its first ${MAX_FILTER_VALUE} characters`,
        'data-filter-dim': dim,
        'data-filter-value': value,
        onclick: pick,
        onkeydown: (e) => {
          if (e.key === 'Enter' || e.key === ' ') {
            e.preventDefault();
            pick();
          }
        },
      };
    };
    return h(
      'div',
      { class: 'table-wrap' },
      h(
        'table',
        { 'data-testid': testid, class: wide ? 'wide-table' : null },
        h('thead', {}, h('tr', {}, columns.map(([label, , kind]) => h('th', { class: kind === 'num' ? 'num' : null, text: label })))),
        // dir=auto: a right-to-left value (a Hebrew path, an Arabic event name) reads from its
        // own start, which a cut one-line cell keeps in view (its ellipsis at its end, the left)
        h(
          'tbody',
          {},
          rows.map((row) =>
            h(
              'tr',
              rowProps(row),
              columns.map(([, get, kind]) => h('td', { class: kind || 'text', dir: kind === 'num' ? null : 'auto', text: get(row), title: kind === 'trunc' ? String(get(row)) : null }))
            )
          )
        )
      )
    );
  }

  // csv: [file name, header, rows (arrays)]: the panel offers its data as a CSV file.
  function panel(title, body, wide, csv) {
    const head = csv
      ? h('div', { class: 'panel-head' }, h('h2', { text: title }), h('button', { type: 'button', class: 'link', 'data-csv': csv[0], text: 'Download CSV', 'aria-label': `Download CSV: ${title}`, onclick: () => saveCsv(...csv) }))
      : h('h2', { text: title });
    return h('section', { class: `card panel${wide ? ' wide' : ''}` }, head, body);
  }

  // --- downloads ---------------------------------------------------------------------------------

  const csvCell = (v) => {
    const text = v === null || v === undefined ? '' : String(v);
    const quoted = ['"', ',', '\r', '\n'].some((c) => text.includes(c));
    return quoted ? '"' + text.replaceAll('"', '""') + '"' : text;
  };
  const csvText = (header, rows) => [header, ...rows].map((r) => r.map(csvCell).join(',')).join('\r\n') + '\r\n';

  function saveBlob(blob, filename) {
    const url = URL.createObjectURL(blob);
    const a = h('a', { href: url, download: filename, hidden: true });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  }

  // The longest name=value a browser keeps as a cookie (4096 bytes, less room for the name).
  const COOKIE_MAX = 4000;

  // `method` of an export URL with the session's header; the answer when it is a success, else
  // null once `status` (or, for an expired session, the sign-in page) says why.
  async function exportAnswer(url, method, status) {
    let res;
    try {
      res = await fetch(url, { method, headers: { authorization: `Bearer ${token.get()}` }, cache: 'no-store' });
    } catch (e) {
      status.textContent = 'Tally could not be reached. Check the connection and try again.';
      return null;
    }
    if (res.status === 401) {
      token.clear();
      render('Your session has expired or was not accepted. Sign in again.');
      return null;
    }
    if (!res.ok) {
      status.textContent = STATUS_TEXT[res.status] || `Tally answered ${res.status}.`;
      return null;
    }
    return res;
  }

  function saveCsv(filename, header, rows) {
    saveBlob(new Blob([csvText(header, rows)], { type: 'text/csv' }), filename);
  }

  const isoDay = (date) => date.toISOString().slice(0, 10);

  // The raw events of the view's range, as Tally's export writes them (GET /api/export): days =
  // [from, to], the UTC days that cover the range's local days (exportDays).
  async function downloadEvents(project, days, status) {
    const [from, to] = days;
    const query = `projectId=${project.id}&from=${from}&to=${to}&format=csv`;
    status.textContent = 'Preparing the download…';
    const url = `/api/export?${query}`;
    const cookie = `tally_session=${token.get()}`;
    if (cookie.length > COOKIE_MAX) {
      // Browsers keep no cookie over 4096 bytes, and an identity provider's token with many
      // claims can be longer: then the file comes by a fetch with the header (its answer is the
      // check), held in the page's memory until it is saved.
      status.textContent = 'Downloading: the file is saved once all of it has arrived.';
      const res = await exportAnswer(url, 'GET', status);
      if (!res) return;
      let blob;
      try {
        blob = await res.blob();
      } catch (e) {
        status.textContent = 'Tally could not be reached. Check the connection and try again.';
        return;
      }
      const named = /filename="([^"]+)"/.exec(res.headers.get('content-disposition') || '');
      saveBlob(blob, named ? named[1] : 'tally-export');
      status.textContent = 'Downloaded.';
      return;
    }
    // HEAD: the answer's status (session, project, range, rate limit) without the file.
    if (!(await exportAnswer(url, 'HEAD', status))) return;
    // The browser downloads the file itself: streamed to disk with its own progress, where a
    // fetch held all of it in the page's memory first (gigabytes for 90 days of a large site).
    // A link carries no header, so the session goes as the cookie Tally also reads, sent only to
    // /api/export, never cross-site, for a minute.
    const secure = location.protocol === 'https:' ? '; Secure' : '';
    document.cookie = `${cookie}; Path=/api/export; Max-Age=60; SameSite=Strict${secure}`;
    const link = h('a', { href: url, download: '', hidden: true });
    document.body.append(link);
    link.click();
    link.remove();
    status.textContent = 'Downloading: your browser shows the progress.';
  }

  function chartBox(name) {
    return h('div', { class: 'chart', 'data-chart': name });
  }

  // A chart is a picture: screen readers get its numbers as a table instead (visually hidden,
  // just after it), and the chart itself, whose SVG would read out only axis ticks, is hidden
  // from them. `head` names the columns, `rows` hold the cells.
  function chartTable(el, caption, head, rows) {
    el.setAttribute('aria-hidden', 'true');
    const old = el.nextElementSibling;
    if (old && old.dataset.tableOf === el.dataset.chart) old.remove();
    // hidden by a wrapper: a table grows to its content whatever width it is given
    el.after(
      h(
        'div',
        { class: 'sr-only', 'data-table-of': el.dataset.chart },
        h(
          'table',
          { 'data-table-of': el.dataset.chart },
          h('caption', { text: caption }),
          h('thead', {}, h('tr', {}, head.map((text) => h('th', { scope: 'col', text })))),
          h('tbody', {}, rows.map((cells) => h('tr', {}, cells.map((text) => h('td', { text: String(text) })))))
        )
      )
    );
  }

  const BASE_LAYOUT = {
    autosize: true,
    height: 260,
    margin: { l: 44, r: 12, t: 8, b: 40 },
    paper_bgcolor: 'rgba(0,0,0,0)',
    plot_bgcolor: 'rgba(0,0,0,0)',
    font: { family: 'system-ui, -apple-system, "Segoe UI", Roboto, sans-serif', size: 12, color: '#334155' },
    legend: { orientation: 'h', y: -0.2 },
    xaxis: { gridcolor: '#e2e8f0', automargin: true },
    yaxis: { gridcolor: '#e2e8f0', rangemode: 'tozero', automargin: true, tickformat: ',d' },
  };

  function plot(el, data, layout, config = {}) {
    if (!window.Plotly) {
      el.replaceChildren(notice('The charts could not be loaded; the numbers on this page are still right.', 'error'));
      return;
    }
    const merged = { ...BASE_LAYOUT, ...layout, xaxis: { ...BASE_LAYOUT.xaxis, ...(layout.xaxis || {}) }, yaxis: { ...BASE_LAYOUT.yaxis, ...(layout.yaxis || {}) } };
    const drawn = window.Plotly.newPlot(el, data, merged, { displayModeBar: false, responsive: true, displaylogo: false, ...config });
    // Purged once drawn: a map still fetching its shapes would otherwise finish on a purged chart.
    cleanups.push(() => Promise.resolve(drawn).then(() => window.Plotly.purge(el), () => window.Plotly.purge(el)));
  }

  // Text for plotly: it reads a subset of HTML in tick labels, hover text, titles and legends
  // (<a href>, <b>, <br>, <span style>, entities), so every value that reaches a chart is
  // escaped and shows as the text it is (an event called "<b>x</b>" reads "<b>x</b>").
  const plotText = (text) => String(text).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

  // A chart's label of a value: its first n characters, with an ellipsis when cut (the whole value
  // is in the hover), escaped for plotly.
  const plotLabel = (text, n) => plotText(charCount(text) > n ? cutText(text, n - 1) + '…' : String(text));

  // Whole numbers on count axes: Plotly would otherwise tick 0.5 steps for small counts.
  const countAxis = (max) => ({ rangemode: 'tozero', tickformat: ',d', ...(max <= 8 ? { dtick: 1 } : {}) });

  // --- places: ISO 3166-1 codes, names and the world map ---------------------------------------

  // alpha-2 -> alpha-3 (plotly's world map names countries by alpha-3), from Debian's iso-codes
  // 4.15 (iso_3166-1.json), as one string of 5-letter pairs.
  const ISO2_TO_3 = (() => {
    const packed =
      'ADANDAEAREAFAFGAGATGAIAIAALALBAMARMAOAGOAQATAARARGASASMATAUTAUAUSAWABWAXALAAZAZEBABIHBBBRBBDBGDBEBELBFBFABGBGRBHBHRBIBDIBJBENBLBLMBMBMUBNBRNBOBOLBQBESBRBRABSBHSBTBTNBVBVTBWBWABYBLRBZBLZCACANCCCCKCDCODCFCAFCGCOGCHCHECICIVCKCOKCLCHLCMCMRCNCHNCOCOLCRCRICUCUBCVCPVCWCUWCXCXRCYCYPCZCZEDEDEUDJDJIDKDNKDMDMADODOMDZDZAECECUEEESTEGEGYEHESHERERIESESPETETHFIFINFJFJIFKFLKFMFSMFOFROFRFRAGAGABGBGBRGDGRDGEGEOGFGUFGGGGYGHGHAGIGIBGLGRLGMGMBGNGINGPGLPGQGNQGRGRCGSSGSGTGTMGUGUMGWGNBGYGUYHKHKGHMHMDHNHNDHRHRVHTHTIHUHUNIDIDNIEIRLILISRIMIMNININDIOIOTIQIRQIRIRNISISLITITAJEJEYJMJAMJOJORJPJPNKEKENKGKGZKHKHMKIKIRKMCOMKNKNAKPPRKKRKORKWKWTKYCYMKZKAZLALAOLBLBNLCLCALILIELKLKALRLBRLSLSOLTLTULULUXLVLVALYLBYMAMARMCMCOMDMDAMEMNEMFMAFMGMDGMHMHLMKMKDMLMLIMMMMRMNMNGMOMACMPMNPMQMTQMRMRTMSMSRMTMLTMUMUSMVMDVMWMWIMXMEXMYMYSMZMOZNANAMNCNCLNENERNFNFKNGNGANINICNLNLDNONORNPNPLNRNRUNUNIUNZNZLOMOMNPAPANPEPERPFPYFPGPNGPHPHLPKPAKPLPOLPMSPMPNPCNPRPRIPSPSEPTPRTPWPLWPYPRYQAQATREREUROROURSSRBRURUSRWRWASASAUSBSLBSCSYCSDSDNSESWESGSGPSHSHNSISVNSJSJMSKSVKSLSLESMSMRSNSENSOSOMSRSURSSSSDSTSTPSVSLVSXSXMSYSYRSZSWZTCTCATDTCDTFATFTGTGOTHTHATJTJKTKTKLTLTLSTMTKMTNTUNTOTONTRTURTTTTOTVTUVTWTWNTZTZAUAUKRUGUGAUMUMIUSUSAUYURYUZUZBVAVATVCVCTVEVENVGVGBVIVIRVNVNMVUVUTWFWLFWSWSMYEYEMYTMYTZAZAFZMZMBZWZWE';
    const map = {};
    for (let i = 0; i < packed.length; i += 5) map[packed.slice(i, i + 2)] = packed.slice(i + 2, i + 5);
    return map;
  })();

  const regionNames = (() => {
    try {
      return new Intl.DisplayNames(['en'], { type: 'region' });
    } catch (e) {
      return null;
    }
  })();

  // "DE" -> "Germany"; a code the browser does not know (and "Unknown") stays as it is.
  function countryName(code) {
    if (!/^[A-Z]{2}$/.test(code) || !regionNames) return code;
    try {
      return regionNames.of(code) || code;
    } catch (e) {
      return code;
    }
  }

  // --- the project's calendar -----------------------------------------------------------------

  // Today's date and hour in the project's zone, as the API counts them.
  function localNow(tz) {
    const parts = {};
    try {
      const fmt = new Intl.DateTimeFormat('en-CA', { timeZone: tz, year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', hourCycle: 'h23' });
      for (const p of fmt.formatToParts(new Date())) parts[p.type] = p.value;
    } catch (e) {
      const d = new Date();
      return { date: d.toISOString().slice(0, 10), hour: d.getUTCHours() };
    }
    return { date: `${parts.year}-${parts.month}-${parts.day}`, hour: Number(parts.hour) % 24 };
  }

  // An instant in the project's zone, short: "Nov 23, 14:05:09", with its year when that is not
  // this year there: "Dec 31, 2025, 23:59:58".
  function whenIn(iso, tz) {
    try {
      const at = new Date(iso);
      const year = (t) => new Intl.DateTimeFormat('en-US', { timeZone: tz, year: 'numeric' }).format(t);
      const options = { timeZone: tz, month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23' };
      if (year(at) !== year(new Date())) options.year = 'numeric';
      return at.toLocaleString('en-US', options);
    } catch (e) {
      return when(iso);
    }
  }

  // The single local day the view shows, or '' for a longer window.
  const oneDay = (r, tz) => (r.from && r.to ? (r.from === r.to ? r.from : '') : r.days === 1 ? localNow(tz).date : '');

  // Visitors, pageviews and events per local hour of that day, from the query API (rows with
  // nothing are left out there, so every hour is filled in here; today stops at this hour).
  async function hourlyPoints(project, r, date, signal) {
    const body = {
      site_id: project.id,
      metrics: ['visitors', 'pageviews', 'events'],
      date_range: r.from && r.to ? [date, date] : 'day',
      dimensions: ['time:hour'],
    };
    if (r.filters.length) body.filters = r.filters;
    const { results } = await api('POST', '/api/v2/query', body, signal);
    const byHour = new Map(results.map((row) => [row.dimensions[0], row.metrics]));
    const now = localNow(project.timezone);
    const last = date === now.date ? now.hour : 23;
    const points = [];
    for (let hour = 0; hour <= last; hour += 1) {
      const key = `${date} ${String(hour).padStart(2, '0')}:00:00`;
      const [visitors, pageviews, events] = byHour.get(key) || [0, 0, 0];
      points.push({ x: key, visitors, pageviews, events });
    }
    return points;
  }

  // --- the main chart -------------------------------------------------------------------------

  const METRICS = [
    ['visitors', 'Visitors', COLORS[0]],
    ['pageviews', 'Pageviews', COLORS[1]],
    ['events', 'Events', COLORS[4]],
  ];

  // Visitors (or pageviews, or events) per day, or per hour of a single day. Every metric is a
  // trace and only the chosen one is visible, so the toggle restyles the drawn chart (traces
  // added to boxes.timeline afterwards, such as a comparison, stay as they are).
  function drawTimeline(el, points, unit, metric) {
    const x = points.map((p) => p.x);
    const max = Math.max(0, ...points.map((p) => Math.max(p.visitors, p.pageviews, p.events)));
    let xaxis;
    if (unit === 'hour') {
      // A label every few hours (1, 2, 3, 4, 6 or 12: on the clock's marks), as many as the plot's
      // width holds with room between them ("00:00" is about 32 px wide).
      const fit = Math.max(2, Math.floor(((el.clientWidth || 600) - 56) / 48));
      const span = Math.max(1, points.length - 1);
      const step = [1, 2, 3, 4, 6, 12].find((n) => Math.floor(span / n) + 1 <= fit) || 12;
      xaxis = { type: 'date', tickformat: '%H:%M', dtick: step * 3600000, tickangle: 0 };
    } else {
      // One label every few days, as many as the chart's width holds without overlapping; with
      // the year when the days span two (a 366-day range read "Nov 28" at both ends).
      const years = x.length > 1 && x[0].slice(0, 4) !== x[x.length - 1].slice(0, 4);
      const fit = Math.max(2, Math.floor((el.clientWidth || 600) / (years ? 96 : 64)));
      // The axis holds the view's days and no more: Plotly padded it for the markers (and a
      // comparison's), and a tick of the day before the window showed. Markers (48 days or
      // fewer) get a quarter of a day on either side.
      const pad = points.length > 48 ? '00:00' : '18:00';
      const range = points.length > 48 ? [x[0], x[x.length - 1]] : [`${addDays(x[0], -1)} ${pad}`, `${x[x.length - 1]} 06:00`];
      xaxis = { type: 'date', tickformat: years ? '%b %d, %Y' : '%b %d', dtick: Math.max(1, Math.ceil(points.length / fit)) * 86400000, tickangle: 0, range };
    }
    const per = unit === 'hour' ? '%{x|%H:%M}' : '%{x|%b %d, %Y}';
    plot(
      el,
      METRICS.map(([key, label, color]) => ({
        type: 'scatter',
        mode: points.length > 48 ? 'lines' : 'lines+markers',
        name: label,
        x,
        y: points.map((p) => p[key]),
        visible: key === metric,
        fill: 'tozeroy',
        line: { color, width: 2, shape: 'linear' },
        hovertemplate: `${per}: %{y:,} ${label.toLowerCase()}<extra></extra>`,
      })),
      { margin: { l: 44, r: 12, t: 12, b: 32 }, showlegend: false, xaxis, yaxis: countAxis(max) }
    );
    el.dataset.unit = unit;
    el.dataset.metric = metric;
    chartTable(
      el,
      unit === 'hour' ? 'Visitors, pageviews and events per hour' : 'Visitors, pageviews and events per day',
      [unit === 'hour' ? 'Hour' : 'Day', ...METRICS.map(([, label]) => label)],
      points.map((p) => [unit === 'hour' ? String(p.x).slice(11, 16) : String(p.x).slice(0, 10), ...METRICS.map(([key]) => num(p[key]))])
    );
  }

  function drawCharts(boxes, d, tz) {
    plot(
      boxes.heatmap,
      [
        {
          type: 'heatmap',
          x: d.hourlyHeatmap.map((e) => e.hour),
          y: ['Events'],
          z: [d.hourlyHeatmap.map((e) => e.count)],
          colorscale: [
            [0, '#f1f5f9'],
            [1, COLORS[0]],
          ],
          xgap: 2,
          showscale: false,
          hovertemplate: '%{x}:00–%{x}:59: %{z:,} events<extra></extra>',
        },
      ],
      { height: 120, margin: { l: 56, r: 12, t: 8, b: 36 }, xaxis: { dtick: 3, title: { text: plotText(`local hour of day (${tz})`) } }, yaxis: { tickformat: '' } }
    );
    chartTable(
      boxes.heatmap,
      `Events by local hour of day (${tz})`,
      ['Hour', 'Events'],
      d.hourlyHeatmap.map((e) => [`${String(e.hour).padStart(2, '0')}:00–${String(e.hour).padStart(2, '0')}:59`, num(e.count)])
    );
    const rows = d.eventBreakdown.filter((r) => r.name !== 'session_end').reverse(); // bottom to top: the most frequent on top
    if (!rows.length) return;
    // Event names are the site's words: each bar is a category (a name like "404" or
    // "2026-01-01" must not turn the axis into numbers or dates), labelled with the name escaped
    // and cut to what leaves the bars most of the chart's width; the hover has the whole name.
    const width = boxes.events.clientWidth || 500;
    const chars = Math.max(8, Math.min(32, Math.floor((width * 0.4) / 7)));
    const names = rows.map((r) => plotText(r.name));
    plot(
      boxes.events,
      [
        {
          type: 'bar',
          orientation: 'h',
          y: names,
          x: rows.map((r) => r.count),
          customdata: names,
          marker: { color: COLORS[4] },
          hovertemplate: '%{customdata}: %{x:,}<extra></extra>',
        },
      ],
      {
        height: Math.max(140, 40 + rows.length * 26),
        margin: { l: 40, r: 12, t: 8, b: 32 },
        xaxis: countAxis(Math.max(...rows.map((r) => r.count))),
        yaxis: {
          type: 'category',
          automargin: true,
          tickformat: '',
          tickmode: 'array',
          tickvals: names,
          ticktext: rows.map((r) => plotLabel(r.name, chars)),
        },
      }
    );
    // A bar filters the dashboard by its event, as the rows below do.
    filterOnClick([[boxes.events, 'event', rows.map((r) => r.name)]]);
  }

  // --- breakdown panels: each loads GET /api/breakdown on its own -----------------------------

  const BY_LABEL = {
    source: 'Source',
    channel: 'Channel',
    referrer: 'Referrer',
    utmSource: 'UTM source',
    utmMedium: 'UTM medium',
    utmCampaign: 'Campaign',
    country: 'Country',
    path: 'Page',
    entryPage: 'Entry page',
    exitPage: 'Exit page',
    os: 'Operating system',
    browser: 'Browser',
    deviceType: 'Device',
  };
  const PANEL_LIMIT = 10;
  const MAP_LIMIT = 250; // every country there is: the map colours them all

  // spec: {id, title, tabs: [[by, tab label]], limit, wide, map}. A panel shows "Loading…",
  // then its rows (each filters the dashboard by its value on click), or its own error with a
  // retry: a panel that fails leaves the rest of the page as it is.
  function breakdownPanel(project, r, gen, spec) {
    const limit = spec.limit || PANEL_LIMIT;
    const body = h('div', { class: 'panel-body', id: `panel-${spec.id}` });
    const mapBox = spec.map ? chartBox('countries') : null;
    const asked = (r.panels || {})[spec.id];
    let current = spec.tabs.some(([by]) => by === asked) ? asked : spec.tabs[0][0];
    let rows = [];
    // The CSV of the rows shown, named after the project, the dimension and the view's range
    // (a country's name beside its code, as the panel shows it). Offered only while the panel
    // shows its rows: while a tab loads or after it failed, the rows at hand are another tab's.
    // Marked aria-disabled rather than disabled, so that it keeps its Tab stop and a screen
    // reader says it is unavailable (a disabled button is skipped without a word).
    const csvName = () => `tally-${project.id}-${current}-${rangeTag(r)}.csv`;
    const csvButton = h('button', {
      type: 'button',
      class: 'link',
      text: 'Download CSV',
      'aria-label': `Download CSV: ${spec.title}`,
      'data-csv': csvName(),
      'aria-disabled': 'true',
      onclick: () => {
        if (csvButton.getAttribute('aria-disabled') === 'true') return;
        if (current === 'country') {
          saveCsv(
            csvName(),
            ['country', 'name', 'visitors', 'pageviews', 'events'],
            rows.map((x) => [x.value, countryName(x.value), x.visitors, x.pageviews, x.events])
          );
        } else {
          saveCsv(
            csvName(),
            [current, 'visitors', 'pageviews', 'events'],
            rows.map((x) => [x.value, x.visitors, x.pageviews, x.events])
          );
        }
      },
    });
    // The ARIA tab pattern: one Tab stop for the row of tabs, arrows (Home, End) move along it
    // and show the tab they reach; the panel's rows are the tab panel.
    const tabId = (by) => `tab-${spec.id}-${by}`;
    const tabButtons = spec.tabs.map(([by, label]) =>
      h('button', {
        type: 'button',
        class: 'tab-button',
        role: 'tab',
        id: tabId(by),
        'data-by': by,
        'aria-selected': String(by === current),
        'aria-controls': body.id,
        tabindex: by === current ? '0' : '-1',
        text: label,
        onclick: () => pick(by),
      })
    );
    const moves = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 };
    function onTabKey(e) {
      const at = tabButtons.findIndex((b) => b.dataset.by === current);
      const n = tabButtons.length;
      let next = -1;
      if (e.key in moves) next = (at + moves[e.key] + n) % n;
      else if (e.key === 'Home') next = 0;
      else if (e.key === 'End') next = n - 1;
      if (next < 0) return;
      e.preventDefault();
      tabButtons[next].focus();
      pick(tabButtons[next].dataset.by);
    }
    if (spec.tabs.length > 1) {
      body.setAttribute('role', 'tabpanel');
      body.setAttribute('aria-labelledby', tabId(current));
    }
    const section = h(
      'section',
      { class: `card panel${spec.wide ? ' wide' : ''}`, 'data-panel': spec.id, 'data-state': 'loading' },
      h('div', { class: 'panel-head' }, h('h2', { text: spec.title }), csvButton),
      spec.tabs.length > 1 ? h('div', { class: 'panel-tabs', role: 'tablist', 'aria-label': spec.title, onkeydown: onTabKey }, tabButtons) : null,
      mapBox,
      body
    );

    function pick(by) {
      current = by;
      const now = route();
      const panels = { ...now.panels, [spec.id]: by };
      if (by === spec.tabs[0][0]) delete panels[spec.id];
      history.replaceState(null, '', href(viewParams(now, { panels })));
      const shown = document.getElementById('summary'); // the view shown is the address's still
      if (shown) shown.dataset.search = location.pathname + location.search;
      csvButton.dataset.csv = csvName();
      for (const b of tabButtons) {
        b.setAttribute('aria-selected', String(b.dataset.by === by));
        b.tabIndex = b.dataset.by === by ? 0 : -1;
      }
      if (spec.tabs.length > 1) body.setAttribute('aria-labelledby', tabId(by));
      load();
    }

    let loading = null; // the older load of this panel, aborted by a newer one

    async function load() {
      const by = current;
      if (loading) loading.abort();
      loading = panelReads();
      const signal = loading.signal;
      section.dataset.state = 'loading';
      section.setAttribute('aria-busy', 'true');
      section.dataset.by = by;
      csvButton.setAttribute('aria-disabled', 'true');
      body.replaceChildren(h('p', { class: 'muted', text: 'Loading…' }));
      let answer;
      try {
        // The panels show no comparison: not asked for (it cost the panels a third more time).
        answer = await api('GET', `/api/breakdown?${apiQuery(project.id, r, { by, limit, compare: false })}`, undefined, signal);
      } catch (err) {
        if (gen !== generation || by !== current) return;
        section.removeAttribute('aria-busy');
        section.dataset.state = 'error';
        showError(body, err, load);
        return;
      }
      if (gen !== generation || by !== current) return;
      section.removeAttribute('aria-busy');
      rows = answer.rows;
      const total = Math.max(1, ...rows.map((x) => x.visitors));
      const show = by === 'country' ? (x) => countryName(x.value) : (x) => x.value;
      const tableEl = table(
        `breakdown-${by}`,
        [
          [BY_LABEL[by], show, 'trunc'],
          ['Visitors', (x) => num(x.visitors), 'num'],
          ['Pageviews', (x) => num(x.pageviews), 'num'],
        ],
        rows,
        'Nothing in this window yet.',
        false,
        [by, (x) => x.value]
      );
      // Each row's share of the top row's visitors, as a bar behind it (set through the CSSOM,
      // which the page's CSP allows; no inline style attribute).
      tableEl.querySelectorAll('tbody tr').forEach((tr, i) => tr.style.setProperty('--share', `${Math.round((rows[i].visitors / total) * 100)}%`));
      body.replaceChildren(by === 'country' ? h('div', { class: 'scroll-list' }, tableEl) : tableEl);
      if (mapBox) drawMap(mapBox, rows);
      section.dataset.state = 'ready';
      csvButton.removeAttribute('aria-disabled');
    }

    load();
    return section;
  }

  // Countries on a world map (plotly's choropleth). The map's shapes are Natural Earth's, shipped
  // with Tally and served from /assets/ (plotly's default fetches them from a CDN).
  function drawMap(el, rows) {
    const known = rows.filter((x) => ISO2_TO_3[x.value]);
    plot(
      el,
      [
        {
          type: 'choropleth',
          locationmode: 'ISO-3',
          locations: known.map((x) => ISO2_TO_3[x.value]),
          z: known.map((x) => x.visitors),
          text: known.map((x) => plotText(countryName(x.value))),
          colorscale: [
            [0, '#bfdbfe'],
            [1, COLORS[0]],
          ],
          zmin: 0,
          showscale: false,
          marker: { line: { color: '#ffffff', width: 0.5 } },
          hovertemplate: '%{text}: %{z:,} visitors<extra></extra>',
        },
      ],
      {
        // The projection is about twice as wide as high: no empty band under it on a phone.
        height: Math.round(Math.max(170, Math.min(320, (el.clientWidth || 500) * 0.52))),
        margin: { l: 0, r: 0, t: 0, b: 0 },
        geo: {
          projection: { type: 'natural earth' },
          showframe: false,
          showcoastlines: false,
          showcountries: true,
          countrycolor: '#cbd5e1',
          showland: true,
          landcolor: '#f1f5f9',
          bgcolor: 'rgba(0,0,0,0)',
          lataxis: { range: [-58, 85] },
        },
      },
      { topojsonURL: '/assets/' }
    );
    if (el.on) el.on('plotly_click', (ev) => ev.points && ev.points.length && addFilter('country', known[ev.points[0].pointNumber].value));
  }

  // --- the dashboard --------------------------------------------------------------------------

  async function dashboardView(project, r, where, gen) {
    const days = r.days;
    const tz = project.timezone;
    const select = h(
      'select',
      { id: 'window', name: 'days' },
      WINDOWS.map(([d, label]) => h('option', { value: String(d), selected: d === days, text: label })),
      WINDOWS.some(([d]) => d === days) ? null : h('option', { value: String(days), selected: true, text: `Last ${days} days` })
    );
    onChoice(select, () => {
      // Back on the custom range's own option (arrow keys passing over it): the view stays. Its
      // value is no number of days: the range was dropped for the default 7 days.
      if (select.value === 'custom') return;
      go(viewParams(r, { days: Number(select.value), from: '', to: '' }));
    });
    const builtOn = zoneToday(tz); // the zone's day the view's dates were drawn for
    const live = card('liveVisitors', 'Live visitors', '', '…', 'in the last 5 minutes');
    live.id = 'live';
    const body = h('div', { id: 'dashboard' }, h('p', { class: 'muted', text: 'Loading the dashboard…' }));
    // Refresh on a later day than the view was drawn (past the zone's midnight) draws the view
    // anew: its range fields, their latest day and the window's dates move with the day. So
    // does Refresh after the project's zone, bot rule or name changed elsewhere (another tab, a
    // co-owner, the API): the days, hours and notes drawn for the old zone would contradict the
    // numbers, which the API answers in the new one.
    const changedElsewhere = async () => {
      try {
        const { projects } = await api('GET', '/api/projects');
        const now = projects.find((x) => x.id === project.id);
        return !now || now.timezone !== tz || now.excludeBots !== project.excludeBots || now.name !== project.name;
      } catch (e) {
        return false; // the numbers' own request says what is wrong
      }
    };
    const refresh = h('button', {
      type: 'button',
      id: 'refresh',
      text: 'Refresh',
      onclick: () => {
        if (zoneToday(tz) !== builtOn) {
          keepFocus('refresh');
          return render();
        }
        // The numbers are asked at once (the older ones stay, dimmed, meanwhile); the project
        // beside them, and a change of it draws the view anew, the focus left where it is by
        // then (on Refresh, or wherever the user has moved it meanwhile).
        load();
        changedElsewhere().then((changed) => {
          if (!changed || gen !== generation) return;
          keepFocus();
          render();
        });
      },
    });
    // While the numbers are asked for again (Refresh), the old ones stay, dimmed, and this says so.
    const pending = h('span', { class: 'pending-note', id: 'dashboard-pending', role: 'status' });
    const exportStatus = h('span', { class: 'muted', id: 'export-status', 'aria-live': 'polite' });
    const exportButton = h('button', { type: 'button', id: 'export-events', text: 'Download raw events (CSV)', onclick: () => downloadEvents(project, exportDays(project, r), exportStatus) }); // page17: the view's range
    where.replaceChildren(
      h('div', { class: 'controls' }, h('label', { for: 'window', text: 'Window' }), select, refresh, pending, exportButton, h('span', { class: 'muted', 'data-testid': 'zone-note', text: `Days and hours in ${tz}.` }), exportStatus),
      viewBar(project, r, select), // page17: custom range, compare toggle, filter chips
      body
    );
    settleFocus(); // its controls are built; the numbers follow

    function setLive(value) {
      live.dataset.value = String(value);
      const shown = live.querySelector('.value');
      shown.textContent = num(value);
      shown.className = `value${valueSize(shown.textContent)}`;
    }

    let loading = null; // the reads of the load under way, aborted by a newer one (Refresh)

    // The dashboard's body says it is waiting (aria-busy, dimmed, "Updating…" beside Refresh when
    // older numbers are on screen) until its answer, or an error with "Try again", replaces it.
    function busy(on) {
      if (on) {
        body.setAttribute('aria-busy', 'true');
        const shown = !!body.querySelector('#summary');
        body.classList.toggle('pending', shown);
        pending.textContent = shown ? 'Updating…' : '';
        if (!shown) {
          // an error's "Try again" goes with the error: the focus goes to Refresh, not the page
          const hadFocus = body.contains(document.activeElement);
          body.replaceChildren(h('p', { class: 'muted', text: 'Loading the dashboard…' }));
          if (hadFocus) refresh.focus();
        }
      } else {
        body.removeAttribute('aria-busy');
        body.classList.remove('pending');
        pending.textContent = '';
      }
    }

    async function load() {
      if (loading) loading.abort();
      const mine = panelReads();
      loading = mine;
      const signal = mine.signal;
      busy(true);
      const date = oneDay(r, tz);
      // A single day is drawn as its hours; asked for alongside the dashboard, and if it fails
      // the day's own total is drawn instead.
      const hourly = date ? hourlyPoints(project, r, date, signal).catch((err) => (err && err.status === 401 ? Promise.reject(err) : null)) : Promise.resolve(null);
      let d;
      let hours;
      try {
        [d, hours] = await Promise.all([api('GET', `/api/dashboard?${apiQuery(project.id, r)}`, undefined, signal), hourly]);
      } catch (err) {
        if (gen !== generation || loading !== mine) return;
        busy(false);
        showViewError(body, err, r, load); // page17: a refused view says why
        return;
      }
      if (gen !== generation || loading !== mine) return;
      for (const fn of cleanups.splice(0)) fn();
      startLive();
      const s = d.summary;
      setLive(d.liveVisitors);
      const cards = h('div', { class: 'cards', id: 'summary' }, CARDS.map(([key, label, fmt]) => card(key, label, String(s[key]), fmt(s[key]))), live);
      const sessionEnds = d.eventBreakdown.find((e) => e.name === 'session_end');
      if (!s.avgSessionDurationMs && !sessionEnds) {
        // 0 is the API's "no session_end events": no visit ended, nothing to average (not 0 ms)
        const avg = cards.querySelector('[data-metric=avgSessionDurationMs]');
        avg.querySelector('.value').textContent = '–';
        avg.dataset.none = '1'; // and no change to show (showChanges)
        avg.title = 'No visit ended in this view: nothing to average.';
        avg.append(h('span', { class: 'sr-only', text: 'No visit ended in this view.' }));
      }
      if (!s.uniqueSessions || !s.pageviews) {
        // No session, or no pageview: no visit that could bounce (the API's 0 means none).
        const bounce = cards.querySelector('[data-metric=bounceRate]');
        bounce.querySelector('.value').textContent = '–';
        bounce.dataset.none = '1';
        bounce.title = 'No visit with a pageview in this view: no bounce rate.';
        bounce.append(h('span', { class: 'sr-only', text: 'No visit with a pageview in this view.' }));
      }
      showChanges(cards, d, r); // page17: each card's change against the compared range
      const bots = h('p', {
        class: 'muted bots',
        'data-testid': 'bot-events',
        'data-value': String(s.botEvents),
        text: project.excludeBots === false ? 'Bots are counted like everyone else (see Settings).' : `${num(s.botEvents)} bot event${s.botEvents === 1 ? '' : 's'} left out (crawlers, monitors, headless browsers).`,
      });
      if (!s.totalEvents) {
        // Only a project none of whose keys was ever used is told to install the snippet: one
        // with events on other days (the far past, say) has it already.
        let keys = null;
        if (!r.filters.length) {
          try {
            keys = (await api('GET', `/api/projects/keys?projectId=${project.id}`, undefined, signal)).keys;
          } catch (err) {
            if (err && err.status === 401) return;
          }
          if (gen !== generation || loading !== mine) return;
        }
        const [text, action] = emptyMessage(r, keys);
        busy(false);
        body.replaceChildren(cards, bots, notice(text, 'info', action ? h('p', {}, link(action, { project: project.id, tab: 'keys' })) : null));
        return;
      }
      // Panel CSV files: what the panel shows, named after the project, the panel and the window.
      const csvOf = (what, header, rows) => [`tally-${project.id}-${what}-${rangeTag(r)}.csv`, header, rows]; // page17: the view's range
      const boxes = {
        timeline: chartBox('timeline'),
        heatmap: chartBox('heatmap'),
        events: chartBox('events'),
      };
      const unit = hours ? 'hour' : 'day';
      const points = hours || d.timeline.map((t) => ({ x: t.day, visitors: t.visitors, pageviews: t.pageviews, events: t.events }));
      const title = h('h2', { id: 'timeline-title' });
      const setTitle = (metric) => {
        const name = METRICS.find(([k]) => k === metric)[1];
        title.textContent = unit === 'hour' ? `${name} per hour, ${date}` : `${name} per day`;
      };
      const toggles = METRICS.map(([key, name]) =>
        h('button', {
          type: 'button',
          class: 'tab-button',
          'data-metric-toggle': key,
          'aria-pressed': String(key === 'visitors'),
          text: name,
          onclick: () => {
            for (const b of toggles) b.setAttribute('aria-pressed', String(b.dataset.metricToggle === key));
            setTitle(key);
            boxes.timeline.dataset.metric = key;
            if (window.Plotly && boxes.timeline.data) {
              // this range's traces are the first three; a comparison's lines follow the same choice
              const visible = boxes.timeline.data.map((t, i) => (i < METRICS.length ? METRICS[i][0] === key : t.meta === 'comparison' ? t.legendgroup === key : t.visible));
              window.Plotly.restyle(boxes.timeline, { visible });
            }
          },
        })
      );
      setTitle('visitors');
      const timelineCsv = csvOf(unit === 'hour' ? 'hourly-timeline' : 'daily', [unit === 'hour' ? 'hour' : 'day', 'visitors', 'pageviews', 'events'], points.map((p) => [p.x, p.visitors, p.pageviews, p.events]));
      const timelinePanel = h(
        'section',
        { class: 'card panel wide', 'data-panel': 'timeline' },
        h('div', { class: 'panel-head' }, title, h('button', { type: 'button', class: 'link', id: 'timeline-csv', 'aria-labelledby': 'timeline-csv timeline-title', 'data-csv': timelineCsv[0], text: 'Download CSV', onclick: () => saveCsv(...timelineCsv) })),
        h('div', { class: 'panel-tabs', role: 'group', 'aria-label': 'Metric' }, toggles),
        boxes.timeline
      );
      const named = d.eventBreakdown.filter((e) => e.name !== 'session_end');
      const bp = (spec) => breakdownPanel(project, r, gen, spec);
      busy(false);
      body.replaceChildren(
        cards,
        bots,
        h(
          'div',
          { class: 'panels' },
          timelinePanel,
          bp({
            id: 'sources',
            title: 'Sources',
            tabs: [
              ['source', 'Sources'],
              ['channel', 'Channels'],
              ['utmCampaign', 'Campaigns'],
              ['utmSource', 'UTM source'],
              ['utmMedium', 'UTM medium'],
              ['referrer', 'Referrers'],
            ],
          }),
          bp({ id: 'pages', title: 'Pages', tabs: [['path', 'Top pages']] }),
          bp({ id: 'countries', title: 'Countries', tabs: [['country', 'Countries']], limit: MAP_LIMIT, map: true }),
          bp({
            id: 'entry-exit',
            title: 'Entry and exit pages',
            tabs: [
              ['entryPage', 'Entry pages'],
              ['exitPage', 'Exit pages'],
            ],
          }),
          bp({ id: 'os', title: 'Operating systems', tabs: [['os', 'Operating systems']] }),
          bp({ id: 'browsers', title: 'Browsers', tabs: [['browser', 'Browsers']] }),
          bp({ id: 'devices', title: 'Devices', tabs: [['deviceType', 'Devices']] }),
          panel(
            'Events by name',
            h(
              'div',
              {},
              boxes.events,
              table('event-breakdown', [['Event', (e) => e.name, 'trunc'], ['Count', (e) => num(e.count), 'num']], named, 'No events but pageviews’ session ends.', false, ['event', (e) => e.name]),
              // session_end is one per visit that ended: it would outnumber every real event,
              // and it says how long visits last, which "Avg. session" shows.
              sessionEnds
                ? h('p', { class: 'muted note', 'data-testid': 'session-ends', text: `Not shown: ${num(sessionEnds.count)} session_end event${sessionEnds.count === 1 ? '' : 's'}, sent when a visit ends; they measure “Avg. session”.` })
                : null
            ),
            false,
            csvOf('events-by-name', ['name', 'events'], named.map((e) => [e.name, e.count]))
          ),
          panel('Events by hour of day', boxes.heatmap, false, csvOf('hourly', ['local_hour', 'events'], d.hourlyHeatmap.map((e) => [e.hour, e.count]))),
          panel(
            'Recent events',
            table(
              'recent-events',
              [
                [`Time (${tz})`, (e) => whenIn(e.occurredAt, tz), 'nowrap'],
                ['Event', (e) => e.name],
                ['Path', (e) => e.path || '–', 'trunc'],
                ['Visitor', (e) => (e.visitorId ? cutText(e.visitorId, 8) : '–'), 'nowrap mono'],
              ],
              d.recentEvents,
              'No events yet.',
              true
            ),
            true,
            // The time as stored (UTC, ISO 8601) and as the panel shows it, in the project's zone.
            csvOf('recent-events', ['occurred_at', `local_time (${tz})`, 'name', 'path', 'visitor_id'], d.recentEvents.map((e) => [e.occurredAt, localStamp(e.occurredAt, tz), e.name, e.path, e.visitorId]))
          )
        )
        // DB-IP's attribution (its CC BY 4.0 license asks for it) is the page's footer.
      );
      drawTimeline(boxes.timeline, points, unit, 'visitors');
      drawCharts(boxes, d, tz);
      drawComparison(boxes.timeline, d, METRICS.map(([key]) => key)); // the compared range on the main chart
    }

    // Live visitors: GET /api/live (it reads only the last 5 minutes) every few seconds while the
    // page is visible, and at once when it becomes visible again.
    function startLive() {
      const url = `/api/live?${new URLSearchParams({ projectId: project.id })}`;
      let timer = 0;
      let stopped = false;
      let busy = false;
      const tick = async () => {
        if (stopped || busy) return;
        clearTimeout(timer);
        if (!document.hidden) {
          busy = true;
          try {
            const answer = await api('GET', url);
            if (stopped) return;
            setLive(answer.liveVisitors);
            live.classList.remove('stale');
            live.removeAttribute('title');
          } catch (err) {
            if (err.status === 401 || stopped) return;
            live.classList.add('stale');
            live.title = `Live count paused: ${err.message}`;
          } finally {
            busy = false;
          }
        }
        timer = setTimeout(tick, LIVE_EVERY_MS);
      };
      const onVisible = () => {
        if (!document.hidden) tick();
      };
      document.addEventListener('visibilitychange', onVisible);
      timer = setTimeout(tick, LIVE_EVERY_MS);
      cleanups.push(() => {
        stopped = true;
        clearTimeout(timer);
        document.removeEventListener('visibilitychange', onVisible);
      });
    }

    await load();
  }

  // --- filters, ranges and comparison ---------------------------------------------------------------
  // The view bar above the dashboard: a custom date range next to the window presets, the compare
  // toggle, and the filters as chips. It changes the view only through the URL
  // (go(viewParams(...))), so a view can be bookmarked and shared, and back and forward step
  // through the views; route() reads it back.

  const DIMENSION_LABELS = {
    path: 'Page',
    entryPage: 'Entry page',
    exitPage: 'Exit page',
    source: 'Source',
    channel: 'Channel',
    referrer: 'Referrer',
    utmSource: 'UTM source',
    utmMedium: 'UTM medium',
    utmCampaign: 'UTM campaign',
    utmContent: 'UTM content',
    utmTerm: 'UTM term',
    country: 'Country',
    browser: 'Browser',
    os: 'Operating system',
    deviceType: 'Device',
    event: 'Event',
  };
  const OPERATOR_LABELS = { is: 'is', is_not: 'is not', contains: 'contains', contains_not: 'does not contain' };
  const COMPARE_LABELS = { '': 'Nothing', previous_period: 'Previous period', previous_year: 'Previous year' };
  const MAX_RANGE_DAYS = 366;
  const FIRST_DATE = '1970-01-01';
  const DAY_MS = 86400000;

  // Local dates (YYYY-MM-DD) as UTC midnights, for day arithmetic that no DST change can bend.
  const dayMs = (iso) => Date.UTC(Number(iso.slice(0, 4)), Number(iso.slice(5, 7)) - 1, Number(iso.slice(8, 10)));
  const addDays = (iso, n) => isoDay(new Date(dayMs(iso) + n * DAY_MS));
  const spanDays = (from, to) => Math.round((dayMs(to) - dayMs(from)) / DAY_MS) + 1;
  const realDate = (iso) => ISO_DATE.test(iso) && iso >= '0001-01-01' && addDays(iso, 0) === iso;

  // The wall-clock fields of instant t in zone, as numbers.
  function zoneParts(zone, t) {
    const parts = new Intl.DateTimeFormat('en-US', {
      timeZone: zone,
      hourCycle: 'h23',
      year: 'numeric',
      month: '2-digit',
      day: '2-digit',
      hour: '2-digit',
      minute: '2-digit',
      second: '2-digit',
    }).formatToParts(new Date(t));
    const get = (type) => Number(parts.find((p) => p.type === type).value);
    return { y: get('year'), m: get('month'), d: get('day'), h: get('hour'), min: get('minute'), s: get('second') };
  }

  // YYYY-MM-DD of zoneParts' answer.
  function partsDate(p) {
    return `${String(p.y).padStart(4, '0')}-${String(p.m).padStart(2, '0')}-${String(p.d).padStart(2, '0')}`;
  }

  // The instant `iso` as a local date and time in zone (YYYY-MM-DD HH:MM:SS.mmm), for files.
  function localStamp(iso, zone) {
    const t = Date.parse(iso);
    const p = zoneParts(zone, t);
    const two = (n) => String(n).padStart(2, '0');
    return `${partsDate(p)} ${two(p.h)}:${two(p.min)}:${two(p.s)}.${String(((t % 1000) + 1000) % 1000).padStart(3, '0')}`;
  }

  // The local date (YYYY-MM-DD) of the instant t in zone.
  function zoneDate(zone, t) {
    return partsDate(zoneParts(zone, t));
  }

  // Today's date in the project's zone: the last day of its "last N days".
  function zoneToday(zone) {
    try {
      return zoneDate(zone, Date.now());
    } catch (e) {
      return isoDay(new Date());
    }
  }

  // The UTC instant local day `iso` starts in zone, as Tally's server counts it: its first
  // instant whose local date is `iso` or later (a day a zone skipped whole, Pacific/Apia's
  // 2011-12-30, starts where the next one does). That is midnight less the zone's offset a day
  // before or a day after (they differ only near a change of offset), the earlier of the two
  // that is on or after the day. Where a change skips midnight (Atlantic/Azores: 00:00 to 01:00),
  // only the offset before the change is: the day starts at the jump.
  function zoneMidnight(iso, zone) {
    const wall = dayMs(iso);
    const offset = (t) => {
      const p = zoneParts(zone, t);
      return Date.UTC(p.y, p.m - 1, p.d, p.h, p.min, p.s) - Math.floor(t / 1000) * 1000;
    };
    const starts = [wall - offset(wall - DAY_MS), wall - offset(wall + DAY_MS)].filter(
      (t) => zoneDate(zone, t) >= iso && zoneDate(zone, t - 1) < iso
    );
    if (!starts.length) throw new Error(`no start of ${iso} found in ${zone}`);
    return Math.min(...starts);
  }

  // The local dates [from, to] the view r covers in zone.
  function viewDates(zone, r) {
    if (r.from && r.to) return [r.from, r.to];
    const today = zoneToday(zone);
    return [addDays(today, -(r.days - 1)), today];
  }

  // The UTC days of GET /api/export that cover the view's local days (its raw events, unfiltered).
  function exportDays(project, r) {
    const [from, to] = viewDates(project.timezone, r);
    try {
      const start = zoneMidnight(from, project.timezone);
      const end = zoneMidnight(addDays(to, 1), project.timezone);
      return [isoDay(new Date(start)), isoDay(new Date(end - 1))];
    } catch (e) {
      return [from, to];
    }
  }

  // The range in CSV file names: "7d" for a preset, "2026-03-01_2026-03-31" for a custom range.
  function rangeTag(r) {
    return (r.from && r.to ? `${r.from}_${r.to}` : `${r.days}d`) + (r.filters.length ? '-filtered' : '');
  }

  function rangeWords(r) {
    if (r.from && r.to) return r.from === r.to ? `on ${r.from}` : `from ${r.from} to ${r.to}`;
    const found = WINDOWS.find(([n]) => n === r.days);
    return r.days === 1 ? 'today' : `in the ${(found ? found[1] : `last ${r.days} days`).toLowerCase()}`;
  }

  // What an empty dashboard says, [words, the words of a link to the keys, or '']: nothing that
  // matches the filters; nothing yet, when none of the project's live keys (GET
  // /api/projects/keys) was ever used; or nothing in this range, which is true whatever other
  // days hold (keys = null: they could not be read).
  function emptyMessage(r, keys) {
    if (r.filters.length) return [`No events match these filters ${rangeWords(r)}. Remove a filter above to see more.`, ''];
    const words = `No events ${rangeWords(r)}`;
    if (keys && !keys.length) return [`${words}, and this project has no live API key to send any: add one.`, 'Add a key'];
    if (keys && !keys.some((k) => k.lastUsedAt)) return [`${words}: none of this project’s API keys has been used yet. Once a site with the snippet is visited, its pageviews appear here.`, 'Get the snippet'];
    return [`${words}. Other days may have some: choose a longer window or a custom range above.`, ''];
  }

  // In a chip: "Germany (DE)", the name and the code the filter holds.
  const countryLabel = (code) => {
    const name = countryName(code);
    return name !== code ? `${name} (${code})` : code;
  };

  const dimensionLabel = (dim) => DIMENSION_LABELS[dim] || String(dim);
  const operatorLabel = (op) => OPERATOR_LABELS[op] || String(op);
  const valueLabel = (dim, v) => (dim === 'country' ? countryLabel(String(v)) : String(v) === '' ? '(none)' : String(v));
  const filterWords = ([op, dim, values]) => `${dimensionLabel(dim)} ${operatorLabel(op)} ${values.map((v) => valueLabel(dim, v)).join(' or ')}`;

  // The bar above the dashboard's body: range, comparison and filter chips. windowSelect is the
  // preset select (#window): with a custom range it shows that range as its choice.
  function viewBar(project, r, windowSelect) {
    const today = zoneToday(project.timezone);
    const [from, to] = viewDates(project.timezone, r);
    if (r.from && windowSelect) {
      windowSelect.append(h('option', { value: 'custom', text: `${r.from} – ${r.to}` }));
      windowSelect.value = 'custom';
    }
    return h('div', { class: 'view-bar', id: 'view-bar' }, rangeForm(r, from, to, today), compareControl(r), filterBar(r));
  }

  function rangeForm(r, from, to, today) {
    const first = h('input', { type: 'date', id: 'range-from', name: 'from', value: from, min: FIRST_DATE, max: today });
    const last = h('input', { type: 'date', id: 'range-to', name: 'to', value: to, min: FIRST_DATE, max: today });
    const status = h('span', { class: 'range-status', id: 'range-status', role: 'alert' });
    return h(
      'form',
      {
        class: 'range-form',
        id: 'range-form',
        // Tally's words, not the browser's bubble: with the browser's checks, a refused submit
        // left the last message standing beside a range it no longer described (min and max
        // still shape the date picker). A last day after today is the API's to take: nothing is
        // stored after now.
        novalidate: true,
        oninput: () => (status.textContent = ''),
        onsubmit: (e) => {
          e.preventDefault();
          const problem = rangeProblem(first.value, last.value);
          status.textContent = problem;
          if (!problem) go(viewParams(r, { from: first.value, to: last.value }));
        },
      },
      h('span', { class: 'range-title', text: 'Custom range' }),
      h('label', { for: 'range-from', class: 'sr-only', text: 'First day' }),
      first,
      h('span', { 'aria-hidden': 'true', text: '–' }),
      h('label', { for: 'range-to', class: 'sr-only', text: 'Last day' }),
      last,
      h('button', { type: 'submit', id: 'range-apply', text: 'Show range' }),
      status
    );
  }

  // What is wrong with a custom range, in words ('' when nothing is).
  function rangeProblem(from, to) {
    if (!from || !to) return 'Choose both the first and the last day.';
    if (!realDate(from)) return 'The first day is not a date: write it as YYYY-MM-DD.';
    if (!realDate(to)) return 'The last day is not a date: write it as YYYY-MM-DD.';
    if (from < FIRST_DATE) return 'Tally keeps nothing before 1970: choose a later first day.';
    if (from > to) return 'The first day is after the last day: swap them.';
    const span = spanDays(from, to);
    if (span > MAX_RANGE_DAYS) return `A range can cover at most ${MAX_RANGE_DAYS} days; this one has ${num(span)}.`;
    return '';
  }

  // A closed select changed with the keyboard (arrows, Home/End, Page keys, typing a letter)
  // fires change at every step, and each would load a view. So a choice made with keys acts once
  // the keys rest for KEY_SETTLE_MS, or at once on Enter or on leaving the select; a choice made
  // with the pointer acts at once.
  const KEY_SETTLE_MS = 700;
  function onChoice(select, act) {
    let keyed = false;
    let timer = 0;
    const now = () => {
      clearTimeout(timer);
      timer = 0;
      if (select.isConnected) act(); // not once another view replaced it
    };
    select.addEventListener('pointerdown', () => (keyed = false));
    select.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && timer) {
        e.preventDefault();
        now();
      } else if (e.key !== 'Tab' && e.key !== 'Shift' && e.key !== 'Escape') keyed = true;
    });
    select.addEventListener('change', () => {
      if (!keyed) return now();
      keyed = false;
      clearTimeout(timer);
      timer = setTimeout(now, KEY_SETTLE_MS);
    });
    select.addEventListener('blur', () => timer && now());
  }

  function compareControl(r) {
    const select = h(
      'select',
      { id: 'compare', name: 'compare' },
      Object.entries(COMPARE_LABELS).map(([value, text]) => h('option', { value, text, selected: value === r.compare }))
    );
    onChoice(select, () => go(viewParams(r, { compare: select.value })));
    return h('div', { class: 'compare-control' }, h('label', { for: 'compare', text: 'Compare with' }), select, h('span', { class: 'muted', id: 'compare-range' }));
  }

  // The filters as chips: each says what it keeps, opens an editor on click, and has an ×.
  function filterBar(r) {
    const editor = h('div', { class: 'filter-editor-slot' });
    // The focus moves into the editor as it opens, not a task later: an Escape pressed at once
    // (before a timeout's focus) went to the opener, and the editor stayed open.
    const edit = (index) => {
      const form = filterEditor(r, index, () => {
        editor.replaceChildren();
        const opener = document.getElementById(index >= 0 ? `chip-${index}` : 'add-filter');
        if (opener) opener.focus();
      });
      editor.replaceChildren(form);
      form.querySelector('#filter-values').focus();
    };
    const chips = r.filters.map((f, i) => {
      const words = filterWords(f);
      return h(
        'span',
        { class: 'chip', 'data-filter-index': i, 'data-filter-dim': f[1], 'data-filter-op': f[0] },
        h(
          'button',
          { type: 'button', class: 'chip-edit', id: `chip-${i}`, title: `Change this filter: ${words}`, onclick: () => edit(i) },
          h('span', { class: 'chip-dim', text: dimensionLabel(f[1]) }),
          h('span', { class: 'chip-op', text: ` ${operatorLabel(f[0])} ` }),
          // cut on its own, in its own direction: a right-to-left value shows its start
          h('span', { class: 'chip-values', dir: 'auto', text: f[2].map((v) => valueLabel(f[1], v)).join(' or ') })
        ),
        h('button', {
          type: 'button',
          class: 'chip-remove',
          'aria-label': `Remove filter: ${words}`,
          title: 'Remove this filter',
          text: '×',
          onclick: () => go(viewParams(r, { filters: r.filters.filter((_, j) => j !== i) }), 'add-filter'),
        })
      );
    });
    // filters= that route() could not read (not JSON, or not [op, dim, [values]]) is left out of
    // the view: said, with the way to drop it from the address.
    const raw = new URLSearchParams(location.search).get('filters');
    let unread = false;
    try {
      unread = !!raw && JSON.parse(raw).length !== r.filters.length;
    } catch (e) {
      unread = !!raw;
    }
    return h(
      'div',
      { class: 'filter-bar', id: 'filters', role: 'group', 'aria-label': 'Filters' },
      unread
        ? notice(
            'Some filters in this address could not be read, so they are left out of the numbers below.',
            'error',
            h('p', {}, h('button', { type: 'button', id: 'drop-unread-filters', text: 'Remove them from the address', onclick: () => go(viewParams(r)) }))
          )
        : null,
      h(
        'div',
        { class: 'chips' },
        h('span', { class: 'muted', text: r.filters.length ? 'Showing only:' : 'All traffic. Click a row of a panel to filter by it, or' }),
        chips,
        h('button', { type: 'button', class: 'link', id: 'add-filter', text: '+ Add filter', onclick: () => edit(-1) }),
        r.filters.length ? h('button', { type: 'button', class: 'link', id: 'clear-filters', text: 'Clear all', onclick: () => go(viewParams(r, { filters: [] }), 'add-filter') }) : null
      ),
      editor
    );
  }

  // Changes filter `index` of the view (or adds one, index -1): dimension, operator, values.
  function filterEditor(r, index, close) {
    const [op0, dim0, values0] = index >= 0 ? r.filters[index] : ['is', 'path', []];
    const dims = Object.keys(DIMENSION_LABELS).includes(dim0) ? Object.keys(DIMENSION_LABELS) : [dim0, ...Object.keys(DIMENSION_LABELS)];
    const dim = h('select', { id: 'filter-dim', name: 'dimension' }, dims.map((d) => h('option', { value: d, text: dimensionLabel(d), selected: d === dim0 })));
    const ops = Object.keys(OPERATOR_LABELS).includes(op0) ? Object.keys(OPERATOR_LABELS) : [op0, ...Object.keys(OPERATOR_LABELS)];
    const op = h('select', { id: 'filter-op', name: 'operator' }, ops.map((o) => h('option', { value: o, text: operatorLabel(o), selected: o === op0 })));
    const values = h('textarea', { id: 'filter-values', name: 'values', dir: 'auto', rows: 2, value: values0.join('\n'), placeholder: 'One value per line' });
    values.addEventListener('input', () => (values.dataset.edited = '1'));
    const status = h('span', { class: 'range-status', role: 'alert' });
    const form = h(
      'form',
      {
        class: 'card filter-editor',
        id: 'filter-editor',
        onsubmit: (e) => {
          e.preventDefault();
          // Values left as they were stay exactly as they were: read back from the box, one with
          // a trailing space lost it and one with a line break became two (changing only the
          // operator changed the values too). Typed ones are one per line, trimmed.
          const list = values.dataset.edited
            ? values.value
                .split('\n')
                .map((v) => v.trim())
                .filter((v) => v)
            : values0.slice();
          if (!list.length) {
            status.textContent = 'Write at least one value, one per line.';
            return;
          }
          const made = [op.value, dim.value, [...new Set(list)]];
          const filters = index >= 0 ? r.filters.map((f, j) => (j === index ? made : f)) : r.filters.concat([made]);
          go(viewParams(r, { filters }), `chip-${index >= 0 ? index : filters.length - 1}`);
        },
      },
      h('label', { for: 'filter-dim', class: 'sr-only', text: 'Dimension' }),
      dim,
      h('label', { for: 'filter-op', class: 'sr-only', text: 'Operator' }),
      op,
      h('label', { for: 'filter-values', class: 'sr-only', text: 'Values, one per line' }),
      values,
      h('div', { class: 'editor-actions' }, h('button', { type: 'submit', class: 'primary', text: index >= 0 ? 'Change filter' : 'Add filter' }), h('button', { type: 'button', text: 'Cancel', onclick: close }), status)
    );
    form.addEventListener('keydown', (e) => {
      if (e.key === 'Escape') close();
    });
    return form;
  }

  // A view the API refuses (400 Invalid query: a hand-edited filter or date in the URL) says why,
  // in the API's words, and offers the way back; other errors are shown as everywhere else.
  function showViewError(where, err, r, retry) {
    if (!(err && err.status === 400 && (r.filters.length || r.from || r.compare))) return showError(where, err, retry);
    console.warn(err);
    const ways = [];
    if (r.filters.length) ways.push(h('button', { type: 'button', id: 'error-clear-filters', text: 'Clear the filters', onclick: () => go(viewParams(r, { filters: [] })) }));
    if (r.from) ways.push(h('button', { type: 'button', id: 'error-clear-range', text: `Show the last ${DEFAULT_DAYS} days`, onclick: () => go(viewParams(r, { from: '', to: '', days: DEFAULT_DAYS })) }));
    if (r.compare) ways.push(h('button', { type: 'button', text: 'Stop comparing', onclick: () => go(viewParams(r, { compare: '' })) }));
    where.replaceChildren(notice(`Tally could not show this view. ${err.message}`, 'error', h('p', { class: 'actions' }, ways)));
  }

  // Each summary card's change against the compared range (comparison.change, in percent), with
  // an arrow and words, not color alone; null (nothing to compare with) is "–".
  const WORSE_WHEN_UP = new Set(['bounceRate']);

  function showChanges(cards, d, r) {
    cards.dataset.search = href(viewParams(r));
    const c = d.comparison;
    const note = document.getElementById('compare-range');
    if (note) note.textContent = c ? `${c.from} – ${c.to}` : '';
    if (!c || !c.change) return;
    const vs = r.compare === 'previous_year' ? 'vs. previous year' : 'vs. previous period';
    for (const el of cards.querySelectorAll('[data-metric]')) {
      const key = el.dataset.metric;
      if (!(key in c.change)) continue;
      // A card with nothing to show ("–": no visit ended) has no change either: the API's -100%
      // is from its 0, which stands for "none" there, not for 0 ms.
      const pct = el.dataset.none ? null : c.change[key];
      const entry = CARDS.find(([k]) => k === key);
      const before = c.summary && key in c.summary ? (entry ? entry[2] : num)(c.summary[key]) : '';
      let text = '–';
      let kind = 'none';
      let words = el.dataset.none ? `no change to show: ${key === 'bounceRate' ? 'no visit with a pageview' : 'no visit ended'} in this view` : `no change to show: ${c.from} to ${c.to} had none`;
      if (pct !== null && pct !== undefined) {
        const size = `${Math.abs(pct).toLocaleString('en-US')}%`;
        text = `${pct > 0 ? '↑' : pct < 0 ? '↓' : '→'} ${size}`;
        const up = pct > 0;
        kind = pct === 0 ? 'flat' : up !== WORSE_WHEN_UP.has(key) ? 'good' : 'bad';
        words = `${pct === 0 ? 'no change' : `${up ? 'up' : 'down'} ${size}`} compared with ${c.from} to ${c.to} (${before})`;
      }
      const data = pct === null || pct === undefined ? 'null' : String(pct);
      // read out as words ("up 12% compared with ..."), not as an arrow and a figure
      el.append(
        h(
          'span',
          { class: `change ${kind}`, 'data-change': data, title: words },
          h('span', { class: 'delta', 'aria-hidden': 'true', text }),
          ' ',
          h('span', { class: 'vs', 'aria-hidden': 'true', text: vs }),
          h('span', { class: 'sr-only', text: words })
        )
      );
    }
  }

  // Bars of a horizontal bar chart filter the dashboard by their value when clicked, as rows of
  // the tables do: charts = [[element, dimension, the values of the bars in order]] (the chart's
  // own labels are escaped for plotly, so the value is taken from the list, by the bar's index).
  function filterOnClick(charts) {
    for (const [el, dim, values] of charts) {
      if (!el || typeof el.on !== 'function') continue; // not drawn (plotly.js missing)
      el.dataset.filterDim = dim;
      el.on('plotly_click', (e) => {
        const point = e && e.points && e.points[0];
        const value = point && values[point.pointNumber];
        if (value !== undefined) addFilter(dim, value);
      });
    }
  }

  // The compared range's timeline on the main chart, drawn after it: dotted lines of `metrics`
  // (one or several timeline fields) over the same days, each point hovering with its own date.
  // The previous period's days are placed day by day over this range's, the previous year's on the
  // same dates a year later (February 29 on March 1). A main chart that does not show the days of
  // d.timeline (e.g. today's hours) gets nothing: the cards still carry the change.
  function drawComparison(el, d, metrics) {
    const c = d.comparison;
    if (!c || !c.timeline || !c.timeline.length || !window.Plotly || !el.data || !el.data.length) return;
    const x = d.timeline.map((t) => t.day);
    if (!el.data.some((trace) => trace.x && trace.x.length && String(trace.x[0]) === x[0])) return;
    const yearly = route().compare === 'previous_year';
    const nextYear = (day) => {
      const moved = `${String(Number(day.slice(0, 4)) + 1).padStart(4, '0')}${day.slice(4)}`;
      return realDate(moved) ? moved : addDays(moved.slice(0, 8) + '28', 1);
    };
    const placed = c.timeline.map((t, i) => [yearly ? nextYear(t.day) : x[i], t]).filter(([at]) => at !== undefined);
    const names = { events: 'Events', pageviews: 'Pageviews', visitors: 'Visitors' };
    const dashes = ['dot', 'dash', 'dashdot'];
    const traces = [metrics]
      .flat()
      .filter((m) => m in c.timeline[0])
      .map((m, i) => ({
        type: 'scatter',
        // as the main traces: markers on a long range made Plotly pad the axis past both ends
        mode: placed.length > 48 ? 'lines' : 'lines+markers',
        name: plotText(`${names[m] || m}, ${c.from} – ${c.to}`),
        x: placed.map(([at]) => at),
        y: placed.map(([, t]) => t[m]),
        customdata: placed.map(([, t]) => t.day),
        // the previous period in slate-500: dotted, yet 4.8:1 on white (slate-400 was 2.6:1)
        line: { color: '#64748b', width: 2, dash: dashes[i % dashes.length] },
        marker: { color: '#64748b', size: 5 },
        hovertemplate: `%{customdata}: %{y:,} ${m}<extra></extra>`,
        meta: 'comparison',
        legendgroup: m,
        visible: !el.dataset.metric || el.dataset.metric === m, // the main chart's metric toggle shows its own
      }));
    if (traces.length) window.Plotly.addTraces(el, traces);
  }

  // --- start ----------------------------------------------------------------------------------------

  signOutButton.addEventListener('click', () => {
    token.clear();
    history.pushState(null, '', '/');
    render('You are signed out.', 'info');
  });
  window.addEventListener('popstate', () => render());
  window.addEventListener('hashchange', () => {
    if (takeTokenFromFragment()) render();
  });
  takeTokenFromFragment();
  render();
})();
