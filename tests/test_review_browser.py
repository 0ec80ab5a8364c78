"""Review page in real headless Chromium (Debian's), served by the real CLI process, plus the
static export opened from file://."""
from __future__ import annotations

from pathlib import Path

import pytest

from embodied_rl.evaluation.intervals import wilson_interval
from tests.browser_support import (
    launch_chromium,
    make_clean_run,
    make_fixture_run,
    make_health_run,
    make_scored_run,
    start_cli_server,
    stop,
)

pytestmark = pytest.mark.browser

# The fixture: 3 recorded videos x 3 episodes + 2 videos whose sidecar is missing/corrupt.
# Per video: env 0 episode 1 (success at steps 2, failure at step 1), env 0 episode 2 (cut off
# by the video end: unfinished), env 1 (failure). Plus, at train step 2, a video like every
# default training run's: 2 failures that auto-reset at the last chunk boundary and 2 stubs the
# rollout end cut before their first action (hidden until asked for).
EPISODES, FAILURES, SUCCESSES, STUBS = 11, 6, 2, 2
AUTO_RESET_VIDEO = "train/step_000002/worker1_stage0"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return make_fixture_run(tmp_path_factory.mktemp("review"))


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        context = launch_chromium(pw, tmp_path_factory.mktemp("chromium-profile"))
        yield context
        context.close()


@pytest.fixture(scope="module")
def server(run_dir):
    proc, url = start_cli_server([run_dir])
    yield url
    stop(proc)


def _open(browser, url: str):
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", timeout=15000)
    return page, errors


def _listed_ids(page) -> list[str]:
    return page.eval_on_selector_all("#episode-table tr.episode", "rows => rows.map(r => r.dataset.id)")


def _outcomes(page) -> list[str]:
    return page.eval_on_selector_all("#episode-table tr.episode", "rows => rows.map(r => r.dataset.outcome)")


def test_page_filters_plays_compares(browser, server, tmp_path):
    page, errors = _open(browser, server)
    assert len(_listed_ids(page)) == EPISODES + 2
    # The videos with a missing / corrupt sidecar are listed with a visible warning.
    warnings = page.locator("#episode-table .warn-row .warning")
    texts = " | ".join(warnings.all_inner_texts())
    assert "no_sidecar.json is missing" in texts and "corrupt_sidecar.json is corrupt JSON" in texts
    assert warnings.first.is_visible()

    page.select_option("#f-outcome", "failure")
    assert _outcomes(page) == ["failure"] * FAILURES
    page.select_option("#f-outcome", "success")
    assert _outcomes(page) == ["success"] * SUCCESSES

    # Playing: click a successful episode; its video starts inside the episode's frame range.
    page.locator("#episode-table tr.episode").first.click()
    video = page.locator("#player-pane video")
    page.wait_for_function("() => { const v = document.querySelector('#player-pane video');"
                           " return v && !v.paused && v.currentTime > 0.3; }", timeout=10000)
    assert "PickCube-v1" in page.locator("#player-pane .info").inner_text()
    assert video.evaluate("v => v.currentTime") <= 0.8 + 0.15  # loops within frames [0, 8) at 10 fps

    # Jump to an episode's frame range: env 0's second episode covers frames [8, 24) at 10 fps.
    page.select_option("#f-outcome", "")
    page.click("#episode-table tr.episode[data-id$='train/step_000001/worker0_stage0#1']")
    page.wait_for_function("() => { const v = document.querySelector('#player-pane video');"
                           " return !v.paused && v.currentTime > 0.9; }", timeout=10000)
    assert 0.8 <= video.evaluate("v => v.currentTime") < 2.4 + 0.15
    assert "frames 8–23" in page.locator("#player-pane .readout").inner_text()

    # The instruction with markup is shown as text, never parsed as HTML.
    page.select_option("#f-outcome", "")
    page.select_option("#f-task", "PushCube-v1")
    page.locator("#episode-table tr.episode").first.click()
    assert "push the cube <b>to</b> the goal" in page.locator("#player-pane .info").inner_text()

    # Compare: two videos of the same task at two steps.
    page.click("#compare-this")
    page.wait_for_selector("#view-compare:not([hidden])")
    assert page.locator("#view-compare video").count() == 2
    left, right = (page.locator(f"#{side} select").first.input_value() for side in ("c-left", "c-right"))
    assert left != right
    page.click("#c-play")
    page.wait_for_function("() => [...document.querySelectorAll('#view-compare video')]"
                           ".every(v => !v.paused && v.currentTime > 0.2)", timeout=10000)
    page.screenshot(path=str(tmp_path / "review_compare.png"), full_page=True)

    # Curves from metrics.jsonl; a click on a point lists that step's episodes.
    page.click("button[data-view='curves']")
    assert page.locator("#charts svg.plot").count() == 2
    assert "env/success_once" in page.locator("#charts .legend").first.inner_text()
    # The evaluation's success rate carries its 95 % interval: an error bar and the tooltip.
    assert page.locator("#charts path.ci").count() == 1
    page.screenshot(path=str(tmp_path / "review_curves.png"), full_page=True)
    tips = page.eval_on_selector_all("#charts circle.point title", "ts => ts.map(t => t.textContent)")
    low, high = wilson_interval(4, 8)
    assert any(t.startswith("eval/success_once\n") and f"(95 % CI {low:.3f}-{high:.3f}, 8 episodes)" in t for t in tips), tips
    page.locator("#charts circle.point").first.dispatch_event("click")  # env/success_once, step 1
    page.wait_for_selector("#view-episodes:not([hidden])")
    steps = page.eval_on_selector_all("#episode-table tr.episode td:nth-child(3)", "tds => tds.map(t => t.textContent)")
    assert steps == ["1", "1", "1"]
    page.click("#f-clear")
    page.screenshot(path=str(tmp_path / "review_episodes.png"), full_page=True)
    # Filters and the selected episode are kept in the URL: a reload (or a shared link) restores them.
    page.select_option("#f-outcome", "failure")
    page.locator("#episode-table tr.episode").nth(1).click()
    selected = page.locator("#episode-table tr.selected").get_attribute("data-id")
    again, errors2 = _open(browser, page.url)
    assert _outcomes(again) == ["failure"] * FAILURES
    assert again.locator("#episode-table tr.selected").get_attribute("data-id") == selected
    assert not errors and not errors2, errors + errors2
    again.close()
    page.close()


def _siblings(page) -> list[str]:
    return page.locator("#player-pane .sibling").all_inner_texts()


def test_cut_at_start_episodes_are_hidden_behind_a_count_and_a_toggle(browser, server, tmp_path):
    page, errors = _open(browser, server)
    note, toggle, stubs = page.locator("#stub-note"), page.locator("#stub-toggle"), page.locator("#episode-table tr.stub")
    # Hidden by default, with a visible count: the run's real episodes are the list.
    assert stubs.count() == 0 and len(_listed_ids(page)) == EPISODES + 2
    assert page.locator("#count").inner_text() == f"{EPISODES + 2} of {EPISODES + 2} rows"
    assert note.is_visible() and toggle.inner_text() == "Show them"
    assert note.inner_text().startswith(f"{STUBS} episodes cut by the rollout end before their first action are hidden")
    assert page.locator("#run-summary").inner_text().endswith(f"{EPISODES} episodes (+{STUBS} cut at start)")
    # The episodes they follow are listed, and the player offers no hidden sibling.
    page.click(f"#episode-table tr.episode[data-id$='{AUTO_RESET_VIDEO}#0']")
    assert len(_siblings(page)) == 2 and not any("cut at start" in s for s in _siblings(page))
    page.screenshot(path=str(tmp_path / "review_stubs_hidden.png"), full_page=True)

    toggle.click()
    assert stubs.count() == STUBS and len(_listed_ids(page)) == EPISODES + 2 + STUBS
    assert page.locator("#count").inner_text() == f"{EPISODES + 2 + STUBS} of {EPISODES + 2 + STUBS} rows"
    assert note.inner_text().startswith(f"Showing {STUBS} episodes") and toggle.inner_text() == "Hide them"
    assert stubs.first.locator("td.result").inner_text() == "… cut at start"
    assert stubs.first.locator("td:nth-child(8)").inner_text() == "0"  # Len: no env step
    assert len(_siblings(page)) == 4
    # Still playable: the player shows the episode's single frame.
    stubs.first.click()
    info = page.locator("#player-pane .info").inner_text()
    assert "cut at start" in info and "9–9 of 10 @ 10 fps" in info
    assert page.locator("#compare-this").is_disabled()  # no action to compare
    page.screenshot(path=str(tmp_path / "review_stubs_shown.png"), full_page=True)
    # The choice is part of the URL, like the filters.
    assert "stubs=1" in page.url
    again, errors2 = _open(browser, page.url)
    assert again.locator("#episode-table tr.stub").count() == STUBS
    again.close()

    # The count follows the filters: none at step 1, so no note there.
    toggle.click()
    assert stubs.count() == 0 and "stubs=1" not in page.url
    page.select_option("#f-outcome", "unfinished")
    assert _outcomes(page) == ["unfinished"] * 3 and note.is_visible()
    page.fill("#f-step-max", "1")
    assert _outcomes(page) == ["unfinished"] and note.is_hidden()
    assert not errors and not errors2, errors + errors2
    page.close()


def test_static_export_from_file_url(browser, server, run_dir, tmp_path):
    from embodied_rl.review.cli import main

    assert main([str(run_dir), "--export", str(tmp_path / "site")]) == 0
    live, _ = _open(browser, server)
    expected = sorted(_listed_ids(live))
    live.close()
    page, errors = _open(browser, (tmp_path / "site" / "index.html").as_uri())
    assert sorted(_listed_ids(page)) == expected
    page.locator("#episode-table tr.episode").first.click()
    page.wait_for_function("() => { const v = document.querySelector('#player-pane video');"
                           " return v && !v.paused && v.currentTime > 0.2; }", timeout=10000)
    page.screenshot(path=str(tmp_path / "review_export.png"), full_page=True)
    assert not errors, errors
    page.close()


def test_scored_evaluations_chart_each_scoring_once_with_its_interval(browser, tmp_path):
    """Greedy and sampled success are two curves (eval/greedy/..., eval/sampled/...), each with
    its error bars; the primary's eval/* copy and the per-task keys (task after the metric) are
    not drawn as further curves. The copy stays selectable as an extra chart."""
    proc, url = start_cli_server([make_scored_run(tmp_path)])
    try:
        page, errors = _open(browser, url)
        page.click("button[data-view='curves']")
        legends = page.locator("#charts .legend").all_inner_texts()
        success = [t for t in legends[0].split("\n") if t.strip()]
        assert success == ["eval/greedy/success_once (bars: 95 % CI)", "eval/sampled/success_once (bars: 95 % CI)"], legends
        assert [t for t in legends[1].split("\n") if t.strip()] == ["eval/greedy/return", "eval/sampled/return"]
        assert page.locator("#charts figure").first.locator("path.ci").count() == 4  # 2 scorings x 2 evaluations
        tips = page.eval_on_selector_all("#charts circle.point title", "ts => ts.map(t => t.textContent)")
        low, high = wilson_interval(4, 8)
        assert any(t.startswith("eval/sampled/success_once\nstep 4: 0.5000 ") and f"(95 % CI {low:.3f}-{high:.3f}, 8 episodes)" in t
                   for t in tips), tips
        page.select_option("#m-extra", "eval/success_once")
        assert page.locator("#charts figure").nth(2).locator("path.ci").count() == 2
        page.screenshot(path=str(tmp_path / "review_scored.png"), full_page=True)
        assert not errors, errors
        page.close()
    finally:
        stop(proc)


def test_health_panel_and_markers_on_the_curves(browser, tmp_path):
    """Three runs in one page: one rolled back after an alarm (with a best checkpoint and a later
    warning), one monitored and clean, one from before the monitors (no health record)."""
    proc, url = start_cli_server([make_health_run(tmp_path), make_clean_run(tmp_path), make_scored_run(tmp_path)])
    try:
        page, errors = _open(browser, url)
        runs = page.locator("#run-health .health-run")
        status = {runs.nth(i).locator(".health-name").inner_text(): runs.nth(i).locator(".health-status").inner_text()
                  for i in range(runs.count())}
        assert status == {"health_exp": "rolled back", "clean_exp": "clean", "scored_exp": "no health record"}
        text = page.locator("#run-health .health-run[data-status='rolled back']").inner_text()
        for line in ("kl_spike at step 1: train/actor/approx_kl = 8.7 > 1 (action: rollback)",
                     "rolled back from step 1 to step 0 (rollback 1); learning rates x0.5 from here",
                     "grad_spike at step 3: train/actor/grad_norm = 41.5 > 20 (action: warn)",
                     "best checkpoint: step 2, success 0.250 (global_step_2)"):
            assert line in text, text

        page.click("button[data-view='curves']")
        success = page.locator("#charts figure").first
        marks = success.locator("g.health-alarm")
        assert [(marks.nth(i).get_attribute("data-step"), marks.nth(i).get_attribute("data-action"),
                 marks.nth(i).get_attribute("data-kinds")) for i in range(marks.count())] == [
            ("1", "rollback", "kl_spike"), ("3", "warn", "grad_spike")]
        assert "health_exp: kl_spike at step 1" in marks.first.locator("title").text_content()
        rollback = success.locator("g.health-rollback")
        assert rollback.count() == 1 and "rolled back from step 1 to step 0" in rollback.locator("title").text_content()
        # The marker sits on the curve's step: the same x as the run's point at step 1.
        x_point = page.eval_on_selector_all(
            "#charts figure:first-child circle.point",
            "cs => cs.find(c => c.textContent.startsWith('health_exp: env/success_once\\nstep 1:')).getAttribute('cx')")
        assert float(marks.first.locator("line.mark").get_attribute("x1")) == pytest.approx(float(x_point), abs=0.1)
        legend = success.locator(".legend").inner_text()
        assert "alarm: kl_spike (rollback)" in legend and "alarm: grad_spike (warn)" in legend and "rolled back" in legend
        page.screenshot(path=str(tmp_path / "review_health.png"), full_page=True)
        assert not errors, errors
        page.close()
    finally:
        stop(proc)
