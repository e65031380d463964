"""The warm-up rule (perf_suite.warmup): warm until the round time is steady, with a cap."""

from perf_suite.warmup import WarmupRule, steady


def run(rule: WarmupRule, times: list[float]) -> tuple[int, str]:
    """Feed round times one by one as loop.speed.measurement does; how many rounds were spent, and why it stopped."""
    seen: list[float] = []
    for t in times:
        seen.append(t)
        state = rule.state(seen)
        if state != "warming":
            return len(seen), state
    return len(seen), "warming"


def test_a_compile_then_steady_rounds_stops_once_the_window_is_flat():
    rule = WarmupRule(min_rounds=2, window=3, tolerance_pct=5.0, max_rounds=10)
    assert run(rule, [60.0, 0.31, 0.30, 0.305, 0.30, 0.30]) == (4, "steady")


def test_an_eager_worker_is_warm_after_min_rounds_when_flat():
    rule = WarmupRule(min_rounds=2, window=2, tolerance_pct=5.0, max_rounds=10)
    assert run(rule, [0.50, 0.50, 0.50]) == (2, "steady")


def test_gradual_autotuning_waits_until_it_stops_improving():
    rule = WarmupRule(min_rounds=2, window=2, tolerance_pct=5.0, max_rounds=10)
    n, state = run(rule, [1.0, 0.8, 0.6, 0.5, 0.5, 0.5, 0.5])
    assert state == "steady" and n == 5  # 0.6/0.5 still improving at 4; 0.5, 0.5 flat at 5


def test_noisy_but_warm_rounds_stop_when_no_longer_faster():
    rule = WarmupRule(min_rounds=2, window=3, tolerance_pct=5.0, max_rounds=10)
    # spread 40% (never flat), but the last three are no faster than the best before them
    assert run(rule, [0.9, 0.40, 0.70, 0.45, 0.62]) == (5, "steady")


def test_the_cap_ends_a_warm_up_that_keeps_improving():
    rule = WarmupRule(min_rounds=2, window=3, tolerance_pct=1.0, max_rounds=5)
    assert run(rule, [1.0, 0.9, 0.8, 0.7, 0.6, 0.5]) == (5, "capped")


def test_min_rounds_is_respected_even_when_flat():
    rule = WarmupRule(min_rounds=4, window=2, tolerance_pct=5.0, max_rounds=10)
    assert run(rule, [0.5, 0.5, 0.5, 0.5, 0.5]) == (4, "steady")


def test_zero_rounds_allowed_by_a_cap_of_zero():
    assert WarmupRule(min_rounds=0, window=3, max_rounds=0).state([]) == "capped"


def test_steady_needs_a_full_window():
    assert not steady([0.5, 0.5], 3, 5.0)
    assert steady([0.5, 0.5, 0.51], 3, 5.0)
    assert not steady([2.0, 1.0, 0.5], 3, 5.0)


# -- a worker that already generated (the candidate's quality run) brings its times as history --------------------

def test_history_of_steady_generates_needs_one_new_round_only():
    rule = WarmupRule(min_rounds=2, window=3, tolerance_pct=10.0, max_rounds=8)
    history = [0.30, 0.31, 0.30]
    assert rule.state_after(history, []) == "warming"  # never zero new rounds: the worker must run after the corpus
    assert rule.state_after(history, [0.305]) == "steady"


def test_history_that_is_still_getting_faster_does_not_end_the_warm_up():
    rule = WarmupRule(min_rounds=2, window=3, tolerance_pct=5.0, max_rounds=8)
    history = [0.9, 0.7, 0.5]
    assert rule.state_after(history, [0.40]) == "warming"
    assert rule.state_after(history, [0.40, 0.30]) == "warming"
    assert rule.state_after(history, [0.40, 0.30, 0.30, 0.30]) == "steady"


def test_the_cap_counts_new_rounds_only_and_no_history_is_the_plain_rule():
    rule = WarmupRule(min_rounds=2, window=2, tolerance_pct=1.0, max_rounds=3)
    history = [float(x) for x in range(20, 0, -1)]  # long and still improving
    assert rule.state_after(history, [0.9, 0.8]) == "warming"
    assert rule.state_after(history, [0.9, 0.8, 0.7]) == "capped"
    for times in ([], [1.0], [1.0, 1.0], [5.0, 1.0, 1.0]):
        assert rule.state_after([], times) == rule.state(times)
