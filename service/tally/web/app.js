// Tally's dashboard page: sign-in, projects and keys, the analytics of a project.
// Plain browser JavaScript (no build step); charts by plotly.js, which Tally serves from the
// plotly Python package. Every element is built with textContent, never innerHTML, so nothing a
// tracked site sends (paths, referrers, event names) can inject markup.
'use strict';

(() => {
  const TOKEN_KEY = 'tally.session';
  const WINDOWS = [
    [1, 'Today (UTC)'],
    [7, 'Last 7 days'],
    [14, 'Last 14 days'],
    [30, 'Last 30 days'],
    [90, 'Last 90 days'],
  ];
  const DEFAULT_DAYS = 7;
  const LIVE_EVERY_MS = 5000;
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

  function notice(text, kind = 'info', ...extra) {
    return h('div', { class: `notice ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, h('p', { text }), extra);
  }

  const num = (n) => Number(n).toLocaleString('en-US');
  const when = (iso) => (iso ? new Date(iso).toLocaleString() : 'never');
  const day = (iso) => new Date(iso).toLocaleDateString();

  function duration(ms) {
    if (ms < 1000) return `${ms} ms`;
    const s = Math.round(ms / 1000);
    if (s < 60) return `${s} s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m} min ${s % 60} s`;
    return `${Math.floor(m / 60)} h ${m % 60} min`;
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
    if (location.hash.length < 2) return;
    const params = new URLSearchParams(location.hash.slice(1));
    const value = params.get('token') || params.get('access_token') || params.get('id_token');
    if (!value) return;
    token.set(value);
    history.replaceState(null, '', location.pathname + location.search);
  }

  // The token's subject, for display only (the server verifies the token on every request).
  function subject(value) {
    try {
      const part = value.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
      return JSON.parse(atob(part)).sub || '';
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

  async function api(method, path, body) {
    const headers = { authorization: `Bearer ${token.get()}` };
    if (body) headers['content-type'] = 'application/json';
    let res;
    try {
      res = await fetch(path, { method, headers, cache: 'no-store', body: body ? JSON.stringify(body) : undefined });
    } catch (e) {
      throw new ApiError(0, 'Tally could not be reached. Check the connection and try again.');
    }
    if (res.status === 204) return null;
    let data = null;
    try {
      data = await res.json();
    } catch (e) {
      /* not JSON */
    }
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
  // filters>, &compare=previous_period|previous_year. route() reads it, viewParams() writes it,
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
      days: WINDOWS.some(([d]) => d === days) ? days : DEFAULT_DAYS,
      from: range ? from : '',
      to: range ? to : '',
      filters: parseFilters(q.get('filters')),
      compare: COMPARES.includes(q.get('compare')) ? q.get('compare') : '',
    };
  }

  // The URL parameters of view r (changes applied), for href() and go().
  function viewParams(r, changes = {}) {
    const v = { ...r, ...changes };
    return {
      project: v.project,
      tab: v.tab && v.tab !== 'dashboard' ? v.tab : '',
      days: v.from || v.days === DEFAULT_DAYS ? '' : v.days,
      from: v.from,
      to: v.to,
      filters: v.filters && v.filters.length ? JSON.stringify(v.filters) : '',
      compare: v.compare,
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

  // Clicking a row of a panel keeps only that traffic: an `is` filter on the row's dimension,
  // replacing any earlier filter on the same dimension (as Plausible does).
  function addFilter(dim, value) {
    const r = route();
    const filters = r.filters.filter(([, d]) => d !== dim).concat([['is', dim, [value]]]);
    go(viewParams(r, { filters }));
  }

  function href(params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v) q.set(k, v);
    const s = q.toString();
    return '/' + (s ? '?' + s : '');
  }

  function go(params) {
    history.pushState(null, '', href(params));
    render();
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
    for (const fn of cleanups) fn();
    cleanups = [];
    const value = token.get();
    signOutButton.hidden = !value;
    who.textContent = value && subject(value) ? `Signed in as ${subject(value)}` : '';
    if (!value) return signInView(message, kind);
    const r = route();
    return r.project ? projectView(r, generation) : projectsView(generation);
  }

  function show(...nodes) {
    main.replaceChildren(...nodes);
  }

  function signInView(message, kind) {
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
      return Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
    } catch (e) {
      return 'UTC';
    }
  }

  // A select of the browser's IANA zones (Tally refuses, in words, any the server does not know).
  function zoneSelect(id, current) {
    const zones = typeof Intl.supportedValuesOf === 'function' ? Intl.supportedValuesOf('timeZone').slice() : [];
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
      minlength: 2,
      maxlength: 60,
      placeholder: 'My site',
      autocomplete: 'off',
    });
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
            created.replaceChildren(reveal(made.apiKey, 'Project created', made.projectId));
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
              h('li', { class: 'card' }, link(p.name, { project: p.id }, { class: 'project-link' }), h('span', { class: 'muted', text: `created ${day(p.createdAt)} · ${p.timezone}` }))
            )
          )
        );
      } catch (err) {
        if (gen === generation) showError(list, err, fill);
      }
    }

    show(h('section', {}, h('h1', { text: 'Projects' }), list, h('h2', { text: 'New project' }), form, created));
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

  function copyField(label, value, multiline, testid) {
    const field = multiline
      ? h('textarea', { class: 'mono', rows: 3, readonly: true, value, 'data-testid': testid })
      : h('input', { class: 'mono', readonly: true, value, 'data-testid': testid });
    const status = h('span', { class: 'muted copy-status', role: 'status' });
    const button = h('button', { type: 'button', text: 'Copy', 'data-copy': testid, onclick: () => copy(field, value, status) });
    return h('div', { class: 'copy' }, h('span', { class: 'copy-label', text: label }), h('div', { class: 'copy-row' }, field, button), status);
  }

  function reveal(key, title, projectId) {
    return h(
      'div',
      { class: 'card reveal', 'data-testid': 'new-key' },
      h('h3', { text: title }),
      h('p', { text: 'This API key is shown only now: Tally keeps only a hash of it. Copy it, or the ready-made snippet, before leaving this page.' }),
      copyField('API key', key, false, 'api-key'),
      copyField('Snippet: paste it into every page of your site, in the <head>', snippet(key), true, 'snippet'),
      projectId ? h('p', {}, link('Open its dashboard →', { project: projectId })) : null
    );
  }

  async function projectView(r, gen) {
    const body = h('div', {}, h('p', { class: 'muted', text: 'Loading…' }));
    show(h('section', {}, crumbs(link('Projects', {})), body));
    let project;
    try {
      const { projects } = await api('GET', '/api/projects');
      project = projects.find((p) => p.id === r.project);
    } catch (err) {
      if (gen === generation) showError(body, err, () => render());
      return;
    }
    if (gen !== generation) return;
    if (!project) {
      body.replaceChildren(notice('Project not found: it does not exist, or it belongs to another account.', 'error', h('p', {}, link('Back to your projects', {}))));
      return;
    }
    const tab = (name, label) =>
      link(label, viewParams(r, { tab: name }), {
        class: `tab${r.tab === name ? ' active' : ''}`,
        'aria-current': r.tab === name ? 'page' : null,
      });
    const content = h('div', {});
    main.replaceChildren(
      h(
        'section',
        {},
        crumbs(link('Projects', {}), h('span', { text: project.name })),
        h(
          'div',
          { class: 'title-row' },
          h('h1', { id: 'project-title', text: project.name }),
          h('nav', { class: 'tabs' }, tab('dashboard', 'Dashboard'), tab('keys', 'Keys & snippet'), tab('settings', 'Settings'))
        ),
        h('p', { class: 'muted zone', 'data-testid': 'project-zone', text: `Time zone: ${project.timezone}` }),
        content
      )
    );
    if (r.tab === 'keys') await keysView(project, content, gen);
    else if (r.tab === 'settings') settingsView(project, content);
    else await dashboardView(project, r, content, gen);
  }

  // --- project settings -----------------------------------------------------------------------------

  function settingsView(project, where) {
    const status = h('div', { id: 'settings-status' });
    const name = h('input', { id: 'settings-name', name: 'name', required: true, minlength: 2, maxlength: 60, value: project.name, autocomplete: 'off' });
    const zone = zoneSelect('settings-zone', project.timezone);
    const bots = h('input', { id: 'settings-bots', name: 'excludeBots', type: 'checkbox', class: 'check' });
    bots.checked = project.excludeBots;
    const save = h('button', { type: 'submit', class: 'primary', text: 'Save settings' });
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
            render(); // the title and the zone line show the new values
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
    const table = h('div', { id: 'keys' }, h('p', { class: 'muted', text: 'Loading keys…' }));
    const created = h('div', {});
    const label = h('input', { id: 'key-label', name: 'label', maxlength: 60, placeholder: 'Label, e.g. Staging', autocomplete: 'off' });
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
            created.replaceChildren(reveal(made.apiKey, 'Key added'));
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
      let timer = 0;
      const button = h('button', {
        type: 'button',
        class: 'danger',
        text: 'Revoke',
        'data-revoke': key.id,
        onclick: async () => {
          if (!armed) {
            armed = true;
            button.textContent = 'Confirm revoke';
            timer = setTimeout(() => {
              armed = false;
              button.textContent = 'Revoke';
            }, 5000);
            return;
          }
          clearTimeout(timer);
          button.disabled = true;
          try {
            await api('DELETE', `/api/projects/keys?projectId=${project.id}&keyId=${key.id}`);
            await fill();
          } catch (err) {
            showError(created, err);
            button.disabled = false;
          }
        },
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
              h('thead', {}, h('tr', {}, ['Label', 'Key', 'Created', 'Last used', ''].map((t) => h('th', { text: t })))),
              h(
                'tbody',
                {},
                keys.map((k) =>
                  h(
                    'tr',
                    { 'data-key': k.id },
                    h('td', { text: k.label }),
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
      h('h2', { text: 'API keys' }),
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

  function card(key, label, value, text, hint) {
    return h(
      'div',
      { class: 'card metric', 'data-metric': key, 'data-value': value },
      h('span', { class: 'label', text: label }),
      h('strong', { class: 'value', text }),
      hint ? h('span', { class: 'hint muted', text: hint }) : null
    );
  }

  // columns: [label, value of a row, cell class ('num' for counts, 'nowrap', or the default 'text')]
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
        title: `Show only ${value}`,
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
        h('tbody', {}, rows.map((row) => h('tr', rowProps(row), columns.map(([, get, kind]) => h('td', { class: kind || 'text', text: get(row) })))))
      )
    );
  }

  // csv: [file name, header, rows (arrays)]: the panel offers its data as a CSV file.
  function panel(title, body, wide, csv) {
    const head = csv
      ? h('div', { class: 'panel-head' }, h('h2', { text: title }), h('button', { type: 'button', class: 'link', 'data-csv': csv[0], text: 'Download CSV', onclick: () => saveCsv(...csv) }))
      : h('h2', { text: title });
    return h('section', { class: `card panel${wide ? ' wide' : ''}` }, head, body);
  }

  // --- downloads ---------------------------------------------------------------------------------

  const csvCell = (v) => {
    const text = v === null || v === undefined ? '' : String(v);
    return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
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

  function saveCsv(filename, header, rows) {
    saveBlob(new Blob([csvText(header, rows)], { type: 'text/csv' }), filename);
  }

  const isoDay = (date) => date.toISOString().slice(0, 10);

  // The raw events of the window, as Tally's export writes them (GET /api/export).
  async function downloadEvents(project, days, status) {
    const today = new Date();
    const first = new Date(today.getTime() - (days - 1) * 86400000);
    const query = `projectId=${project.id}&from=${isoDay(first)}&to=${isoDay(today)}&format=csv`;
    status.textContent = 'Preparing the download…';
    let res;
    try {
      res = await fetch(`/api/export?${query}`, { headers: { authorization: `Bearer ${token.get()}` }, cache: 'no-store' });
    } catch (e) {
      status.textContent = 'Tally could not be reached. Check the connection and try again.';
      return;
    }
    if (res.status === 401) {
      token.clear();
      render('Your session has expired or was not accepted. Sign in again.');
      return;
    }
    if (!res.ok) {
      let data = null;
      try {
        data = await res.json();
      } catch (e) {
        /* not JSON */
      }
      status.textContent = STATUS_TEXT[res.status] || `Tally answered ${res.status}${data && data.error ? ': ' + data.error : ''}.`;
      return;
    }
    const name = /filename="([^"]+)"/.exec(res.headers.get('content-disposition') || '');
    saveBlob(await res.blob(), name ? name[1] : `tally-${project.id}.csv`);
    status.textContent = '';
  }

  function chartBox(name) {
    return h('div', { class: 'chart', 'data-chart': name });
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

  function plot(el, data, layout) {
    if (!window.Plotly) {
      el.replaceChildren(notice('The charts could not be loaded; the numbers on this page are still right.', 'error'));
      return;
    }
    const merged = { ...BASE_LAYOUT, ...layout, xaxis: { ...BASE_LAYOUT.xaxis, ...(layout.xaxis || {}) }, yaxis: { ...BASE_LAYOUT.yaxis, ...(layout.yaxis || {}) } };
    window.Plotly.newPlot(el, data, merged, { displayModeBar: false, responsive: true, displaylogo: false });
    cleanups.push(() => window.Plotly.purge(el));
  }

  // Whole numbers on count axes: Plotly would otherwise tick 0.5 steps for small counts.
  const countAxis = (max) => ({ rangemode: 'tozero', tickformat: ',d', ...(max <= 8 ? { dtick: 1 } : {}) });

  function drawCharts(boxes, d, days) {
    const x = d.timeline.map((t) => t.day);
    // One label every few days, as many as the chart's width holds without overlapping.
    const fit = Math.max(2, Math.floor((boxes.timeline.clientWidth || 600) / 64));
    const every = Math.ceil(days / fit) * 86400000;
    plot(
      boxes.timeline,
      [
        { type: 'bar', name: 'Events', x, y: d.timeline.map((t) => t.events), marker: { color: '#93c5fd' }, hovertemplate: '%{x}: %{y:,} events<extra></extra>' },
        { type: 'scatter', mode: 'lines+markers', name: 'Pageviews', x, y: d.timeline.map((t) => t.pageviews), line: { color: COLORS[0], width: 2 }, hovertemplate: '%{x}: %{y:,} pageviews<extra></extra>' },
      ],
      {
        margin: { l: 44, r: 12, t: 28, b: 32 },
        legend: { orientation: 'h', x: 0, y: 1.14 },
        xaxis: { type: 'date', tickformat: '%b %d', dtick: every, tickangle: 0 },
        yaxis: countAxis(Math.max(...d.timeline.map((t) => t.events))),
      }
    );
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
          hovertemplate: '%{x}:00–%{x}:59 UTC: %{z:,} events<extra></extra>',
        },
      ],
      { height: 120, margin: { l: 56, r: 12, t: 8, b: 36 }, xaxis: { dtick: 3, title: { text: 'hour of day (UTC)' } }, yaxis: { tickformat: '' } }
    );
    const bars = (rows, key, color) => [
      {
        type: 'bar',
        orientation: 'h',
        y: rows.map((r) => r[key]).reverse(),
        x: rows.map((r) => r.count).reverse(),
        marker: { color },
        hovertemplate: '%{y}: %{x:,}<extra></extra>',
      },
    ];
    const barLayout = (rows) => ({
      height: Math.max(140, 40 + rows.length * 26),
      margin: { l: 110, r: 12, t: 8, b: 32 },
      xaxis: countAxis(Math.max(...rows.map((r) => r.count))),
      yaxis: { automargin: true, tickformat: '' },
    });
    plot(boxes.browsers, bars(d.browserBreakdown, 'browser', COLORS[1]), barLayout(d.browserBreakdown));
    plot(boxes.devices, bars(d.deviceBreakdown, 'deviceType', COLORS[2]), barLayout(d.deviceBreakdown));
    plot(boxes.events, bars(d.eventBreakdown, 'name', COLORS[4]), barLayout(d.eventBreakdown));
  }

  async function dashboardView(project, r, where, gen) {
    const days = r.days;
    const select = h(
      'select',
      { id: 'window', name: 'days', onchange: () => go(viewParams(r, { days: Number(select.value), from: '', to: '' })) },
      WINDOWS.map(([d, label]) => h('option', { value: String(d), selected: d === days, text: label }))
    );
    const live = card('liveVisitors', 'Live visitors', '', '…', 'in the last 5 minutes');
    live.id = 'live';
    const body = h('div', { id: 'dashboard' }, h('p', { class: 'muted', text: 'Loading the dashboard…' }));
    const refresh = h('button', { type: 'button', text: 'Refresh', onclick: () => load() });
    const exportStatus = h('span', { class: 'muted', id: 'export-status', 'aria-live': 'polite' });
    const exportButton = h('button', { type: 'button', id: 'export-events', text: 'Download raw events (CSV)', onclick: () => downloadEvents(project, days, exportStatus) });
    where.replaceChildren(
      h('div', { class: 'controls' }, h('label', { for: 'window', text: 'Window' }), select, refresh, exportButton, h('span', { class: 'muted', text: 'Days and hours are UTC.' }), exportStatus),
      body
    );

    function setLive(value) {
      live.dataset.value = String(value);
      live.querySelector('.value').textContent = num(value);
    }

    async function load() {
      let d;
      try {
        d = await api('GET', `/api/dashboard?${apiQuery(project.id, r)}`);
      } catch (err) {
        if (gen === generation) showError(body, err, load);
        return;
      }
      if (gen !== generation) return;
      for (const fn of cleanups.splice(0)) fn();
      startLive();
      const s = d.summary;
      setLive(d.liveVisitors);
      const cards = h('div', { class: 'cards', id: 'summary' }, CARDS.map(([key, label, fmt]) => card(key, label, String(s[key]), fmt(s[key]))), live);
      const label = WINDOWS.find(([n]) => n === days)[1].toLowerCase();
      if (!s.totalEvents) {
        body.replaceChildren(
          cards,
          notice(`No events ${days === 1 ? 'today' : 'in the ' + label} yet. Once a site with the snippet is visited, its pageviews appear here.`, 'info', h('p', {}, link('Get the snippet', { project: project.id, tab: 'keys' })))
        );
        return;
      }
      // Panel CSV files: what the panel shows, named after the project, the panel and the window.
      const csvOf = (what, header, rows) => [`tally-${project.id}-${what}-${days}d.csv`, header, rows];
      const boxes = {
        timeline: chartBox('timeline'),
        heatmap: chartBox('heatmap'),
        browsers: chartBox('browsers'),
        devices: chartBox('devices'),
        events: chartBox('events'),
      };
      body.replaceChildren(
        cards,
        h(
          'div',
          { class: 'panels' },
          panel('Events and pageviews per day', boxes.timeline, true, csvOf('daily', ['day', 'events', 'pageviews'], d.timeline.map((t) => [t.day, t.events, t.pageviews]))),
          panel('Events by hour of day', boxes.heatmap, true, csvOf('hourly', ['hour_utc', 'events'], d.hourlyHeatmap.map((e) => [e.hour, e.count]))),
          panel(
            'Top pages',
            table('top-paths', [['Path', (r) => r.path], ['Views', (r) => num(r.views), 'num']], d.topPaths, 'No pageviews with a path yet.', false, ['path', (r) => r.path]),
            false,
            csvOf('top-pages', ['path', 'views'], d.topPaths.map((r) => [r.path, r.views]))
          ),
          panel(
            'Top referrers',
            table('top-referrers', [['Referrer', (r) => r.referrer], ['Pageviews', (r) => num(r.count), 'num']], d.topReferrers, 'No pageviews came from other sites.', false, ['referrer', (r) => r.referrer]),
            false,
            csvOf('top-referrers', ['referrer', 'pageviews'], d.topReferrers.map((r) => [r.referrer, r.count]))
          ),
          panel('Browsers', boxes.browsers, false, csvOf('browsers', ['browser', 'events'], d.browserBreakdown.map((r) => [r.browser, r.count]))),
          panel('Devices', boxes.devices, false, csvOf('devices', ['device_type', 'events'], d.deviceBreakdown.map((r) => [r.deviceType, r.count]))),
          panel(
            'Events by name',
            h('div', {}, boxes.events, table('event-breakdown', [['Event', (r) => r.name], ['Count', (r) => num(r.count), 'num']], d.eventBreakdown, 'No events.')),
            false,
            csvOf('events-by-name', ['name', 'events'], d.eventBreakdown.map((r) => [r.name, r.count]))
          ),
          panel(
            'Recent events',
            table(
              'recent-events',
              [
                ['Time', (r) => when(r.occurredAt), 'nowrap'],
                ['Event', (r) => r.name],
                ['Path', (r) => r.path || '–'],
                ['Visitor', (r) => (r.visitorId ? r.visitorId.slice(0, 8) : '–'), 'nowrap mono'],
              ],
              d.recentEvents,
              'No events yet.',
              true
            ),
            true,
            csvOf('recent-events', ['occurred_at', 'name', 'path', 'visitor_id'], d.recentEvents.map((r) => [r.occurredAt, r.name, r.path, r.visitorId]))
          )
        )
      );
      drawCharts(boxes, d, days);
    }

    // Live visitors: a one-day dashboard every few seconds while the page is visible.
    function startLive() {
      let timer = 0;
      let stopped = false;
      const tick = async () => {
        if (stopped) return;
        if (!document.hidden) {
          try {
            const d = await api('GET', `/api/dashboard?projectId=${project.id}&days=1`);
            if (stopped) return;
            setLive(d.liveVisitors);
            live.classList.remove('stale');
          } catch (err) {
            if (err.status === 401 || stopped) return;
            live.classList.add('stale');
            live.title = `Live count paused: ${err.message}`;
          }
        }
        timer = setTimeout(tick, LIVE_EVERY_MS);
      };
      timer = setTimeout(tick, LIVE_EVERY_MS);
      cleanups.push(() => {
        stopped = true;
        clearTimeout(timer);
      });
    }

    await load();
  }

  // --- start ----------------------------------------------------------------------------------------

  signOutButton.addEventListener('click', () => {
    token.clear();
    history.pushState(null, '', '/');
    render('You are signed out.', 'info');
  });
  window.addEventListener('popstate', () => render());
  takeTokenFromFragment();
  render();
})();
