// loops dashboard: our own script, no dependencies. It keeps the server-rendered
// pages live: /v1/events (EventSource sends the session cookie; it reconnects by
// itself with Last-Event-ID, and we reopen it with ?after= if it gives up) triggers a
// re-read of the page, whose [data-live] regions replace their old selves in place;
// countdowns tick every second; a running run's output is followed from
// /v1/runs/{id}/output?follow=true with its ANSI colours rendered here; the loop
// buttons call the API with the session's CSRF token in the X-Loops-CSRF header.
"use strict";
(function () {
  const csrf = (document.querySelector('meta[name="loops-csrf"]') || {}).content || "";
  const live = document.getElementById("live");
  const setLive = (on, text) => {
    if (!live) return;
    live.textContent = text;
    live.className = "live " + (on ? "on" : "off");
  };

  // ---- times ----
  const pad = (n) => String(n).padStart(2, "0");
  function span(ms) {
    const s = Math.round(Math.abs(ms) / 1000);
    if (s < 60) return s + "s";
    const m = Math.floor(s / 60);
    if (m < 60) return m + "m " + pad(s % 60) + "s";
    const h = Math.floor(m / 60);
    if (h < 48) return h + "h " + pad(m % 60) + "m";
    return Math.floor(h / 24) + "d " + (h % 24) + "h";
  }
  function tick() {
    const now = Date.now();
    for (const t of document.querySelectorAll("time[data-countdown]")) {
      const at = Date.parse(t.getAttribute("datetime"));
      if (isNaN(at)) continue;
      const d = at - now;
      const text = d > 500 ? "in " + span(d) : d > -1500 ? "due now" : "overdue " + span(d);
      t.textContent = text;
    }
    for (const t of document.querySelectorAll("time[data-since]")) {
      const at = Date.parse(t.getAttribute("datetime"));
      if (!isNaN(at)) t.textContent = span(now - at) + " ago";
    }
    const clock = document.getElementById("clock");
    if (clock) clock.textContent = new Date().toISOString().slice(0, 19).replace("T", " ");
  }
  setInterval(tick, 1000);

  // ---- in-place refresh of the page's live regions ----
  let refreshing = false, again = false, last = 0, timer = 0;
  const MIN_GAP = 600;
  async function refresh() {
    if (refreshing) { again = true; return; }
    refreshing = true;
    last = Date.now();
    try {
      const r = await fetch(location.href, { credentials: "same-origin", headers: { "X-Loops-Fragment": "1" } });
      if (r.redirected && new URL(r.url).pathname === "/login") { location.href = r.url; return; }
      if (!r.ok) return;
      const doc = new DOMParser().parseFromString(await r.text(), "text/html");
      for (const fresh of doc.querySelectorAll("[data-live][id]")) {
        const old = document.getElementById(fresh.id);
        if (!old) continue;
        const focused = document.activeElement && old.contains(document.activeElement) ? document.activeElement.id : "";
        old.replaceWith(document.importNode(fresh, true));
        if (focused) { const f = document.getElementById(focused); if (f) f.focus(); }
      }
      tick();
      startFollows();
      document.dispatchEvent(new CustomEvent("loops:refreshed"));
    } catch (e) {
      // The next event tries again.
    } finally {
      refreshing = false;
      if (again) { again = false; soon(); }
    }
  }
  function soon() {
    if (timer) return;
    const wait = Math.max(0, MIN_GAP - (Date.now() - last));
    timer = setTimeout(() => { timer = 0; refresh(); }, wait);
  }
  window.loopsRefresh = refresh;

  // ---- the events stream ----
  let lastId = "", source = null, backoff = 1000;
  function listen() {
    // A run's page follows its output instead (and refreshes when it ends).
    if (!document.querySelector("[data-live]") || document.getElementById("runhead")) {
      if (live) live.textContent = "";
      return;
    }
    const url = "/v1/events" + (lastId ? "?after=" + encodeURIComponent(lastId) : "");
    source = new EventSource(url, { withCredentials: true });
    source.onopen = () => { backoff = 1000; setLive(true, "live"); };
    const onEvent = (e) => { if (e.lastEventId) lastId = e.lastEventId; soon(); };
    for (const kind of ["loop.created", "loop.changed", "loop.removed", "run.started", "run.finished", "workflow.event", "reset"]) {
      source.addEventListener(kind, onEvent);
    }
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED) {
        setLive(false, "reconnecting…");
        source = null;
        setTimeout(listen, backoff);
        backoff = Math.min(backoff * 2, 30000);
      } else {
        setLive(false, "reconnecting…");
      }
    };
  }

  // ---- ANSI colours of the live tail (as ansi.rs renders stored output) ----
  const esc = (s) => s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  function styleClasses(st) {
    const c = [];
    if (st.b) c.push("ab"); if (st.d) c.push("ad"); if (st.i) c.push("ai"); if (st.u) c.push("au");
    if (st.fg != null) c.push("f" + st.fg); if (st.bg != null) c.push("g" + st.bg);
    return c.join(" ");
  }
  function applySgr(st, params) {
    const codes = params === "" ? [0] : params.split(";").map((p) => parseInt(p, 10) || 0);
    for (let i = 0; i < codes.length; i++) {
      const n = codes[i];
      if (n === 0) { st.b = st.d = st.i = st.u = false; st.fg = st.bg = null; }
      else if (n === 1) st.b = true; else if (n === 2) st.d = true; else if (n === 3) st.i = true; else if (n === 4) st.u = true;
      else if (n === 22) st.b = st.d = false; else if (n === 23) st.i = false; else if (n === 24) st.u = false;
      else if (n >= 30 && n <= 37) st.fg = n - 30; else if (n >= 90 && n <= 97) st.fg = n - 90 + 8; else if (n === 39) st.fg = null;
      else if (n >= 40 && n <= 47) st.bg = n - 40; else if (n >= 100 && n <= 107) st.bg = n - 100 + 8; else if (n === 49) st.bg = null;
      else if (n === 38 || n === 48) i += codes[i + 1] === 5 ? 2 : codes[i + 1] === 2 ? 4 : 0;
    }
  }
  // Renders `text` with the running style `st`; an escape cut at the end of a chunk
  // is kept in st.carry for the next one.
  function ansiToHtml(st, text) {
    text = (st.carry || "") + text;
    st.carry = "";
    let out = "", i = 0;
    const put = (s) => { if (!s) return; const c = styleClasses(st); out += c ? '<span class="' + c + '">' + esc(s) + "</span>" : esc(s); };
    while (i < text.length) {
      const j = text.indexOf("\x1b", i);
      if (j < 0) { put(text.slice(i)); break; }
      put(text.slice(i, j));
      const m = /^\x1b\[([0-9;]*)([\x20-\x2f]*)([\x40-\x7e])/.exec(text.slice(j));
      if (m) { if (m[3] === "m" && m[2] === "") applySgr(st, m[1]); i = j + m[0].length; continue; }
      const osc = /^\x1b\][^\x07\x1b]*(\x07|\x1b\\)/.exec(text.slice(j));
      if (osc) { i = j + osc[0].length; continue; }
      if (text.length - j < 32 && /^\x1b(\[[0-9;\x20-\x2f]*|\][^\x07]*)?$/.test(text.slice(j))) { st.carry = text.slice(j); break; }
      i = j + 2;
    }
    return out;
  }
  window.loopsAnsi = (text) => ansiToHtml({}, text);

  // ---- a running run's output ----
  const follows = new Map();
  function startFollows() {
    for (const pre of document.querySelectorAll("pre[data-follow]")) {
      if (follows.has(pre.id) && follows.get(pre.id).pre === pre) continue;
      const old = follows.get(pre.id);
      if (old && old.es) old.es.close();
      const f = { pre, st: {}, ended: false, es: null };
      follows.set(pre.id, f);
      open(f);
    }
  }
  function open(f) {
    f.pre.innerHTML = "";
    f.st = {};
    const es = new EventSource(f.pre.dataset.follow, { withCredentials: true });
    f.es = es;
    const state = document.querySelector('[data-follow-state="' + f.pre.id + '"]');
    es.addEventListener("output", (e) => {
      const stick = f.pre.scrollTop + f.pre.clientHeight >= f.pre.scrollHeight - 4;
      f.pre.insertAdjacentHTML("beforeend", ansiToHtml(f.st, JSON.parse(e.data).text));
      if (stick) f.pre.scrollTop = f.pre.scrollHeight;
    });
    es.addEventListener("gap", (e) => {
      f.pre.insertAdjacentHTML("beforeend", '<span class="ad">[… ' + JSON.parse(e.data).bytes + " bytes scrolled out …]</span>\n");
    });
    es.addEventListener("end", () => {
      f.ended = true;
      es.close();
      if (state) state.textContent = "ended";
      if ([...follows.values()].every((x) => x.ended)) refresh();
    });
    es.onerror = () => {
      if (f.ended) return;
      // The stream restarts from the beginning of the output: start over.
      es.close();
      setTimeout(() => { if (!f.ended && document.contains(f.pre)) open(f); }, 1000);
    };
  }

  // ---- the loop buttons ----
  document.addEventListener("click", async (e) => {
    const b = e.target.closest("button[data-action]");
    if (!b) return;
    const action = b.dataset.action, id = b.dataset.loop;
    if (b.dataset.confirm && !window.confirm(b.dataset.confirm)) return;
    const result = b.parentElement.querySelector(".action-result");
    b.disabled = true;
    if (result) result.textContent = action + "…";
    try {
      const r = await fetch("/v1/loops/" + encodeURIComponent(id) + "/" + action, {
        method: "POST", credentials: "same-origin", headers: { "X-Loops-CSRF": csrf },
      });
      const body = await r.json().catch(() => ({}));
      if (!r.ok) {
        if (result) result.textContent = "✕ " + ((body.error && body.error.message) || r.status);
        b.disabled = false;
        return;
      }
      if (action === "run-now" && body.id) { location.href = "/runs/" + encodeURIComponent(body.id); return; }
      if (result) result.textContent = "✓ done";
      await refresh();
    } catch (err) {
      if (result) result.textContent = "✕ " + err;
      b.disabled = false;
    }
  });

  tick();
  startFollows();
  listen();
  if (!document.querySelector("[data-live]")) setLive(true, "");
})();
