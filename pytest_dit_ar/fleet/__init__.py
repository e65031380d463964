"""A fleet of research sessions judged slot by slot on Ray (`dit-ar init --executor ray`, `dit-ar fleet`).

The unit sent to Ray is one judging (an experiment, a baseline, a calibration or a re-validation): one process
that owns one slot (whole GPUs of one node, a placement group of one bundle) and runs both timed sides there, so
paired timing never crosses a process, a GPU or a node. The judge works in a replica of the session on its node
and hands an outcome back; the session's own process records it (git, the ledger and the best have one writer).

- `request`: what a judging is sent and what it returns (typed, picklable).
- `replica`: the session's git and state packed for a replica (`pack`), and the replica on the node.
- `work`: what a judge does in its slot (no Ray here: the Ray actor calls it).
- `dispatch`: the on-disk record of a judging in flight (a killed driver's successor re-attaches).
- `driver`: the session's side: dispatch, retry, re-attach; `apply`: recording a reply once.
- `ray_executor`: the only module that imports Ray (slots, the judge actor, node probes).
- `index`: the candidates the fleet has sent (claimed) or judged (a duplicate, or a near-duplicate of a discard,
  is refused); `registry`: the fleet's slots and sessions.
"""
