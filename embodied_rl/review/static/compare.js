// Side-by-side compare: two episodes of the same task from two steps (or runs), played together.
"use strict";
(function (R) {
  const el = R.el;
  const $ = (id) => document.getElementById(id);
  const keyOf = (row) => `${row.video.run}|${row.video.mode}|${row.video.global_step}`;

  R.Compare = class {
    constructor(app) {
      this.app = app;
      this.rows = [];
      this.task = $("c-task");
      this.note = $("c-note");
      this.task.addEventListener("input", () => this.pickDefaults(null));
      $("c-play").addEventListener("click", () => this.playBoth());
      this.sides = ["c-left", "c-right"].map((id) => {
        const box = $(id);
        const side = { step: el("select"), episode: el("select") };
        box.append(el("div", { className: "compare-pick" }, [
          el("label", {}, ["Step ", side.step]), el("label", {}, ["Episode ", side.episode])]));
        side.player = new R.Player(box, (video, ep) => this.setEpisode(side, ep.id));
        side.player.listed = (ep) => !R.isStub(ep);
        side.step.addEventListener("input", () => { this.fillEpisodes(side, null); this.showSide(side); });
        side.episode.addEventListener("input", () => this.showSide(side));
        return side;
      });
    }

    setCatalog(catalog) {
      this.catalog = catalog;
      // Cut-at-start episodes show no action: nothing to compare.
      this.rows = R.rowsOf(catalog).filter((r) => r.ep && r.ep.task_id && !R.isStub(r.ep));
      const tasks = [...new Set(this.rows.map((r) => r.ep.task_id))].sort();
      R.fillSelect(this.task, tasks.map((t) => [t, t]), true);
      this.pickDefaults(null);
    }

    groups() {
      const rows = this.rows.filter((r) => r.ep.task_id === this.task.value);
      const byKey = new Map();
      for (const row of rows) {
        if (!byKey.has(keyOf(row))) byKey.set(keyOf(row), []);
        byKey.get(keyOf(row)).push(row);
      }
      return [...byKey.entries()].sort((a, b) => {
        const [x, y] = [a[1][0].video, b[1][0].video];
        return x.run.localeCompare(y.run) || x.mode.localeCompare(y.mode) || x.global_step - y.global_step;
      });
    }

    // Left: `row` (or the earliest step); right: the latest other step of the same run and mode.
    pickDefaults(row) {
      const groups = this.groups();
      const options = groups.map(([key, rows]) => {
        const v = rows[0].video;
        const run = this.catalog.runs.length > 1 ? `${v.run_name} · ` : "";
        return [key, `${run}${v.mode} · step ${v.global_step} (${rows.length} ep.)`];
      });
      for (const side of this.sides) R.fillSelect(side.step, options, false);
      if (!groups.length) { this.note.textContent = "No episodes with task data to compare."; return; }
      const leftKey = row ? keyOf(row) : groups[0][0];
      const same = (k) => k.split("|").slice(0, 2).join("|") === leftKey.split("|").slice(0, 2).join("|");
      const others = groups.map(([k]) => k).filter((k) => k !== leftKey);
      const rightKey = others.filter(same).pop() || others.pop() || leftKey;
      this.note.textContent = rightKey === leftKey ? "Only one step recorded for this task: comparing two of its episodes." : "";
      this.sides[0].step.value = leftKey;
      this.sides[1].step.value = rightKey;
      this.fillEpisodes(this.sides[0], row ? row.id : null);
      const rightRows = groups.find(([k]) => k === rightKey)[1];
      const alt = rightKey === leftKey && rightRows.length > 1 ? rightRows.find((r) => r.id !== this.sides[0].episode.value) : null;
      this.fillEpisodes(this.sides[1], alt ? alt.id : null);
      for (const side of this.sides) this.showSide(side);
    }

    fillEpisodes(side, wantedId) {
      const group = this.groups().find(([k]) => k === side.step.value);
      const rows = group ? group[1] : [];
      R.fillSelect(side.episode, rows.map((r) => [r.id,
        `env ${r.ep.env_index} · reset ${r.ep.reset_id ?? "?"} · ${R.outcomeLabel[R.outcome(r.ep)]} · return ${R.num(r.ep.return)}`]), false);
      if (wantedId && rows.some((r) => r.id === wantedId)) side.episode.value = wantedId;
    }

    setEpisode(side, id) {
      side.episode.value = id;
      this.showSide(side, true);
    }

    showSide(side, autoplay) {
      const row = this.rows.find((r) => r.id === side.episode.value);
      if (row) side.player.show(row.video, row.ep, !!autoplay);
    }

    open(row) {
      this.app.setView("compare");
      if (row && row.ep && row.ep.task_id) {
        this.task.value = row.ep.task_id;
        this.pickDefaults(row);
      }
    }

    playBoth() {
      for (const side of this.sides) { side.player.pause(); side.player.seekStart(); }
      for (const side of this.sides) side.player.play();
    }
  };
})(window.Review);
