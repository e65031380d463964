"""Frozen corpora: JSONL of prompt + seed cases, verified against corpus/checksums.json."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from pathlib import Path

from dit_ar_contract.digest import sha256_file
from dit_ar_contract.errors import Refused

CHECKSUMS = "checksums.json"
ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")


@dataclass(frozen=True)
class Case:
    id: str
    prompt: str
    seed: int
    label: int | None = None

    @property
    def request(self) -> tuple[str, int]:
        return (self.prompt, self.seed)

    def keyed_request(self, key: str) -> tuple[str, int]:
        """The request with the seed keyed by a session secret (no key: the seed as written)."""
        return (self.prompt, keyed_seed(self.seed, key))


def keyed_seed(seed: int, key: str) -> int:
    """A 31-bit seed derived from the corpus seed and a secret, indistinguishable from a fresh random seed."""
    if not key:
        return seed
    return int.from_bytes(hashlib.sha256(f"{key}:{seed}".encode()).digest()[:4], "big") >> 1


def replica_seed(seed: int, replica: int) -> int:
    """The corpus seed of a case's `replica`-th replica: a fixed 31-bit seed derived from the case's own."""
    return int.from_bytes(hashlib.sha256(f"replica:{replica}:{seed}".encode()).digest()[:4], "big") >> 1


def purpose_key(key: str, purpose: str) -> str:
    """A key of its own for `purpose`, derived from the session's secret (HMAC-SHA256): requests keyed by it share
    nothing a worker could learn from requests keyed by the secret itself (the corpus, the holdout, the replicas)."""
    return hmac.new(key.encode(), purpose.encode(), hashlib.sha256).hexdigest()


def fresh_seed(seed: int, index: int) -> int:
    """The corpus seed of a case's `index`-th fresh case: a fixed 31-bit seed derived from the case's own, apart
    from its replicas' (`replica_seed`)."""
    return int.from_bytes(hashlib.sha256(f"fresh:{index}:{seed}".encode()).digest()[:4], "big") >> 1


def fresh_cases(cases: list[Case], count: int) -> list[Case]:
    """`count` cases no candidate saw: the corpus cases again (same prompt and label) under derived seeds, ids
    `<case id>-c<k>`, fresh case 1 of every case first. Their requests are keyed by a key of their own
    (`purpose_key`), never by the session's secret, so their seeds are none of the corpus's, holdout's or
    replicas'."""
    out: list[Case] = []
    index = 1
    while len(out) < count and cases:
        out += [Case(f"{c.id}-c{index}", c.prompt, fresh_seed(c.seed, index), c.label) for c in cases]
        index += 1
    return out[:count]


def replicas(cases: list[Case], count: int) -> list[Case]:
    """`count` further frozen cases: the corpus cases again (same prompt and label) under derived seeds, replica 1
    of every case first, then replica 2, ...; ids `<case id>-r<k>`. Their requests are keyed like the corpus's."""
    out: list[Case] = []
    replica = 1
    while len(out) < count and cases:
        out += [Case(f"{c.id}-r{replica}", c.prompt, replica_seed(c.seed, replica), c.label) for c in cases]
        replica += 1
    return out[:count]


def verify_checksum(path: Path) -> str:
    """Return the corpus file's sha256, refusing when it differs from the recorded checksum."""
    sums_path = path.parent / CHECKSUMS
    if not sums_path.is_file():
        raise Refused(f"{sums_path} is missing: every corpus needs a recorded sha256 "
                      "(run quality_suite/corpus/make_checksums.py once, then commit it)")
    sums = json.loads(sums_path.read_text())
    actual = sha256_file(path)
    if sums.get(path.name) != actual:
        raise Refused(f"corpus {path} does not match its checksum in {sums_path} "
                      f"(recorded {sums.get(path.name)!r}, found {actual}); a frozen corpus must not change",
                      way_out=f"put it back as committed (`git checkout -- {path.parent.name}/{path.name}`); a corpus "
                      "changed on purpose needs its checksum refreshed, then a new session (`dit-ar init --tag NEW`)")
    return actual


def load_corpus(path: Path) -> list[Case]:
    """Read and check a corpus: unique readable ids, a prompt and an integer seed on every line."""
    verify_checksum(path)
    cases, seen = [], set()
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            case = Case(id=obj["id"], prompt=obj["prompt"], seed=int(obj["seed"]), label=obj.get("label"))
        except (ValueError, KeyError, TypeError) as exc:
            raise Refused(f"{path}:{n}: expected a JSON object with id, prompt and seed ({exc})") from None
        if not ID_PATTERN.fullmatch(case.id) or case.id in seen:
            raise Refused(f"{path}:{n}: case id {case.id!r} must be unique and match {ID_PATTERN.pattern}")
        seen.add(case.id)
        cases.append(case)
    if not cases:
        raise Refused(f"{path} holds no cases: write one JSON object a line, with id, prompt and seed")
    return cases


def batches(cases: list[Case], size: int) -> list[list[Case]]:
    return [cases[i:i + size] for i in range(0, len(cases), size)]
