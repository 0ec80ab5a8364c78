// Shared helpers. Classic scripts (not ES modules) so the static export works from file://.
// All page text is set through textContent: sidecar strings are never parsed as HTML.
"use strict";
window.Review = window.Review || {};
(function (R) {
  R.el = function (tag, props, children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (key === "dataset") Object.assign(node.dataset, value);
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node[key] = value;
    }
    for (const child of [].concat(children || [])) {
      if (child == null) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  };

  R.svg = function (tag, attrs) {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
    return node;
  };

  R.num = function (value, digits) {
    if (value == null || !Number.isFinite(value)) return "—";
    return Number.isInteger(value) ? String(value) : value.toFixed(digits == null ? 2 : digits);
  };

  // 'success' | 'failure' | 'crashed' (simulator process died: counts as a failure) |
  // 'unfinished' (no success yet when the video ended: not a failure) | 'unknown'
  R.outcome = function (ep) {
    if (!ep) return "unknown";
    if (ep.failed) return "crashed";
    if (ep.success === true) return "success";
    if (ep.finished === false) return "unfinished";
    if (ep.success === false) return "failure";
    return "unknown";
  };

  R.outcomeLabel = { success: "✓ success", failure: "✗ failure", crashed: "⚠ crashed",
    unfinished: "… unfinished", unknown: "? no data" };

  // Episodes an auto-reset started at the rollout's last chunk boundary and the rollout end cut
  // before their first action (one frame, nothing to judge): hidden unless asked for.
  R.isStub = (ep) => !!(ep && ep.stub);
  R.STUB_TITLE = "started by an auto-reset at the rollout's last chunk boundary and cut by the rollout end " +
    "before its first action: the video holds only its first frame";

  R.resultLabel = function (ep) {
    return R.isStub(ep) ? "… cut at start" : R.outcomeLabel[R.outcome(ep)];
  };

  // One row per episode; a video without (valid) episodes still gets one row with its warnings.
  R.rowsOf = function (catalog) {
    const rows = [];
    for (const video of catalog.videos) {
      if (video.episodes.length === 0) rows.push({ id: video.id, video: video, ep: null });
      for (const ep of video.episodes) rows.push({ id: ep.id, video: video, ep: ep });
    }
    return rows;
  };

  R.warningsOf = function (row) {
    return row.video.warnings.concat(row.ep ? row.ep.warnings : []);
  };

  R.runName = function (catalog, runId) {
    const run = catalog.runs.find((r) => r.id === runId);
    return run ? run.name : runId;
  };

  R.fillSelect = function (select, options, keep) {
    const previous = select.value;
    select.replaceChildren(...options.map(([value, label]) => R.el("option", { value: value, textContent: label })));
    if (keep && options.some(([value]) => value === previous)) select.value = previous;
  };
})(window.Review);
