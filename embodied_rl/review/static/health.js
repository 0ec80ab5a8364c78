// Each run's health above the views: its status (clean / warned / rolled back / stopped / no
// health record), the line of every alarm, rollback and stop, and the best checkpoint.
"use strict";
(function (R) {
  const el = R.el;
  const OPEN_UP_TO = 5;  // more lines than this start folded: a long run's warnings would push the page down

  // Colours and severity by alarm action, shared with the chart markers.
  R.ACTION_COLORS = { warn: "#b58100", rollback: "#d35400", stop: "#c0262d" };
  R.ACTION_RANK = { warn: 1, rollback: 2, stop: 3 };

  function bestText(best) {
    if (!best) return null;
    const success = best.success == null ? "" : `, success ${R.num(best.success, 3)}`;
    return `best checkpoint: step ${best.step}${success}` + (best.checkpoint ? ` (${best.checkpoint})` : "");
  }

  function reasonItem(health, line) {
    // An alarm's hint (what usually helps) is its tooltip, so the line itself stays one line.
    const alarm = health.alarms.find((a) => a.line === line);
    const item = el("li", { textContent: line });
    if (alarm) {
      item.dataset.action = alarm.action;
      if (alarm.hint) item.title = alarm.hint;
    }
    return item;
  }

  function runHealth(run) {
    const h = run.health;
    const head = [el("span", { className: "health-name", textContent: run.name }),
                  el("span", { className: "health-status", textContent: h.status })];
    const best = bestText(h.best);
    if (best) head.push(el("span", { className: "health-best", textContent: best }));
    const item = el("li", { className: "health-run", dataset: { run: run.id, status: h.status } },
                    [el("div", { className: "health-head" }, head)]);
    if (h.reasons.length) {
      const list = el("ul", { className: "health-reasons" }, h.reasons.map((line) => reasonItem(h, line)));
      const n = h.reasons.length;
      item.append(el("details", { open: n <= OPEN_UP_TO },
                     [el("summary", { textContent: `${n} health event${n === 1 ? "" : "s"}` }), list]));
    }
    return item;
  }

  R.renderHealth = function (catalog, node) {
    const runs = catalog.runs.filter((r) => r.health);  // a catalog from before health records has none
    node.replaceChildren(...runs.map(runHealth));
    node.hidden = runs.length === 0;
  };
})(window.Review);
