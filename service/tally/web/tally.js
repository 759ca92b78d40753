/*! Tally tracker. <script src="https://YOUR-TALLY/tally.js" data-api-key="tk_..." defer></script>
 * Attributes: data-endpoint (collect URL), data-cookieless (store nothing on the device),
 * data-respect-dnt (send nothing under Do-Not-Track). API: tally.track(name, metadata),
 * tally.optOut(), tally.optIn(). Plain ES2017, no dependencies, no cookies. */
((w, d, nav) => {
  'use strict';
  const s = d.currentScript || d.querySelector('script[data-api-key]');
  const prev = w.tally;
  if (!s || (prev && prev.loaded)) return;
  const has = (n) => s.hasAttribute('data-' + n);
  const key = s.getAttribute('data-api-key') || '';
  const base = s.getAttribute('data-endpoint') || new URL('/api/collect', s.src || location.href).href;
  // text/plain, key in the query: no CORS preflight; fetch and sendBeacon alike.
  const url = base + (base.indexOf('?') < 0 ? '?' : '&') + 'apiKey=' + encodeURIComponent(key);
  const cookieless = has('cookieless');
  const IDLE = 18e5; // a session ends after 30 minutes without events
  const BATCH = 100;
  const mem = {};
  const raw = (k) => {
    try {
      return w.localStorage.getItem(k);
    } catch (e) {
      return null;
    }
  };
  // Ids live in localStorage, or only in memory (cookieless mode, or storage unavailable).
  const get = (k) => (!cookieless && raw(k)) || mem[k];
  const set = (k, v) => {
    mem[k] = v;
    if (!cookieless) {
      try {
        w.localStorage.setItem(k, v);
      } catch (e) {}
    }
  };
  const O = 'tally_optout';
  // Opt-out in memory too (storage may be refused).
  const off = () =>
    (raw(O) || mem[O]) == '1' ||
    (has('respect-dnt') && [nav.doNotTrack, w.doNotTrack, nav.msDoNotTrack].some((v) => v == '1' || v == 'yes'));
  const rid = () => {
    const a = new Uint8Array(16);
    if (w.crypto && crypto.getRandomValues) crypto.getRandomValues(a);
    else for (let i = 0; i < 16; i++) a[i] = Math.random() * 256;
    return Array.from(a, (b) => (b + 256).toString(16).slice(1)).join('');
  };
  // "id.start.last": the session id, its start and its latest event, in ms.
  const current = () => {
    const [id, start, last] = (get('tally_sid') || '').split('.');
    return id && Date.now() - last <= IDLE ? [id, +start] : null;
  };
  const session = () => {
    const [id, start] = current() || [rid(), Date.now()];
    set('tally_sid', [id, start, Date.now()].join('.'));
    return id;
  };
  const visitor = () => get('tally_vid') || (set('tally_vid', rid()), get('tally_vid'));
  // n code points (as the server counts); lone surrogates become U+FFFD.
  const cut = (v, n) => {
    let o = '';
    for (const c of String(v)) {
      if (!n--) break;
      o += c < '\ud800' || c > '\udfff' || c[1] ? c : '\ufffd';
    }
    return o;
  };
  const clean = (m) => {
    if (!m || typeof m != 'object') return;
    const o = {};
    let n = 0;
    for (const key of Object.keys(m)) {
      let v = m[key];
      const t = typeof v;
      const k = cut(key, 101); // left out if longer than 100 characters
      if (n >= 50 || !k || k != cut(k, 100)) continue;
      if (t == 'string') v = cut(v, 1024);
      else if (t == 'number') v = isFinite(v) ? v : null;
      else if (t != 'boolean' && v !== null) continue;
      o[k] = v;
      n++;
    }
    return n ? o : undefined;
  };

  let queue = [];
  let timer = 0;
  let busy = false;
  let tries = 0;
  const schedule = (ms) => {
    if (!timer) timer = setTimeout(flush, ms);
  };
  const flush = async () => {
    timer = 0;
    if (busy) return schedule(500);
    if (off()) queue = []; // opted out meanwhile (in another tab, or by the flag itself)
    if (!queue.length) return;
    busy = true;
    const batch = queue.splice(0, BATCH);
    const body = JSON.stringify({ events: batch });
    let status = 0;
    try {
      // keepalive: a batch in flight outlives the page (bodies < 64 KiB).
      status = (await fetch(url, { method: 'POST', body, keepalive: new Blob([body]).size < 6e4, credentials: 'omit' })).status;
    } catch (e) {}
    busy = false;
    if (!status || status == 408 || status == 429 || status >= 500) {
      // Not stored: retry with exponential backoff (0.5-1 s doubling to a minute, jittered down).
      queue = off() ? [] : batch.concat(queue).slice(-1000);
      tries++;
      return schedule(Math.min(6e4, 500 * 2 ** tries) * (0.5 + Math.random() / 2));
    }
    if (status >= 400 && w.console) console.warn('tally: events refused (' + status + ')');
    tries = 0;
    if (queue.length) schedule(0);
  };
  // Unload: sendBeacon, halving batches; the browser takes 64 KiB of beacons in all. The rest
  // is kept, with its time, for the site's next page (or this one, back from the bfcache).
  const Q = 'tally_q';
  const kept = () => {
    try {
      return JSON.parse(get(Q)) || [];
    } catch (e) {
      return [];
    }
  };
  const beacon = () => {
    clearTimeout(timer);
    timer = 0;
    if (off()) queue = [];
    for (let n = BATCH; queue.length && nav.sendBeacon && n; ) {
      if (nav.sendBeacon(url, JSON.stringify({ events: queue.slice(0, n) }))) queue.splice(0, n);
      else n >>= 1;
    }
    const at = new Date().toISOString();
    if (queue.length) set(Q, JSON.stringify(kept().concat(queue.map((e) => Object.assign({ occurredAt: at }, e))).slice(-1000)));
    queue = [];
  };
  const restore = () => {
    queue = kept().concat(queue);
    set(Q, '');
  };
  const dec = (p) => {
    try {
      return decodeURI(p);
    } catch (e) {
      return p;
    }
  };
  const add = (name, metadata, extra) => {
    if (off()) return;
    queue.push(
      Object.assign(
        {
          name,
          path: cut(dec(location.pathname), 2048), // as read: /café, not /caf%C3%A9
          url: cut(location.href.split('#')[0], 4096), // no fragment (tokens)
          sessionId: session(),
          visitorId: visitor(),
          metadata,
        },
        extra
      )
    );
    schedule(1000);
  };

  let last, lastPath;
  // replaceState changing only the query (UTM tags taken off, a search typed) is no new page.
  const pageview = (replaced) => {
    const p = location.pathname + location.search;
    if (p === last || (replaced === 1 && location.pathname === lastPath)) return (last = p);
    let referrer;
    // a visit's first page only (a reload keeps document.referrer)
    if (last === undefined && d.referrer && !current()) {
      try {
        if (new URL(d.referrer).host != location.host) referrer = cut(d.referrer, 4096);
      } catch (e) {}
    }
    last = p;
    lastPath = location.pathname;
    add(
      'pageview',
      { viewportWidth: w.innerWidth, viewportHeight: w.innerHeight, pageTitle: cut(d.title, 1024) },
      { referrer }
    );
  };
  // SPA navigation, once the app had a moment to set the title.
  const later = (replaced) => setTimeout(pageview, 100, replaced);
  for (const m of ['pushState', 'replaceState']) {
    const orig = history[m];
    history[m] = function () {
      const r = orig.apply(this, arguments);
      later(m == 'replaceState' ? 1 : 0);
      return r;
    };
  }
  w.addEventListener('popstate', () => later(0));

  // Hidden: fetch (retried if the page lives on). Unloaded: sendBeacon.
  let ended = false;
  const hide = (e) => {
    if (!ended) {
      ended = true;
      const now = current();
      if (now) add('session_end', { durationMs: Date.now() - now[1] });
    }
    if (e.type == 'pagehide') beacon();
    else clearTimeout(timer), (timer = 0), flush();
  };
  d.addEventListener('visibilitychange', (e) => (d.visibilityState == 'hidden' ? hide(e) : (ended = false)));
  w.addEventListener('pagehide', hide);
  // Back or forward to a page kept in the bfcache: a pageview again, and what it kept.
  w.addEventListener('pageshow', (e) => {
    ended = false;
    if (e.persisted) restore(), (last = 0), pageview();
  });

  const api = (w.tally = {
    loaded: true,
    track(name, metadata) {
      name = cut(name == null ? '' : name, 100);
      if (name) add(name, clean(metadata));
    },
    optOut() {
      mem[O] = '1';
      try {
        w.localStorage.setItem(O, '1');
      } catch (e) {}
      queue = [];
    },
    optIn() {
      mem[O] = 0;
      try {
        w.localStorage.removeItem(O);
      } catch (e) {}
    },
  });
  restore();
  pageview();
  // Calls made before the script loaded, through the stub `tally.q`.
  for (const a of (prev && prev.q) || []) api.track.apply(api, a);
})(window, document, navigator);
