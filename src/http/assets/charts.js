// Hand-written SVG charts for the novad dashboard (no library: the page works offline and
// weighs a few tens of KiB). Every label is set with textContent, never parsed as HTML.
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";

  function s(tag, attrs, parent) {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, str, attrs) {
    const t = s("text", Object.assign({ x: x, y: y }, attrs || {}), parent);
    t.textContent = str;
    return t;
  }
  function tip(parent, str) {
    s("title", {}, parent).textContent = str;
  }
  function nice(max) {
    if (!(max > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(max)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= max) return m * p;
    return 10 * p;
  }
  // an axis maximum ≥ max and a tick count (≤ 5) that give round tick values
  function scale(max) {
    const step = nice(max / 4);
    const top = Math.max(step, Math.ceil(max / step - 1e-9) * step);
    return { max: top, ticks: Math.round(top / step) };
  }
  // a chart spanning the container's pixel width (text stays at its CSS size)
  function frame(el, H, label) {
    const W = Math.max(360, Math.floor(el.clientWidth || 900));
    return [W, s("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-label": label }, el)];
  }
  function fmt(x, d) {
    return x === null || x === undefined || !isFinite(x) ? "–" : Number(x).toFixed(d === undefined ? 3 : d);
  }
  function day(ms) {
    return ms === null || ms === undefined ? "" : new Date(ms).toISOString().slice(0, 10);
  }

  // x positions of n bands over [x0, x1]
  function bands(n, x0, x1) {
    const w = (x1 - x0) / Math.max(n, 1);
    return { w: w, x: (i) => x0 + i * w, bar: Math.max(2, Math.min(w * 0.7, 48)) };
  }

  function yAxis(svg, x0, x1, top, bottom, max, ticks, label) {
    for (let i = 0; i <= ticks; i++) {
      const v = (max * i) / ticks;
      const y = bottom - ((bottom - top) * i) / ticks;
      s("line", { x1: x0, x2: x1, y1: y, y2: y, class: "axis" }, svg);
      text(svg, x0 - 6, y + 4, max >= 10 ? String(Math.round(v)) : v.toFixed(2), { "text-anchor": "end" });
    }
    text(svg, x0, top - 8, label, { class: "title" });
  }

  // Novelty timeline: documents and novel documents per timestep (top), score quantiles as a
  // box per timestep with the median and the threshold (bottom). `pick(item)` on click.
  function timeline(el, items, pick) {
    el.textContent = "";
    if (!items.length) return;
    const H = 320, L = 46, R = 12;
    const [W, svg] = frame(el, H, "novelty timeline");
    const b = bands(items.length, L, W - R);
    const ds = scale(Math.max(...items.map((t) => t.docs)));
    const dmax = ds.max;
    const t0 = 22, t1 = 150, s0 = 186, s1 = 288;
    yAxis(svg, L, W - R, t0, t1, dmax, ds.ticks, "documents per timestep");
    // the score axis spans the data (p10 … p90 and thresholds), not 0 … max, so that
    // changes between timesteps stay visible
    let smax = 0, smin = Infinity;
    for (const t of items) {
      const thr = t.record.stats.threshold;
      if (t.scores) { smax = Math.max(smax, t.scores.p90); smin = Math.min(smin, t.scores.p10); }
      if (thr != null && isFinite(thr)) { smax = Math.max(smax, thr); smin = Math.min(smin, thr); }
    }
    if (!isFinite(smin)) smin = 0;
    const step = nice(Math.max(smax - smin, 1e-6) / 3);
    const slo = Math.max(0, Math.floor(smin / step) * step);
    const shi = Math.max(slo + step, Math.ceil(smax / step - 1e-9) * step);
    const sticks = Math.round((shi - slo) / step);
    for (let i = 0; i <= sticks; i++) {
      const y = s1 - ((s1 - s0) * i) / sticks;
      s("line", { x1: L, x2: W - R, y1: y, y2: y, class: "axis" }, svg);
      text(svg, L - 6, y + 4, (slo + i * step).toFixed(2), { "text-anchor": "end" });
    }
    text(svg, L, s0 - 8, "novelty score distribution", { class: "title" });
    const ys = (v) => s1 - ((s1 - s0) * (Math.min(Math.max(v, slo), shi) - slo)) / (shi - slo);
    const every = Math.ceil(items.length / 12);
    items.forEach((t, i) => {
      const cx = b.x(i) + b.w / 2, bw = b.bar;
      const hd = ((t1 - t0) * t.docs) / dmax, hn = ((t1 - t0) * t.novel) / dmax;
      const g = s("g", { "data-timestep": t.record.timestep, class: "step" }, svg);
      s("rect", { x: cx - bw / 2, y: t1 - hd, width: bw, height: hd, class: "bar-docs" }, g);
      if (t.novel > 0) s("rect", { x: cx - bw / 2, y: t1 - hn, width: bw, height: Math.max(hn, 1), class: "bar-novel" }, g);
      if (t.scores) {
        const q = t.scores;
        s("rect", { x: cx - bw / 2, y: ys(q.p90), width: bw, height: Math.max(ys(q.p10) - ys(q.p90), 1), class: "band" }, g);
        s("rect", { x: cx - bw / 2, y: ys(q.p75), width: bw, height: Math.max(ys(q.p25) - ys(q.p75), 1), class: "band2" }, g);
        s("line", { x1: cx - bw / 2, x2: cx + bw / 2, y1: ys(q.p50), y2: ys(q.p50), class: "mid" }, g);
      }
      const thr = t.record.stats.threshold;
      if (thr != null && isFinite(thr)) {
        s("line", { x1: cx - b.w / 2 + 1, x2: cx + b.w / 2 - 1, y1: ys(thr), y2: ys(thr), class: "thr" }, g);
      }
      if (i % every === 0) {
        text(svg, cx, t1 + 14, String(t.record.timestep), { "text-anchor": "middle" });
        text(svg, cx, s1 + 16, day(t.first_time).slice(5), { "text-anchor": "middle" });
      }
      const hit = s("rect", { x: b.x(i), y: t0 - 4, width: b.w, height: s1 - t0 + 4, class: "hit" }, g);
      const q = t.scores;
      tip(hit, `timestep ${t.record.timestep} · ${day(t.first_time)}${t.last_time && day(t.last_time) !== day(t.first_time) ? " – " + day(t.last_time) : ""}\n` +
        `${t.docs} documents, ${t.novel} novel${t.record.stats.bootstrap ? " (bootstrap)" : ""}\n` +
        (q ? `score p10 ${fmt(q.p10)} · median ${fmt(q.p50)} · p90 ${fmt(q.p90)} · max ${fmt(q.max)}\n` : "") +
        `threshold ${fmt(thr)}\nclick: show only this timestep's days`);
      hit.addEventListener("click", () => pick && pick(t));
    });
    text(svg, L, t1 + 14, "step", { "text-anchor": "end", dx: -6 });
    text(svg, L, s1 + 16, "date", { "text-anchor": "end", dx: -6 });
  }

  // Topics over time: one column per timestep, its topics stacked with height ∝ documents,
  // coloured by kind (emerging / evolving), labelled with their top terms where they fit.
  function stream(el, steps, topics, pick) {
    el.textContent = "";
    if (!topics.length) return;
    const H = 200, L = 46, R = 12, top = 10, bottom = 172;
    const [W, svg] = frame(el, H, "topics over time");
    const cols = steps.length ? steps : [...new Set(topics.map((t) => t.timestep))].sort((a, b) => a - b);
    const index = new Map(cols.map((c, i) => [c, i]));
    const byStep = new Map();
    for (const t of topics) {
      if (!index.has(t.timestep)) continue;
      if (!byStep.has(t.timestep)) byStep.set(t.timestep, []);
      byStep.get(t.timestep).push(t);
    }
    const tot = Math.max(1, ...[...byStep.values()].map((ts) => ts.reduce((a, t) => a + t.size, 0)));
    const b = bands(cols.length, L, W - R);
    const bw = Math.max(4, Math.min(b.w - 4, 160));
    s("line", { x1: L, x2: W - R, y1: bottom, y2: bottom, class: "axis" }, svg);
    text(svg, L - 6, bottom + 4, "0", { "text-anchor": "end" });
    text(svg, L - 6, top + 8, String(tot), { "text-anchor": "end" });
    text(svg, L - 6, top + 20, "docs", { "text-anchor": "end" });
    const every = Math.ceil(cols.length / 12);
    cols.forEach((c, i) => {
      if (i % every === 0) text(svg, b.x(i) + b.w / 2, bottom + 14, String(c), { "text-anchor": "middle" });
    });
    for (const [step, ts] of byStep) {
      const i = index.get(step);
      const x = b.x(i) + (b.w - bw) / 2;
      let y = bottom;
      ts.sort((a, c) => c.size - a.size);
      for (const t of ts) {
        const h = ((bottom - top) * t.size) / tot;
        y -= h;
        const r = s("rect", { x: x, y: y, width: bw, height: Math.max(h, 1), class: "blk " + t.kind,
          "fill-opacity": (0.55 + 0.45 * Math.min(1, t.strength * 4)).toFixed(2), "data-topic": `${t.timestep}-${t.id}` }, svg);
        const terms = t.terms.slice(0, 8).map((x) => x[0]);
        tip(r, `timestep ${t.timestep} · topic ${t.id} (${t.kind})\n${t.size} documents · strength ${fmt(t.strength)} · mean score ${fmt(t.mean_score)}\n${terms.join(", ")}`);
        r.addEventListener("click", () => pick && pick(t));
        if (h >= 14 && bw >= 40) {
          // as many whole terms as fit (about 6.5 px per character at 11 px)
          let label = terms[0];
          for (const w of terms.slice(1)) {
            if ((label.length + 3 + w.length) * 6.5 > bw - 10) break;
            label += " · " + w;
          }
          if (label.length * 6.5 <= bw - 10) text(svg, x + 5, y + Math.min(h / 2 + 4, 15), label, { class: "blk-label" });
        }
      }
    }
    text(svg, L, bottom + 14, "step", { "text-anchor": "end", dx: -6 });
  }

  // A small line of a topic's temporal profile (oldest first).
  function sparkline(el, values) {
    if (!values || values.length < 2) return;
    const W = 120, H = 24, max = Math.max(...values, 1e-9);
    const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-label": "temporal profile" }, el);
    const pts = values.map((v, i) => `${(i * (W - 2)) / (values.length - 1) + 1},${H - 2 - ((H - 4) * v) / max}`);
    s("polyline", { points: pts.join(" "), class: "mid" }, svg);
  }

  window.Charts = { timeline: timeline, stream: stream, sparkline: sparkline, fmt: fmt, day: day };
})();
