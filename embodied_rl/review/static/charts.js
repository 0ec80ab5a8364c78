// Curves over global steps from metrics.jsonl, drawn as plain SVG (no chart library).
"use strict";
(function (R) {
  const el = R.el, svg = R.svg;
  const $ = (id) => document.getElementById(id);
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
  const W = 640, H = 240, M = { l: 52, r: 12, t: 12, b: 32 };
  const SUCCESS = /(^|\/)success(_once|_at_end)?$/;
  const RETURN = /(^|\/)return$/;
  // An evaluation scored several ways logs each under eval/<scoring>/<metric>[/<task>] (the
  // scoring sits before the metric, a task after it) and its first scoring again as
  // eval/<metric>: where a run has the named curves, the unnamed copy is not drawn twice.
  const SCORINGS = ["greedy", "sampled"];
  const SCORED = /^eval\/(greedy|sampled)\//;

  function niceTicks(lo, hi, count) {
    const span = hi - lo || 1;
    const raw = span / count, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((f) => f * mag).find((s) => span / s <= count) || 10 * mag;
    const ticks = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(Number(v.toPrecision(12)));
    return ticks;
  }

  R.Charts = class {
    constructor(app) {
      this.app = app;
      this.extra = $("m-extra");
      this.extra.addEventListener("input", () => this.render());
    }

    setCatalog(catalog) {
      this.catalog = catalog;
      const keys = new Set();
      for (const run of catalog.runs) Object.keys(run.metrics).forEach((k) => keys.add(k));
      R.fillSelect(this.extra, [["", "(none)"]].concat([...keys].sort().map((k) => [k, k])), true);
      this.render();
    }

    metricSeries(test, { all = false } = {}) {
      const out = [];
      const many = this.catalog.runs.length > 1;
      for (const run of this.catalog.runs) {
        for (const [key, points] of Object.entries(run.metrics)) {
          if (!test(key)) continue;
          if (!all && this.isPrimaryCopy(run.metrics, key)) continue;
          const mode = key.startsWith("eval/") ? "eval" : "train";
          out.push({ label: (many ? run.name + ": " : "") + key, points: points, run: run.id, mode: mode,
                     interval: this.interval(run.metrics, key) });
        }
      }
      return out;
    }

    // eval/<metric> when the run also logged it under a scoring's name: the primary scoring's
    // copy (the same values as eval/<primary scoring>/<metric>).
    isPrimaryCopy(metrics, key) {
      if (!key.startsWith("eval/") || SCORED.test(key)) return false;
      return SCORINGS.some((s) => key.replace(/^eval\//, `eval/${s}/`) in metrics);
    }

    // step -> [low, high, episodes] of a success rate's 95 % Wilson interval, when the run
    // logged one (`<prefix>/success_once_ci95_low[/task]`, as the runner does for evaluations).
    interval(metrics, key) {
      const m = key.match(/^(.*\/success(?:_once|_at_end))(\/.*)?$/);
      if (!m) return null;
      const [head, task] = [m[1], m[2] || ""];
      const low = metrics[`${head}_ci95_low${task}`], high = metrics[`${head}_ci95_high${task}`];
      if (!low || !high) return null;
      const count = metrics[head.replace(/success(_once|_at_end)$/, "num_trajectories") + task] || [];
      const at = (pts) => new Map(pts.map(([s, v]) => [s, v]));
      const [lo, hi, n] = [at(low), at(high), at(count)];
      return new Map([...lo.keys()].filter((s) => hi.has(s)).map((s) => [s, [lo.get(s), hi.get(s), n.get(s)]]));
    }

    // Success rate and mean return of the recorded episodes, per run, mode and step. Finished
    // episodes only, like the env metrics: a cut-off episode's outcome and return are partial.
    videoSeries(field) {
      const acc = new Map();
      for (const v of this.catalog.videos) {
        for (const ep of v.episodes) {
          if (ep.finished === false) continue;
          const value = field === "success" ? (ep.success == null ? null : Number(ep.success)) : ep.return;
          if (value == null || !Number.isFinite(value)) continue;
          const key = `${v.run}|${v.mode}`;
          if (!acc.has(key)) acc.set(key, { run: v.run, mode: v.mode, steps: new Map() });
          const steps = acc.get(key).steps;
          const cell = steps.get(v.global_step) || [0, 0];
          steps.set(v.global_step, [cell[0] + value, cell[1] + 1]);
        }
      }
      const many = this.catalog.runs.length > 1;
      return [...acc.values()].map((s) => ({
        label: (many ? R.runName(this.catalog, s.run) + ": " : "") + `videos/${s.mode} ${field}`,
        run: s.run, mode: s.mode, dashed: true,
        points: [...s.steps.entries()].sort((a, b) => a[0] - b[0]).map(([step, [sum, n]]) => [step, sum / n]),
      }));
    }

    // The alarms (one marker per run and step, coloured by its most severe action) and rollbacks
    // of the runs drawn in a chart, so a collapse on the curve is seen next to what the run did.
    healthMarks(series) {
      const shown = new Set(series.map((s) => s.run));
      const many = this.catalog.runs.length > 1;
      const alarms = new Map(), rollbacks = [];
      for (const run of this.catalog.runs) {
        if (!shown.has(run.id) || !run.health) continue;
        const prefix = many ? run.name + ": " : "";
        for (const a of run.health.alarms) {
          const key = `${run.id}|${a.step}`;
          if (!alarms.has(key)) alarms.set(key, { step: a.step, action: a.action, entries: [], lines: [] });
          const mark = alarms.get(key);
          if (R.ACTION_RANK[a.action] > R.ACTION_RANK[mark.action]) mark.action = a.action;
          mark.entries.push([a.kind, a.action]);
          mark.lines.push(prefix + a.line + (a.hint ? `\n  ${a.hint}` : ""));
        }
        for (const r of run.health.rollbacks) rollbacks.push({ from: r.from_step, to: r.to_step, line: prefix + r.line });
      }
      return { alarms: [...alarms.values()], rollbacks: rollbacks };
    }

    render() {
      const specs = [
        { title: "Success rate", unit: true,
          series: this.metricSeries((k) => SUCCESS.test(k)).concat(this.videoSeries("success")) },
        { title: "Return", series: this.metricSeries((k) => RETURN.test(k)).concat(this.videoSeries("return")) },
      ];
      if (this.extra.value) specs.push({ title: this.extra.value, series: this.metricSeries((k) => k === this.extra.value, { all: true }) });
      $("charts").replaceChildren(...specs.map((spec) => this.chart(spec)));
    }

    chart(spec) {
      const series = spec.series.filter((s) => s.points.length);
      const box = el("figure", { className: "chart" }, [el("figcaption", { textContent: spec.title })]);
      if (!series.length) {
        box.append(el("p", { className: "muted", textContent: "No data yet (metrics.jsonl or recorded episodes)." }));
        return box;
      }
      const all = series.flatMap((s) => s.points);
      const marks = this.healthMarks(series);
      const markSteps = marks.alarms.map((a) => a.step).concat(marks.rollbacks.flatMap((r) => [r.from, r.to]));
      const steps = all.map((p) => p[0]).concat(markSteps);
      let [x0, x1] = [Math.min(...steps), Math.max(...steps)];
      let [y0, y1] = [Math.min(...all.map((p) => p[1])), Math.max(...all.map((p) => p[1]))];
      if (spec.unit && y0 >= 0 && y1 <= 1) [y0, y1] = [0, 1];
      if (x0 === x1) [x0, x1] = [x0 - 1, x1 + 1];
      if (y0 === y1) [y0, y1] = [y0 - 1, y1 + 1];
      const sx = (x) => M.l + (x - x0) / (x1 - x0) * (W - M.l - M.r);
      const sy = (y) => H - M.b - (y - y0) / (y1 - y0) * (H - M.t - M.b);
      const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "plot", role: "img", "aria-label": spec.title });
      for (const t of niceTicks(y0, y1, 5)) {
        root.append(svg("line", { x1: M.l, x2: W - M.r, y1: sy(t), y2: sy(t), class: "grid" }));
        const label = svg("text", { x: M.l - 6, y: sy(t) + 4, "text-anchor": "end", class: "tick" });
        label.textContent = R.num(t, 2);
        root.append(label);
      }
      for (const t of niceTicks(x0, x1, 8).filter((t) => Number.isInteger(t))) {
        const label = svg("text", { x: sx(t), y: H - M.b + 16, "text-anchor": "middle", class: "tick" });
        label.textContent = String(t);
        root.append(label);
      }
      const axis = svg("text", { x: W - M.r, y: H - 4, "text-anchor": "end", class: "tick" });
      axis.textContent = "global step";
      root.append(axis);
      root.append(...this.drawHealth(marks, sx));
      const legend = el("div", { className: "legend" });
      series.forEach((s, i) => {
        const color = COLORS[i % COLORS.length];
        const path = s.points.map((p, j) => `${j ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join("");
        root.append(svg("path", { d: path, stroke: color, class: "line" + (s.dashed ? " dashed" : "") }));
        for (const [x, y] of s.points) {
          const ci = s.interval && s.interval.get(x);
          if (ci) {  // error bar: the 95 % interval of this evaluation's success rate
            const [cx, ylo, yhi] = [sx(x), sy(Math.max(ci[0], y0)), sy(Math.min(ci[1], y1))];
            root.append(svg("path", { d: `M${cx - 4},${ylo}H${cx + 4}M${cx},${ylo}V${yhi}M${cx - 4},${yhi}H${cx + 4}`,
                                      stroke: color, class: "ci" }));
          }
          const dot = svg("circle", { cx: sx(x), cy: sy(y), r: 3.5, fill: color, class: "point" });
          const tip = svg("title");
          const detail = ci ? ` (95 % CI ${R.num(ci[0], 3)}-${R.num(ci[1], 3)}${ci[2] ? `, ${ci[2]} episodes` : ""})` : "";
          tip.textContent = `${s.label}\nstep ${x}: ${R.num(y, 4)}${detail}\n(click: list this step's episodes)`;
          dot.append(tip);
          dot.addEventListener("click", () => { this.app.setView("episodes"); this.app.episodes.showStep(s.run, x, s.mode); });
          root.append(dot);
        }
        const swatch = el("span", { className: "swatch" });
        swatch.style.background = color;
        legend.append(el("span", { className: "legend-item" }, [swatch, s.interval ? `${s.label} (bars: 95 % CI)` : s.label]));
      });
      legend.append(...this.healthLegend(marks));
      box.append(root, legend);
      return box;
    }

    // Drawn under the curves: a rollback as a band over the abandoned steps with an arrow from
    // the step it left back to the step it resumed from; an alarm as a vertical line. Each
    // carries its lines as a tooltip (a wide transparent stroke makes the thin line hoverable).
    drawHealth(marks, sx) {
      const [top, bottom] = [M.t, H - M.b];
      const out = [];
      marks.rollbacks.forEach((r, i) => {
        const [a, b] = [sx(r.to), sx(r.from)], y = top + 6 + 7 * (i % 4);
        const g = svg("g", { class: "health-rollback", "data-from": r.from, "data-to": r.to });
        g.append(svg("rect", { x: a, y: top, width: Math.max(b - a, 1), height: bottom - top, class: "band" }),
                 svg("path", { d: `M${b},${y}H${a}M${a + 6},${y - 4}L${a},${y}L${a + 6},${y + 4}`, class: "arrow" }),
                 svg("title"));
        g.lastChild.textContent = r.line;
        out.push(g);
      });
      for (const m of marks.alarms) {
        const x = sx(m.step);
        const g = svg("g", { class: "health-alarm", "data-step": m.step, "data-action": m.action, "data-kinds": m.entries.map((e) => e[0]).join(" ") });
        g.append(svg("line", { x1: x, x2: x, y1: top, y2: bottom, stroke: R.ACTION_COLORS[m.action], class: "mark" }),
                 svg("line", { x1: x, x2: x, y1: top, y2: bottom, class: "hit" }), svg("title"));
        g.lastChild.textContent = m.lines.join("\n");
        out.push(g);
      }
      return out;
    }

    // One legend entry per alarm kind and action, and one for rollbacks.
    healthLegend(marks) {
      const seen = new Map();
      for (const m of marks.alarms) for (const [kind, action] of m.entries) seen.set(`${kind} (${action})`, action);
      const items = [...seen.entries()].map(([text, action]) => {
        const swatch = el("span", { className: "swatch mark" });
        swatch.style.background = R.ACTION_COLORS[action];
        return el("span", { className: "legend-item health", dataset: { action: action } }, [swatch, "alarm: " + text]);
      });
      if (marks.rollbacks.length) {
        items.push(el("span", { className: "legend-item health rollback" },
                      [el("span", { className: "swatch band" }), "rolled back (band: the steps repeated, arrow: back to)"]));
      }
      return items;
    }
  };
})(window.Review);
