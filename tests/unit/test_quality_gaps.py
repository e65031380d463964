"""The quality run's requests come with the timed rounds' gaps (docs/design/sandbox-and-security.md, the clock gap):
a worker
frozen between requests sees, in its own clock, pairs of requests one right after the other and then a wait
of about two of the other side's rounds, in the corpus run as in balanced timed rounds."""

from __future__ import annotations

import itertools
import random
import time

import torch

from pytest_dit_ar.loop.quality import generation
from quality_suite.corpora import Case


def test_the_gaps_alternate_like_balanced_rounds() -> None:
    gaps = list(itertools.islice(generation.timed_like_gaps(0.3, random.Random(1)), 8))
    assert gaps[0::2] == [0.0] * 4
    assert all(0.54 <= g <= 0.66 for g in gaps[1::2])  # 2 x 0.3 s, jittered by 10%
    assert max(itertools.islice(generation.timed_like_gaps(5.0), 4)) == generation.MAX_GAP_S
    assert set(itertools.islice(generation.timed_like_gaps(None), 4)) == {0.0}  # no best timed yet


class _Worker:
    """Records when each request arrives (the worker's view of the gaps)."""

    def __init__(self) -> None:
        self.arrivals: list[float] = []

    def generate(self, requests, perturb, resolution):  # noqa: ANN001 - the worker client's signature
        self.arrivals.append(time.monotonic())
        n = len(requests)

        class Got:
            images = torch.zeros(n, 3, 4, 4)
            latents = torch.zeros(n, 1, 2, 2)
            seconds = 0.0
            rows_per_image = None
            memory: dict = {}
        return Got()


def test_the_corpus_run_waits_before_every_other_request() -> None:
    cases = [Case(id=f"c{i}", prompt="p", seed=i) for i in range(8)]
    worker = _Worker()
    generation.generate_corpus(worker, cases, 2, "key", 4, gaps=generation.timed_like_gaps(0.05))  # type: ignore[arg-type]
    waits = [b - a for a, b in zip(worker.arrivals, worker.arrivals[1:])]
    assert len(waits) == 3 and waits[0] < 0.05 and 0.09 <= waits[1] < 0.5 and waits[2] < 0.05
