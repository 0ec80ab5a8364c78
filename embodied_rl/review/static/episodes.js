// The episode list: filters, sorting, the table and the player beside it.
"use strict";
(function (R) {
  const el = R.el;
  const $ = (id) => document.getElementById(id);
  const PAGE = 500;

  R.Episodes = class {
    constructor(app) {
      this.app = app;
      this.rows = [];
      this.visible = [];
      this.selected = null;
      this.showStubs = false;
      this.f = { run: $("f-run"), mode: $("f-mode"), min: $("f-step-min"), max: $("f-step-max"),
        task: $("f-task"), outcome: $("f-outcome"), sort: $("f-sort") };
      for (const input of Object.values(this.f)) input.addEventListener("input", () => this.render());
      $("f-clear").addEventListener("click", () => this.clearFilters());
      $("stub-toggle").addEventListener("click", () => this.setShowStubs(!this.showStubs));
      this.tbody = document.querySelector("#episode-table tbody");
      const pane = $("player-pane");
      this.player = new R.Player(pane, (video, ep) => this.select(this.rows.find((r) => r.ep === ep), true));
      this.player.listed = (ep) => this.showStubs || !R.isStub(ep);
      this.compareBtn = el("button", { type: "button", id: "compare-this", textContent: "Compare with another step",
        onclick: () => this.selected && app.compare.open(this.rows.find((r) => r.id === this.selected)) });
      this.player.root.querySelector(".player-side").prepend(this.compareBtn);
      document.addEventListener("keydown", (e) => this.onKey(e));
    }

    // Filters and the selected episode live in the URL fragment: links and reloads keep them.
    saveHash() {
      const params = new URLSearchParams();
      for (const [key, input] of Object.entries(this.f)) if (input.value) params.set(key, input.value);
      if (this.showStubs) params.set("stubs", "1");
      if (this.selected) params.set("ep", this.selected);
      if (this.app.view !== "episodes") params.set("view", this.app.view);
      history.replaceState(null, "", "#" + params.toString());
    }

    loadHash() {
      const params = new URLSearchParams(location.hash.slice(1));
      for (const [key, input] of Object.entries(this.f)) {
        const value = params.get(key);
        if (value == null) continue;
        // Only accept values the control offers (a select keeps its value otherwise).
        if (input.tagName === "SELECT" && ![...input.options].some((o) => o.value === value)) continue;
        input.value = value;
      }
      this.showStubs = params.get("stubs") === "1";
      return { ep: params.get("ep"), view: params.get("view") };
    }

    setCatalog(catalog) {
      const first = !this.rows.length && !this.loaded;
      this.loaded = true;
      this.rows = R.rowsOf(catalog);
      R.fillSelect(this.f.run, [["", "all runs"]].concat(catalog.runs.map((r) => [r.id, r.name])), true);
      const tasks = [...new Set(this.rows.filter((r) => r.ep && r.ep.task_id).map((r) => r.ep.task_id))].sort();
      R.fillSelect(this.f.task, [["", "all tasks"]].concat(tasks.map((t) => [t, t])), true);
      this.f.run.parentElement.hidden = catalog.runs.length < 2;
      document.getElementById("episode-table").classList.toggle("single-run", catalog.runs.length < 2);
      const wanted = first ? this.loadHash() : {};
      if (wanted.ep) this.selected = wanted.ep;
      // A link to a hidden episode shows the hidden ones rather than an unlisted selection.
      if (wanted.ep && R.isStub((this.rows.find((r) => r.id === wanted.ep) || {}).ep)) this.showStubs = true;
      this.render();
      const still = this.rows.find((r) => r.id === this.selected);
      if (still) this.select(still, false);
      if (wanted.view && wanted.view !== "episodes") this.app.setView(wanted.view);
    }

    setShowStubs(show) {
      this.showStubs = show;
      this.render(true);
      if (this.player.video) this.player.renderInfo();
    }

    clearFilters() {
      for (const key of ["run", "mode", "min", "max", "task", "outcome"]) this.f[key].value = "";
      this.render();
    }

    // Show only `step` (and optionally one run and mode): used by clicks on curve points.
    showStep(runId, step, mode) {
      this.clearFilters();
      if (runId != null && this.rows.some((r) => r.video.run === runId)) this.f.run.value = runId;
      if (mode) this.f.mode.value = mode;
      this.f.min.value = this.f.max.value = String(step);
      this.render();
    }

    matches(row) {
      const f = this.f, v = row.video, ep = row.ep;
      if (f.run.value && v.run !== f.run.value) return false;
      if (f.mode.value && v.mode !== f.mode.value) return false;
      if (f.min.value !== "" && v.global_step < Number(f.min.value)) return false;
      if (f.max.value !== "" && v.global_step > Number(f.max.value)) return false;
      // Rows without episode data have no task or outcome: hidden once either filter is set.
      if (f.task.value && (!ep || ep.task_id !== f.task.value)) return false;
      const outcome = R.outcome(ep);
      if (f.outcome.value === "success" && outcome !== "success") return false;
      if (f.outcome.value === "failure" && outcome !== "failure" && outcome !== "crashed") return false;
      if (f.outcome.value === "unfinished" && outcome !== "unfinished") return false;
      return true;
    }

    sorted(rows) {
      const [key, dir] = this.f.sort.value.split("-");
      const sign = dir === "desc" ? -1 : 1;
      const ret = (r) => (r.ep && Number.isFinite(r.ep.return) ? r.ep.return : null);
      return rows.slice().sort((a, b) => {
        let d = 0;
        if (key === "return") {
          const x = ret(a), y = ret(b);
          d = x === y ? 0 : x === null ? 1 : y === null ? -1 : sign * (x - y); // no data last
        }
        if (d === 0 && key === "step") d = sign * (a.video.global_step - b.video.global_step);
        if (d === 0) d = a.video.global_step - b.video.global_step;
        if (d === 0) d = a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
        return d;
      });
    }

    render(keepLimit) {
      const matching = this.rows.filter((r) => this.matches(r));
      const stubs = matching.filter((r) => R.isStub(r.ep)).length;
      this.visible = this.sorted(this.showStubs ? matching : matching.filter((r) => !R.isStub(r.ep)));
      this.renderStubNote(stubs);
      // Long runs hold tens of thousands of episodes: build the DOM in pages.
      if (!keepLimit) this.limit = PAGE;
      const trs = [];
      for (const row of this.visible.slice(0, this.limit)) {
        const v = row.video, ep = row.ep || {}, outcome = R.outcome(row.ep), stub = R.isStub(row.ep);
        const tr = el("tr", { className: "episode" + (stub ? " stub" : "") + (row.id === this.selected ? " selected" : ""),
          tabIndex: 0, dataset: { id: row.id, outcome: outcome }, onclick: () => this.select(row, true),
          onkeydown: (e) => { if (e.key === "Enter") this.select(row, true); } }, [
          el("td", { className: "col-run", textContent: v.run_name }), el("td", { textContent: v.mode }),
          el("td", { textContent: v.global_step }), el("td", { textContent: ep.task_id || "—", title: ep.instruction || "" }),
          el("td", { textContent: ep.env_index == null ? "—" : (v.env_worker == null ? "" : `w${v.env_worker} `) + `e${ep.env_index}`,
            title: "env worker and env index inside that worker's video" }), el("td", { textContent: ep.reset_id ?? "—" }),
          el("td", { textContent: R.num(ep.return) }), el("td", { textContent: ep.length ?? "—" }),
          el("td", { className: "result " + outcome, textContent: R.resultLabel(row.ep), title: stub ? R.STUB_TITLE : "" }),
        ]);
        trs.push(tr);
        const warnings = R.warningsOf(row);
        if (warnings.length) {
          tr.classList.add("has-warning");
          trs.push(el("tr", { className: "warn-row", dataset: { id: row.id } }, [
            el("td", { colSpan: 9 }, warnings.map((w) => el("div", { className: "warning", textContent: "⚠ " + w }))),
          ]));
        }
      }
      const more = this.visible.length - this.limit;
      if (more > 0) {
        trs.push(el("tr", { className: "more-row" }, [el("td", { colSpan: 9 }, [el("button", {
          type: "button", id: "show-more", textContent: `Show ${Math.min(more, PAGE)} more of ${more}`,
          onclick: () => { this.limit += PAGE; this.render(true); } })])]));
      }
      this.tbody.replaceChildren(...trs);
      $("empty").hidden = this.visible.length > 0;
      const total = this.showStubs ? this.rows.length : this.rows.filter((r) => !R.isStub(r.ep)).length;
      $("count").textContent = `${this.visible.length} of ${total} rows`;
      this.saveHash();
    }

    // The count of hidden (or shown) cut-at-start episodes under the current filters, with the toggle.
    renderStubNote(count) {
      $("stub-note").hidden = count === 0;
      const [what, their, are] = count === 1 ? ["1 episode", "its", "is"] : [`${count} episodes`, "their", "are"];
      const cut = `${what} cut by the rollout end before ${their} first action`;
      $("stub-text").textContent = this.showStubs ? `Showing ${cut} (“… cut at start”).`
        : `${cut} ${are} hidden (an auto-reset at the last chunk boundary; one frame each).`;
      $("stub-text").title = R.STUB_TITLE;
      $("stub-toggle").textContent = this.showStubs ? "Hide them" : "Show them";
    }

    select(row, autoplay) {
      if (!row) return;
      this.selected = row.id;
      for (const tr of this.tbody.querySelectorAll("tr.episode")) tr.classList.toggle("selected", tr.dataset.id === row.id);
      this.compareBtn.disabled = !(row.ep && row.ep.task_id) || R.isStub(row.ep);
      this.player.show(row.video, row.ep, autoplay);
      this.saveHash();
    }

    onKey(e) {
      if (this.app.view !== "episodes" || /^(INPUT|SELECT|TEXTAREA|BUTTON)$/.test(e.target.tagName)) return;
      const i = this.visible.findIndex((r) => r.id === this.selected);
      if (e.key === "j" || e.key === "k") {
        const next = this.visible[Math.min(Math.max(i + (e.key === "j" ? 1 : -1), 0), this.visible.length - 1)];
        if (next && this.visible.indexOf(next) >= this.limit) { this.limit += PAGE; this.render(true); }
        this.select(next, true);
        const tr = this.tbody.querySelector(`tr.selected`);
        if (tr) tr.scrollIntoView({ block: "nearest" });
      } else if (e.key === " ") { e.preventDefault(); this.player.toggle(); }
      else if (e.key === ",") this.player.stepFrame(-1);
      else if (e.key === ".") this.player.stepFrame(1);
    }
  };
})(window.Review);
