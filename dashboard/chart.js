/* forum's charts: a few SVG drawings, no library. Colours come from the
 * page's CSS variables (classes s0..s5), so the dark scheme applies.
 * forumChart.line(opts) draws time series; forumChart.timeline(opts)
 * draws a waterfall of steps. Both return an <svg> element. */
"use strict";

const forumChart = (() => {
  const NS = "http://www.w3.org/2000/svg";
  function s(tag, attrs, ...kids) {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else if (k === "text") e.textContent = v;
      else e.setAttribute(k, String(v));
    }
    for (const k of kids.flat()) if (k) e.append(k);
    return e;
  }
  function title(text) {
    return s("title", { text });
  }
  /* 1, 2, 5 times 10^k steps: about n ticks from 0 to max */
  function ticks(max, n) {
    if (!(max > 0)) return [0, 1];
    const raw = max / n, p = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * p).find((x) => x >= raw);
    const out = [];
    for (let v = 0; v <= max + step / 2; v += step) out.push(v);
    if (out[out.length - 1] < max) out.push(out[out.length - 1] + step);
    return out;
  }
  function fmt(v) {
    if (v === 0) return "0";
    const a = Math.abs(v);
    if (a >= 1e6) return `${+(v / 1e6).toFixed(1)}M`;
    if (a >= 1e3) return `${+(v / 1e3).toFixed(1)}k`;
    if (a >= 10) return String(Math.round(v));
    return String(+v.toFixed(2));
  }
  function clock(ms) {
    const d = new Date(ms);
    const p = (n) => String(n).padStart(2, "0");
    return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  }

  /* opts: {title, unit, series: [{name, points: [[t_ms, v|null], ...]}],
   * width, height}. A null value is a gap. */
  function line(opts) {
    const W = opts.width || 520, H = opts.height || 200;
    const L = 48, R = 10, T = 28, B = 40;
    const all = opts.series.flatMap((x) => x.points);
    const ts = all.map((p) => p[0]);
    const vs = all.map((p) => p[1]).filter((v) => typeof v === "number" && isFinite(v));
    const t0 = Math.min(...ts), t1 = Math.max(...ts);
    const yt = ticks(Math.max(0, ...vs), 4), ymax = yt[yt.length - 1] || 1;
    const x = (t) => L + (t1 > t0 ? (t - t0) / (t1 - t0) : 1) * (W - L - R);
    const y = (v) => T + (1 - v / ymax) * (H - T - B);
    const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H,
      class: "chart", role: "img", "aria-label": opts.title },
    title(`${opts.title}: ${opts.series.map((x) => `${x.name} ${fmt(last(x.points))}${opts.unit || ""}`).join(", ")}`));
    svg.append(s("text", { x: L, y: 16, class: "chart-title", text: opts.title + (opts.unit ? ` (${opts.unit.trim()})` : "") }));
    for (const v of yt) {
      svg.append(s("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid" }));
      svg.append(s("text", { x: L - 6, y: y(v) + 4, class: "tick", "text-anchor": "end", text: fmt(v) }));
    }
    if (ts.length) {
      svg.append(s("text", { x: L, y: H - B + 16, class: "tick", text: clock(t0) }));
      svg.append(s("text", { x: W - R, y: H - B + 16, class: "tick", "text-anchor": "end", text: clock(t1) }));
    }
    if (!vs.length)
      svg.append(s("text", { x: W / 2, y: H / 2, class: "tick", "text-anchor": "middle", text: "no data yet" }));
    opts.series.forEach((ser, i) => {
      let d = "", pen = false;
      for (const [t, v] of ser.points) {
        if (typeof v !== "number" || !isFinite(v)) { pen = false; continue; }
        d += `${pen ? "L" : "M"}${x(t).toFixed(1)},${y(v).toFixed(1)}`;
        pen = true;
      }
      svg.append(s("path", { d: d || "M0,0", class: `series s${i}`, "data-series": ser.name }));
      /* a reading alone between gaps is a dot */
      const pts = ser.points, ok = (j) => j >= 0 && j < pts.length && typeof pts[j][1] === "number" && isFinite(pts[j][1]);
      pts.forEach(([t, v], j) => {
        if (ok(j) && !ok(j - 1) && !ok(j + 1))
          svg.append(s("circle", { cx: x(t).toFixed(1), cy: y(v).toFixed(1), r: 3, class: `dot s${i}` }));
      });
      const lx = L + i * 120;
      svg.append(s("rect", { x: lx, y: H - 16, width: 10, height: 10, class: `key s${i}` }));
      svg.append(s("text", { x: lx + 14, y: H - 7, class: "tick", text: `${ser.name} ${fmt(last(ser.points))}` }));
    });
    return svg;
  }
  function last(points) {
    for (let i = points.length - 1; i >= 0; i--)
      if (typeof points[i][1] === "number" && isFinite(points[i][1])) return points[i][1];
    return 0;
  }

  /* opts: {steps: [{kind, name, start, end|null, ok, label, key}], now,
   * onPick(step), width}. One row a step, ordered as given, placed by its
   * start and length (times in microseconds); an open step runs to now. */
  function timeline(opts) {
    const steps = opts.steps;
    const W = opts.width || 1100, ROW = 22, L = 230, R = 70, T = 24;
    const H = T + steps.length * ROW + 8;
    const t0 = Math.min(...steps.map((x) => x.start));
    const t1 = Math.max(...steps.map((x) => x.end ?? opts.now), t0 + 1000);
    const x = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - R);
    const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "timeline",
      role: "group", "aria-label": opts.label || "timeline" });
    for (const v of ticks((t1 - t0) / 1000, 6)) {
      const tx = x(t0 + v * 1000);
      if (tx > W - R + 1) break;
      svg.append(s("line", { x1: tx, x2: tx, y1: T - 4, y2: H, class: "grid" }));
      svg.append(s("text", { x: tx, y: T - 8, class: "tick", "text-anchor": "middle",
        text: v >= 1000 ? `${+(v / 1000).toFixed(1)} s` : `${v} ms` }));
    }
    steps.forEach((st, i) => {
      const y = T + i * ROW;
      const end = st.end ?? opts.now;
      const bx = x(st.start), bw = Math.max(3, x(end) - bx);
      const cls = `bar k-${st.kind}${st.ok === false ? " failed" : ""}${st.end == null ? " open" : ""}`;
      const g = s("g", { class: "step", tabindex: 0, role: "button", "data-kind": st.kind,
        "data-seq": st.key, "aria-label": st.title,
        onclick: () => opts.onPick(st),
        onkeydown: (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); opts.onPick(st); } } },
      title(st.title),
      s("rect", { x: 0, y, width: W, height: ROW, class: "rowbg" }),
      s("text", { x: 6, y: y + 15, class: "label", text: st.name.length > 32 ? st.name.slice(0, 31) + "\u2026" : st.name }),
      st.marker
        ? s("path", { d: `M${bx},${y + 3}l7,8l-7,8l-7,-8z`, class: cls })
        : s("rect", { x: bx, y: y + 4, width: bw, height: ROW - 8, rx: 2, class: cls }),
      s("text", { x: Math.min(bx + bw + 4, W - R + 4), y: y + 15, class: "tick",
        text: st.dur }));
      svg.append(g);
    });
    return svg;
  }
  return { line, timeline, fmt };
})();
