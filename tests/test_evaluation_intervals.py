"""Success-rate intervals and the paired test, checked against scipy's implementations."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest

from embodied_rl.evaluation.intervals import (
    add_success_intervals,
    format_rate,
    mcnemar_exact,
    wilson_interval,
)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 500), data=st.data(), confidence=st.sampled_from([0.8, 0.9, 0.95, 0.99]))
def test_wilson_interval_equals_scipy(n: int, data, confidence: float) -> None:
    k = data.draw(st.integers(0, n))
    ref = binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    assert wilson_interval(k, n, confidence) == pytest.approx((ref.low, ref.high), abs=1e-12)


def test_wilson_interval_known_values_and_edges() -> None:
    # 10 of 32 (the main job's scale): 0.1795 .. 0.4857
    assert wilson_interval(10, 32) == pytest.approx((0.179525, 0.485667), abs=1e-6)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == 1.0
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError, match="successes must be in"):
        wilson_interval(3, 2)


@settings(max_examples=200, deadline=None)
@given(only_a=st.integers(0, 60), only_b=st.integers(0, 60))
def test_mcnemar_exact_equals_scipy_binomial_test(only_a: int, only_b: int) -> None:
    expected = 1.0 if only_a + only_b == 0 else binomtest(only_a, only_a + only_b, 0.5).pvalue
    assert mcnemar_exact(only_a, only_b) == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_mcnemar_known_value() -> None:
    # 0 vs 7 discordant pairs: 2 * 0.5^7
    assert mcnemar_exact(0, 7) == pytest.approx(0.015625)


def test_eval_metrics_get_intervals_per_rate_and_task() -> None:
    metrics = {"eval/success_once": 10 / 32, "eval/num_trajectories": 32.0, "eval/success_at_end": 0.25,
               "eval/success_once/PushCube-v1": 10 / 32, "eval/num_trajectories/PushCube-v1": 32.0, "eval/return": 7.0}
    out = add_success_intervals(metrics, "eval")
    low, high = wilson_interval(10, 32)
    assert out["eval/success_once_ci95_low"] == low and out["eval/success_once_ci95_high"] == high
    assert out["eval/success_once_ci95_low/PushCube-v1"] == low
    assert (out["eval/success_at_end_ci95_low"], out["eval/success_at_end_ci95_high"]) == wilson_interval(8, 32)
    assert "eval/return_ci95_low" not in out and metrics.items() <= out.items()


def test_format_rate() -> None:
    assert format_rate(10, 32) == "0.312 [0.180, 0.486] (10/32)"
    assert format_rate(0, 0) == "n/a (0 episodes)"
