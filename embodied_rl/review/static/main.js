// Page wiring: load the catalog (embedded by the static export, else from the server),
// then hand it to the episode list, the compare view and the charts.
"use strict";
(function (R) {
  const el = R.el;
  const $ = (id) => document.getElementById(id);
  const STATIC = window.REVIEW_DATA != null; // set by data.js in an export

  const app = {
    view: "episodes",
    setView(name) {
      app.view = name;
      for (const tab of document.querySelectorAll("#tabs .tab")) tab.classList.toggle("active", tab.dataset.view === name);
      for (const view of document.querySelectorAll("main .view")) view.hidden = view.id !== "view-" + name;
      if (name !== "episodes") app.episodes.player.pause();
      if (name !== "compare") app.compare.sides.forEach((s) => s.player.pause());
      if (app.catalog) app.episodes.saveHash();
    },
  };

  function status(text) {
    $("status").textContent = text || "";
    $("status").hidden = !text;
  }

  function show(catalog) {
    app.catalog = catalog;
    const all = catalog.videos.flatMap((v) => v.episodes);
    const stubs = all.filter(R.isStub).length;
    const names = catalog.runs.map((r) => r.name).join(", ");
    $("run-summary").textContent = `${names} — ${catalog.videos.length} videos, ${all.length - stubs} episodes` +
      (stubs ? ` (+${stubs} cut at start)` : "") + (STATIC ? " (static export)" : "");
    const warnings = catalog.runs.flatMap((r) => r.warnings.map((w) => `${r.name}: ${w}`));
    $("run-warnings").replaceChildren(...warnings.map((w) => el("li", { textContent: "⚠ " + w })));
    $("run-warnings").hidden = warnings.length === 0;
    R.renderHealth(catalog, $("run-health"));
    app.episodes.setCatalog(catalog);
    app.compare.setCatalog(catalog);
    app.charts.setCatalog(catalog);
    document.body.dataset.ready = "1";
  }

  async function load() {
    if (STATIC) { show(window.REVIEW_DATA); return; }
    status("");
    try {
      const response = await fetch("api/catalog", { cache: "no-store" });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      show(await response.json());
    } catch (err) {
      status(`Could not load the runs from the server (${err.message}). Is 'embodied-rl review' still running?`);
    }
  }

  window.addEventListener("DOMContentLoaded", () => {
    app.episodes = new R.Episodes(app);
    app.compare = new R.Compare(app);
    app.charts = new R.Charts(app);
    for (const tab of document.querySelectorAll("#tabs .tab")) tab.addEventListener("click", () => app.setView(tab.dataset.view));
    $("reload").hidden = STATIC;
    $("reload").addEventListener("click", load);
    load();
  });
  R.app = app;
})(window.Review);
