"""The worker protocol: one JSON object per line, requests on the worker's stdin, replies on a private
copy of its stdout. Both ends import this module, so the op names and the version are written once."""

from __future__ import annotations

import json
from typing import Any

VERSION = 1
MAX_LINE = 64 << 20  # a reply line longer than this is the worker's crash (outputs travel as files)
OPS = ("build", "generate", "activation_dtypes", "profile", "flops", "peak", "exit")
SERVER_MODULE = "pytest_dit_ar.worker.server"


def encode(message: dict[str, Any]) -> bytes:
    return (json.dumps(message) + "\n").encode("utf-8")


def decode(line: bytes | str) -> dict[str, Any]:
    message = json.loads(line)
    if not isinstance(message, dict):
        raise ValueError(f"a protocol message is a JSON object, got {type(message).__name__}")
    return message


def request(op: str, **fields: Any) -> dict[str, Any]:
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; the protocol knows {OPS}")
    return {"op": op, **fields}


def error_kind(exc: BaseException) -> str:
    """'oom' for out-of-memory errors (host or device), else 'exception'."""
    name = type(exc).__name__
    if isinstance(exc, MemoryError) or "OutOfMemory" in name or "out of memory" in str(exc).lower():
        return "oom"
    return "exception"
