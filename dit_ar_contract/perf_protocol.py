"""The performance protocol of a lane (the `performance` section of config/autoresearch.json): how a candidate is
timed against the best (docs/design/speed-verdict.md). Read and checked by dit_ar_contract/config.py."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PerfProtocol:
    """How candidate and best are timed against each other (loop.speed.measurement, perf_suite.sequential).

    `pairs` = 1: a segment is one fresh pair of workers timed for `rounds` paired rounds after
    `warmup_rounds`; the sequential test looks after every segment, keeps from `min_segments` on and stops
    at `max_segments`. `pairs` = m > 1: m pairs started before timing, rounds dealt round-robin, a look
    every `look_every_rounds` rounds per pair from `first_look_rounds` on, up to `rounds` per pair.
    `offset_bound_pct` is the prior bound B on the between-process sd alone (null: the default of the
    lane's kind, perf_suite.sequential.DEFAULT_BOUND_PCT); a calibration profile or the session's pooled
    spread (`bound_confidence`, from `bound_min_df` degrees of freedom on) replaces it.
    """

    warmup_rounds: int = 2
    rounds: int = 12
    min_segments: int = 2
    max_segments: int = 8
    min_improvement_pct: float = 2.0
    alpha: float = 0.01
    offset_bound_pct: float | None = None
    bound_confidence: float = 0.9
    bound_min_df: int = 7
    spending_gamma: float = 1.0
    futility_z: float = 2.0
    futility_target_pct: float = 2.0  # "not faster" when the optimistic bound is below this
    futility_power: float = 0.05  # "not faster" when a keep at the last look is less likely than this under
    # the current estimate (conditional power; 0: off)
    futility_from: float = 0.3  # ... from this information fraction on (rounds so far / rounds at the last look)
    pairs: int = 1
    first_look_rounds: int = 4
    look_every_rounds: int = 2
    overlap_startup: bool = False  # start the next segment's workers (fixed prelude only) during a segment
    round_timeout_s: float = 600.0
    threads: int = 2
    cpu_affinity: tuple[int, ...] | None = None
    revalidate_every: int = 5  # `dit-ar experiment` re-validates the best after this many keeps (0: never)
    # warm-up until steady (perf_suite.warmup): warmup_rounds at least, the last warmup_window rounds within
    # warmup_steady_pct of each other or no faster than before them, warmup_max_rounds at most
    warmup_window: int = 3
    warmup_steady_pct: float = 10.0
    warmup_max_rounds: int = 8
    # the candidate's quality-run generates count toward its first warm-up, and a candidate whose corpus outputs
    # are the best's bit for bit gets the best's stored judging, and a new tree's compile cache starts as the harness's
    # copy of the best's (docs/design/speed-verdict.md, "Phases and reuse"; sandbox-and-security.md, "Compile caches")
    reuse: bool = True
    # compile caches per tree (worker/compile_cache.py): total size kept, and how many recent trees are never evicted
    compile_cache_gb: float = 20.0
    compile_cache_keep: int = 4
    fork_server: bool = True  # pairs after the quality run's are forked from each side's fork servers
    warm_servers: bool | None = None  # fork servers kept from the last experiment fork the quality pair
    # (worker/warm.py); None: on for CUDA lanes (a cold prelude costs 10-20 s there), off on CPU lanes
    warm_timing_servers: bool | None = None  # the keeper also pre-starts the timing's fork servers (None: on CUDA
    # lanes, where a server's prelude takes 15-29 s; off on CPU lanes, where it would share the few cores)
    warm_servers_early: bool | None = None  # the next experiment's keeper starts once this one has adopted its
    # servers, beside the quality run, and the timing waits for its servers' hello (None: on CUDA lanes)
    quality_gaps: bool = True  # the quality run's requests paced like the timed rounds' (sandbox-and-security.md)
    fork_servers_per_side: int | None = None  # exec'd fork servers per side (None: 2 on CUDA lanes, 1 on CPU)
    pair_cores: str = "auto"  # "one": both workers of a timed pair on one core; "affinity": cpu_affinity as is;
    # "auto": "one" on CUDA lanes (H200: pair spread 3.4% vs 9-12% on two cores), "affinity" on CPU lanes
    time_quality_pair: str = "auto"  # "yes": the quality run's workers time segment 1; "no": every pair is fresh;
    # "auto": "no" on CUDA lanes (there it timed slower than fresh forks: lab/notebook/gpu-ladder.md)
    # `dit-ar calibrate`: A/A pairs and rounds per pair (None: `rounds`); B is a chi-square bound over the pairs,
    # and each pair's round noise leaks into it, so longer pairs give a smaller B (lab/notebook/eager-power.md)
    calibration_pairs: int = 8
    calibration_rounds: int | None = None
    worker_log_mb: float = 4.0  # what one worker may write into its log; the rest is dropped (worker/log_relay.py)
    role_check_fraction: float = 0.1  # experiments that also time the best against itself, side-blind (a drawn share)

    def fork_servers(self, is_cuda: bool) -> int:
        """Fork servers per side: two on CUDA lanes (two layouts; imports beside the quality run), one on CPU
        lanes (a prelude competes with the quality run for the same few cores)."""
        return self.fork_servers_per_side or (2 if is_cuda else 1)

    def uses_warm_servers(self, is_cuda: bool) -> bool:
        """Whether a keeper starts the next experiment's fork servers (`warm_servers`; None: on CUDA lanes)."""
        on = self.warm_servers if self.warm_servers is not None else is_cuda
        return on and self.fork_server

    def uses_warm_timing_servers(self, is_cuda: bool) -> bool:
        """Whether the keeper also starts the timing's fork servers (`warm_timing_servers`; None: on CUDA lanes)."""
        on = self.warm_timing_servers if self.warm_timing_servers is not None else is_cuda
        return on and self.uses_warm_servers(is_cuda)

    def starts_next_servers_early(self, is_cuda: bool) -> bool:
        """Whether the next experiment's keeper starts beside this one's quality run (`warm_servers_early`; None:
        on CUDA lanes, where a host's spare cores take its imports; off on CPU lanes, where they would slow the run)."""
        on = self.warm_servers_early if self.warm_servers_early is not None else is_cuda
        return on and self.uses_warm_servers(is_cuda)

    def times_quality_pair(self, is_cuda: bool) -> bool:
        """Whether the quality run's two workers time the first segment (else every timed pair is fresh)."""
        return self.time_quality_pair == "yes" or (self.time_quality_pair == "auto" and not is_cuda)


PAIR_CORES = ("auto", "one", "affinity")
TIME_QUALITY_PAIR = ("auto", "yes", "no")
