// The novad dashboard: reads /api/v1/* (same origin, access cookie) and draws the panels.
// Every value from the store is inserted as text (textContent), never as HTML.
"use strict";
(function () {
  const C = window.Charts;
  const $ = (id) => document.getElementById(id);
  const POLL_MS = 4000, PAGE = 15, CARDS = 8;
  const view = { since: "", until: "", cursor: null, sig: null, steps: [], allTopics: false };

  function h(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) {
      if (k === "text") e.textContent = attrs[k];
      else if (k === "cls") e.className = attrs[k];
      else e.setAttribute(k, attrs[k]);
    }
    for (const c of kids) if (c !== null && c !== undefined) e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    return e;
  }
  const num = (x) => (x === null || x === undefined ? "–" : Number(x).toLocaleString("en-US"));
  const when = (ms) => (ms ? new Date(ms).toISOString().replace("T", " ").slice(0, 16) : "–");
  function bytes(n) {
    if (!n) return "–";
    const u = ["B", "KiB", "MiB", "GiB"];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return n.toFixed(i ? 1 : 0) + " " + u[i];
  }

  let toastTimer = null;
  function toast(msg) {
    const t = $("toast");
    t.textContent = msg;
    t.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => (t.hidden = true), 6000);
  }

  async function api(path, params) {
    const qs = new URLSearchParams();
    for (const k in params || {}) if (params[k] !== "" && params[k] !== null && params[k] !== undefined) qs.set(k, params[k]);
    const r = await fetch("/api/v1/" + path + (qs.toString() ? "?" + qs : ""), { credentials: "same-origin" });
    if (r.status === 401) throw new Error("Not signed in: open the link the daemon printed at start.");
    const body = await r.json();
    if (!r.ok) throw new Error(body.error || r.statusText);
    return body;
  }
  const range = () => ({ since: view.since, until: view.until });
  // Each panel renders only the answer to its newest request: an older answer arriving late
  // (a slow request overtaken by a range change or a search) is dropped.
  const gen = {};
  function latest(panel, keep) {
    const g = keep ? gen[panel] || 0 : (gen[panel] = (gen[panel] || 0) + 1);
    return () => (gen[panel] || 0) === g;
  }

  function setLive(ok, msg) {
    $("live").className = "live " + (ok ? "on" : "err");
    $("live-text").textContent = msg;
  }

  function flatten(obj, prefix, out) {
    for (const k in obj) {
      const v = obj[k], key = prefix ? prefix + "." + k : k;
      if (v !== null && typeof v === "object" && !Array.isArray(v)) flatten(v, key, out);
      else out.push([key, Array.isArray(v) ? v.join(", ") : String(v)]);
    }
    return out;
  }

  function renderModel(st) {
    const box = $("model");
    box.textContent = "";
    const s = st.state;
    box.appendChild(h("div", { cls: "model-head" }, h("span", { cls: "model-kind", text: st.model }),
      h("span", { cls: "verdict-badge", text: s && s.bootstrapped ? "bootstrapped" : "waiting for bootstrap" })));
    const facts = [];
    if (s) {
      facts.push(["atoms (k)", num(s.atoms)], ["vocabulary", `${num(s.terms)} of ${num(s.max_terms)} terms`],
        ["documents seen", num(s.docs_seen)], ["last commit", when(s.committed_at) + " UTC"]);
    }
    facts.push(["verdicts stored", num(st.verdicts)], ["batch files", num(st.files)],
      ["daemon", st.live ? `ingesting (pid ${st.daemon_pid})` : "stopped (read-only view)"]);
    const dl = (rows) => {
      const d = h("dl", { cls: "params" });
      for (const [k, v] of rows) d.append(h("dt", { text: k }), h("dd", { text: v }));
      return d;
    };
    const params = flatten(st.params || {}, "", []);
    const key = /^(k|seed|coding\.lambda|oiadmm\.beta|threshold\..*|text\.max_terms|topics\.k1|.*\.rank|.*\.window|.*topics)$/;
    box.appendChild(dl(facts.concat(params.filter(([k]) => key.test(k)))));
    if (params.length) {
      box.appendChild(h("details", {}, h("summary", { text: `all ${params.length} parameters` }), dl(params)));
    }
  }

  async function loadStatus() {
    const st = await api("status");
    $("model-chip").textContent = `${st.model} model`;
    $("version").textContent = st.version;
    $("kpi-vocab").textContent = st.state ? num(st.state.terms) : "0";
    $("kpi-disk").textContent = bytes(st.disk_bytes);
    renderModel(st);
    setLive(true, st.live ? "live · updated " + new Date().toTimeString().slice(0, 8) : "stopped daemon · read-only");
    renderHooks(st.webhooks || []);
    return `${st.state ? st.state.timestep : -1}/${st.verdicts}`;
  }

  // Webhook messages not yet delivered: waiting ones in amber, parked ones (delivery gave up) in red.
  function renderHooks(hooks) {
    const box = $("hooks");
    const waiting = hooks.reduce((n, w) => n + w.waiting, 0), parked = hooks.reduce((n, w) => n + w.parked, 0);
    box.hidden = waiting + parked === 0;
    box.className = "hooks" + (parked ? " parked" : "");
    box.textContent = parked ? `webhooks: ${parked} parked, ${waiting} waiting` : `webhooks: ${waiting} waiting`;
    box.title = hooks.map((w) => `${w.url}: ${w.waiting} waiting, ${w.parked} parked` + (w.last_error ? ` (last error: ${w.last_error})` : "")).join("\n");
  }

  function pickStep(t) {
    if (!t.first_time) return;
    view.since = C.day(t.first_time);
    view.until = C.day(t.last_time);
    $("since").value = view.since;
    $("until").value = view.until;
    refreshAll();
  }

  function renderDiag(items) {
    const tb = $("diag");
    tb.textContent = "";
    for (const t of items.slice().reverse()) {
      const st = t.record.stats;
      const secs = st.seconds_vectorize + st.seconds_coding + st.seconds_update + (st.seconds_topics || 0);
      tb.appendChild(h("tr", { "data-timestep": t.record.timestep },
        h("td", { cls: "num", text: String(t.record.timestep) }),
        h("td", { cls: "mono", text: t.record.file }),
        h("td", { cls: "num", text: num(t.docs) }),
        h("td", { cls: "num", text: st.bootstrap ? "bootstrap" : num(t.novel) }),
        h("td", { cls: "num", text: C.fmt(st.threshold) }),
        h("td", { cls: "num", text: t.scores ? C.fmt(t.scores.p50) : "–" }),
        h("td", { cls: "num", text: (100 * st.ceiling_fraction).toFixed(1) + " %" }),
        h("td", { cls: "num", text: C.fmt(st.mean_code_nnz, 2) }),
        h("td", { cls: "num", text: `${num(st.atoms_used)} / ${num(st.atoms)}` }),
        h("td", { cls: "num", text: `${num(st.vocabulary)} (+${num(st.new_terms)} −${num(st.evicted_terms)})` }),
        h("td", { cls: "num", text: C.fmt(st.oiadmm.relative_change, 4) }),
        h("td", { cls: "num", text: num(st.topics) }),
        h("td", { cls: "num", text: secs.toFixed(3) }),
        h("td", { text: when(t.record.committed_at) })));
    }
    if (!items.length) tb.appendChild(h("tr", { cls: "empty-row" }, h("td", { colspan: 14, text: "No timesteps in this range." })));
  }

  async function loadTimeline() {
    const current = latest("timeline");
    const { items } = await api("timesteps", range());
    if (!current()) return;
    view.steps = items.map((t) => t.record.timestep);
    const docs = items.reduce((a, t) => a + t.docs, 0), novel = items.reduce((a, t) => a + t.novel, 0);
    $("kpi-timesteps").textContent = num(items.length);
    $("kpi-docs").textContent = num(docs);
    $("kpi-novel").textContent = docs ? `${num(novel)} (${((100 * novel) / docs).toFixed(1)} %)` : "0";
    $("timeline-sub").textContent = items.length ? `${items.length} timesteps · click a column to zoom to its days` : "";
    C.timeline($("timeline"), items, pickStep);
    renderDiag(items);
  }

  function docLink(id, label) {
    return h("a", { href: "#v=" + id, text: label });
  }

  function renderTopics(items) {
    const box = $("topics");
    box.textContent = "";
    const sorted = items.slice().sort((a, b) => b.timestep - a.timestep || b.size - a.size);
    const newest = view.allTopics ? sorted : sorted.slice(0, CARDS);
    for (const t of newest) {
      const maxw = Math.max(...t.terms.map((x) => x[1]), 1e-9);
      const kw = h("div", { cls: "kw" }, ...t.terms.slice(0, 10).map((x) => h("span", { cls: "chip" + (x[1] >= 0.5 * maxw ? " strong" : ""), text: x[0] })));
      const what = t.event == null ? ` · ${t.kind}` : ` · event ${t.event} · ${t.kind}`;
      const card = h("div", { cls: "topic " + t.kind, id: `topic-${t.timestep}-${t.id}` },
        h("div", { cls: "topic-head" }, h("span", {}, h("b", { text: `step ${t.timestep} · topic ${t.id}` }), what),
          h("span", { text: `${t.size} docs · strength ${C.fmt(t.strength, 2)} · score ${C.fmt(t.mean_score, 2)}` })),
        kw);
      if (t.docs.length) {
        card.appendChild(h("div", { cls: "reps" }, "representative: ", ...t.docs.map((d) => h("a", { href: "#q=" + encodeURIComponent(d), text: d }))));
      }
      if (t.members && t.members.length) card.appendChild(memberList(t.members, `all ${t.members.length} documents`));
      C.sparkline(card, t.profile);
      box.appendChild(card);
    }
    const more = $("topics-more");
    more.hidden = sorted.length <= CARDS;
    more.textContent = view.allTopics ? `Show the newest ${CARDS}` : `Show all ${sorted.length} topics`;
  }

  // every member of a topic, folded: links that search the verdicts for the document
  function memberList(ids, label) {
    return h("details", { cls: "members" }, h("summary", { text: label }),
      h("div", { cls: "reps" }, ...ids.map((d) => h("a", { href: "#q=" + encodeURIComponent(d), text: d }))));
  }

  // topics grouped by their event: one card per event with its life (documents per day) and
  // every document of every day, newest event first
  function renderEvents(items) {
    const box = $("events");
    box.textContent = "";
    const by = new Map();
    for (const t of items) {
      if (t.event == null) continue;
      if (!by.has(t.event)) by.set(t.event, []);
      by.get(t.event).push(t);
    }
    const events = [...by.entries()].sort((a, b) => b[0] - a[0]);
    $("events-card").hidden = events.length === 0;
    $("events-sub").textContent = events.length ? `${events.length} events in this range` : "";
    for (const [id, days] of events) {
      days.sort((a, b) => a.timestep - b.timestep);
      const last = days[days.length - 1];
      const docs = days.reduce((n, t) => n + t.size, 0);
      const card = h("div", { cls: "topic event " + days[0].kind, id: `event-${id}` },
        h("div", { cls: "topic-head" }, h("span", {}, h("b", { text: `event ${id}` }), ` · first seen at step ${days[0].timestep}`),
          h("span", { text: `${days.length} ${days.length === 1 ? "day" : "days"} · ${docs} docs` })),
        termChips(last.terms, 10));
      const life = h("div", { cls: "life" }, ...days.map((t) => h("span", { cls: "chip", text: `step ${t.timestep}: ${t.size}` })));
      card.appendChild(life);
      C.sparkline(card, days.map((t) => t.size));
      for (const t of days) {
        if (t.members && t.members.length) card.appendChild(memberList(t.members, `step ${t.timestep} · ${t.kind} · ${t.members.length} documents`));
      }
      box.appendChild(card);
    }
  }

  async function loadTopics() {
    const current = latest("topics");
    const { items } = await api("topics", range());
    if (!current()) return;
    $("kpi-topics").textContent = num(items.length);
    $("topics-sub").textContent = items.length ? `${items.length} topics · block height = documents` : "";
    C.stream($("topic-stream"), view.steps, items, (t) => {
      const el = $(`topic-${t.timestep}-${t.id}`);
      document.querySelectorAll(".topic.sel").forEach((e) => e.classList.remove("sel"));
      if (el) { el.classList.add("sel"); el.scrollIntoView({ block: "nearest", behavior: "smooth" }); }
    });
    renderTopics(items);
    renderEvents(items);
  }

  function termChips(terms, n) {
    const max = Math.max(...terms.map((x) => x[1]), 1e-9);
    return h("div", { cls: "kw" }, ...terms.slice(0, n).map((x) => h("span", { cls: "chip" + (x[1] >= 0.5 * max ? " strong" : ""), text: x[0], title: `residual ${C.fmt(x[1])}` })));
  }

  function verdictRow(v, smax) {
    const w = Math.max(2, Math.round((60 * Math.min(v.score, smax)) / smax));
    const bar = h("i");
    bar.style.width = w + "px";
    return h("tr", { cls: v.novel ? "novel" : "", "data-id": v.id },
      h("td", { cls: "mono", text: when(v.time) }),
      h("td", {}, docLink(v.id, v.doc_id)),
      h("td", { cls: "num", text: String(v.timestep) }),
      h("td", { cls: "num" }, h("span", { cls: "score" }, bar, C.fmt(v.score))),
      h("td", {}, v.terms.length ? termChips(v.terms, 8) : h("span", { cls: "chip", text: v.empty ? "empty document" : v.bootstrap ? "bootstrap" : "—" })));
  }

  async function loadNovel(reset) {
    if (reset) view.cursor = null;
    else if (!view.cursor) return; // the next page of a list being reloaded: the reload decides
    const current = latest("novel", !reset); // a next page does not cancel a reload; a reload drops it
    const cursor = view.cursor || "";
    view.cursor = null; // a second click while this page loads asks for nothing
    let page;
    try {
      page = await api("verdicts", Object.assign(range(), {
        order: "desc", limit: PAGE, novel: $("novel-only").checked ? "true" : "",
        q: $("q").value.trim(), min_score: $("min-score").value, cursor,
      }));
    } catch (e) {
      if (current() && !reset) view.cursor = cursor; // the same page can be asked for again
      throw e;
    }
    if (!current()) return;
    const tb = $("novel-list");
    if (reset) tb.textContent = "";
    const smax = Math.max(1e-9, ...page.items.map((v) => v.score));
    for (const v of page.items) tb.appendChild(verdictRow(v, smax));
    if (reset && !page.items.length) tb.appendChild(h("tr", { cls: "empty-row" }, h("td", { colspan: 5, text: "No documents match." })));
    view.cursor = page.next;
    $("more").hidden = !page.next;
  }

  // The hybrid detector's explanation: the two component scores and the nearest earlier
  // document (a link to its own verdict).
  function scoredBy(v) {
    const x = v.hybrid, n = x.nearest;
    const pct = (q) => `${Math.round(100 * q)}th percentile`;
    const dl = h("dl", { cls: "params" },
      h("dt", { text: "model score" }), h("dd", { text: `${C.fmt(x.model_score, 4)} (${pct(x.model_quantile)})` }),
      h("dt", { text: "nearest-neighbour score" }), h("dd", { text: `${C.fmt(x.nn_score, 4)} (${pct(x.nn_quantile)})` }),
      h("dt", { text: "nearest earlier document" }));
    if (n) {
      const a = docLink(n.id, n.doc_id || "(unknown id)");
      dl.append(h("dd", {}, a, h("span", { text: ` · cosine ${C.fmt(n.cosine, 3)} · ${when(n.time)} UTC · step ${n.timestep}` })));
    } else dl.append(h("dd", { text: "none shares a term" }));
    return [h("h3", { text: "How it was scored: the model score and the nearest-neighbour score, fused" }), dl];
  }

  async function openVerdict(id) {
    let d;
    try { d = await api("verdicts/" + encodeURIComponent(id)); } catch (e) { toast(e.message); return; }
    const v = d.verdict, body = $("d-body");
    $("d-title").textContent = v.doc_id;
    body.textContent = "";
    const badge = h("span", { cls: "verdict-badge" + (v.novel ? " novel" : ""), text: v.novel ? "novel" : v.bootstrap ? "bootstrap" : v.empty ? "empty" : "not novel" });
    const facts = [["time", when(v.time) + " UTC"], ["timestep", String(v.timestep)], ["batch file", v.source],
      ["score", C.fmt(v.score, 4)], ["threshold", C.fmt(d.threshold, 4)], ["at ceiling", v.at_ceiling ? "yes" : "no"]];
    const known = new Set(["doc_id", "time", "timestep", "seq", "source", "score", "novel", "bootstrap", "empty", "at_ceiling", "terms", "id", "time_utc", "hybrid"]);
    for (const k in v) {
      if (known.has(k)) continue;
      const val = v[k];
      if (val !== null && typeof val === "object") flatten(Array.isArray(val) ? { [k]: val.map((x) => (typeof x === "object" ? JSON.stringify(x) : x)) } : { [k]: val }, "", facts);
      else facts.push([k.replace(/_/g, " "), typeof val === "number" ? C.fmt(val, 4) : String(val)]);
    }
    const dl = h("dl", { cls: "params" });
    for (const [k, val] of facts) dl.append(h("dt", { text: k }), h("dd", { text: val }));
    body.append(badge, dl);
    if (v.hybrid) body.append(...scoredBy(v));
    body.append(h("h3", { text: "Why novel: terms the model could not explain" }));
    const max = Math.max(...v.terms.map((x) => x[1]), 1e-9);
    for (const [term, w] of v.terms) {
      const bar = h("i");
      bar.style.width = Math.max(2, (100 * w) / max) + "%";
      body.appendChild(h("div", { cls: "termbar" }, h("span", { text: term }), h("span", {}, bar), h("span", { cls: "num", text: C.fmt(w) })));
    }
    if (!v.terms.length) body.appendChild(h("p", { text: "No residual terms recorded." }));
    if (d.topics.length) {
      body.appendChild(h("h3", { text: "Representative of topics" }));
      for (const t of d.topics) body.appendChild(h("div", { cls: "topic " + t.kind }, h("div", { cls: "topic-head", text: `step ${t.timestep} · topic ${t.id} · ${t.size} docs` }), termChips(t.terms, 10)));
    }
    $("drawer").hidden = false;
  }

  function fromHash() {
    const m = location.hash.match(/^#v=([0-9a-f]+)$/);
    if (m) return openVerdict(m[1]);
    const q = location.hash.match(/^#q=(.*)$/);
    if (q) {
      $("q").value = decodeURIComponent(q[1]);
      $("novel-only").checked = false;
      loadNovel(true).catch((e) => toast(e.message));
      $("novel-card").scrollIntoView({ behavior: "smooth" });
    }
  }

  // One refresh at a time; a request for another while one runs (a range change, a new
  // timestep) is remembered and run when it ends, never dropped.
  let busy = false, again = false;
  async function refreshAll() {
    if (busy) { again = true; return; }
    busy = true;
    document.querySelector("main").setAttribute("aria-busy", "true");
    try {
      do {
        again = false;
        await loadTimeline();
        await Promise.all([loadTopics(), loadNovel(true)]);
      } while (again);
    } catch (e) {
      setLive(false, "error");
      toast(e.message);
    } finally {
      busy = false;
      document.querySelector("main").removeAttribute("aria-busy");
      // a refresh asked for while one failed still runs (once: a failing one asks for none)
      if (again) { again = false; setTimeout(refreshAll, 0); }
      if (!document.body.dataset.ready) document.body.dataset.readyMs = String(Math.round(performance.now()));
      document.body.dataset.ready = "1";
    }
  }

  async function update() {
    try {
      const sig = await loadStatus();
      if (sig !== view.sig) {
        view.sig = sig;
        await refreshAll();
      }
    } catch (e) {
      setLive(false, "no connection");
      if (!document.body.dataset.ready) { toast(e.message); document.body.dataset.ready = "1"; }
    }
  }

  // The page follows the daemon's event stream, one message per committed timestep; the
  // browser reconnects by itself and resumes after the last message it saw. Without
  // EventSource the page polls.
  function follow() {
    if (!window.EventSource) {
      const tick = () => update().then(() => setTimeout(tick, POLL_MS));
      return tick();
    }
    const es = new EventSource("/api/v1/events");
    es.addEventListener("open", () => { document.body.dataset.stream = "open"; update(); });
    es.addEventListener("timestep", (ev) => {
      document.body.dataset.lastEvent = ev.lastEventId;
      const m = JSON.parse(ev.data);
      for (const e of m.events || []) {
        toast(`New event at timestep ${m.timestep}: ${e.keywords.slice(0, 5).join(", ")} (${e.size} documents)`);
      }
      update();
    });
    es.addEventListener("error", () => {
      document.body.dataset.stream = "closed";
      setLive(false, "reconnecting");
      // a refusal (503: too many streams, 401) closes the stream for good: open a new one later
      if (es.readyState === EventSource.CLOSED) {
        es.close();
        setTimeout(follow, 3000 + Math.random() * 4000);
      }
    });
    return update();
  }

  function onRange() {
    view.since = $("since").value;
    view.until = $("until").value;
    refreshAll();
  }
  $("since").addEventListener("change", onRange);
  $("until").addEventListener("change", onRange);
  $("range-all").addEventListener("click", () => { $("since").value = ""; $("until").value = ""; onRange(); });
  let searchTimer = null;
  const research = () => { clearTimeout(searchTimer); searchTimer = setTimeout(() => loadNovel(true).catch((e) => toast(e.message)), 250); };
  $("q").addEventListener("input", research);
  $("min-score").addEventListener("input", research);
  $("novel-only").addEventListener("change", research);
  $("novel-filters").addEventListener("submit", (e) => e.preventDefault());
  $("range").addEventListener("submit", (e) => e.preventDefault());
  $("topics-more").addEventListener("click", () => { view.allTopics = !view.allTopics; loadTopics().catch((e) => toast(e.message)); });
  $("more").addEventListener("click", () => loadNovel(false).catch((e) => toast(e.message)));
  $("d-close").addEventListener("click", () => { $("drawer").hidden = true; history.replaceState(null, "", location.pathname); });
  document.addEventListener("keydown", (e) => { if (e.key === "Escape") $("d-close").click(); });
  window.addEventListener("hashchange", fromHash);
  let resizeTimer = null;
  window.addEventListener("resize", () => { clearTimeout(resizeTimer); resizeTimer = setTimeout(refreshAll, 200); });
  follow().then(fromHash);
})();
