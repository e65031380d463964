"""Where a session's judging runs, as `dit-ar init` records it in session.json (agents never choose it).

`local` judges in the session's own process on this machine (the default). `ray` judges in a slot of a Ray
cluster (`dit-ar init --executor ray --address ADDRESS --slot NAME`; fleet/): the session's device is then
the slot's, recorded at init, and its driver never starts a worker itself.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

KINDS = ("local", "ray")
SLOT_DEVICE = "slot:"  # the device a fleet session's driver sees: its workers run only in the named slot


@dataclass(frozen=True)
class ExecutorChoice:
    kind: str = "local"
    address: str = ""  # the Ray cluster's address as given to `init` ("auto": the running cluster found here)
    slot: str = ""  # the slot (a Ray placement group of whole GPUs of one node) the session is bound to
    fleet: str = ""  # the fleet's name: the namespace of its slots, judges and replicas

    @property
    def remote(self) -> bool:
        return self.kind != "local"

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> ExecutorChoice:
        if not isinstance(data, dict):
            return cls()
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: str(v) for k, v in data.items() if k in known})
