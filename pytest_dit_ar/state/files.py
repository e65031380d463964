"""Crash-safe JSON files: written through a temp file, fsynced, then renamed over the target."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from dit_ar_contract.errors import Refused

T = TypeVar("T")


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON through a temp file in the same folder, fsync, then rename over the target."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=True, default=str)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


FORMAT_VERSION = 1  # of the JSON records of runs and baselines; a record without one was written as version 1
VERSION_KEY = "format_version"


def write_record(path: Path, data: Mapping[str, Any]) -> None:
    """A record (run or baseline) with its format version (this harness's, unless the record names its own),
    written atomically."""
    write_json_atomic(path, {VERSION_KEY: FORMAT_VERSION, **data})


def check_version(data: Mapping[str, Any], where: str, supported: int = FORMAT_VERSION) -> int:
    """The record's format version (1 when it names none); one this harness does not know is refused, as pyperf
    and asv refuse one, with a line that names the record."""
    version = data.get(VERSION_KEY, 1)
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= supported:
        raise Refused(f"{where}: file format version {version!r} is not supported (this pytest-dit-ar reads up to "
                      f"{supported}); read it with the newer pytest-dit-ar that wrote it")
    return version


def load_record(path: Path, supported: int = FORMAT_VERSION) -> dict[str, Any]:
    """A record's JSON object ({} when absent or unreadable); refuses a format this harness does not know."""
    data = read_json_object(path)
    check_version(data, str(path), supported)
    return data


def fields_from(cls: type[T], data: Mapping[str, Any]) -> T:
    """A dataclass from a record's mapping: unknown keys are left out, a missing field without default is None."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in data:
            values[f.name] = data[f.name]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            values[f.name] = None
    return cls(**values)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Replace a file's bytes in one rename (used to put back a file a candidate changed)."""
    tmp = path.with_name(path.name + ".restore")
    tmp.write_bytes(data)
    tmp.replace(path)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_json(path: Path, default: Any = None) -> Any:
    if not path.is_file():
        return default
    return json.loads(path.read_text(encoding="utf-8"))


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON object, or {} when the file is absent, unreadable or not an object (for read-only views)."""
    try:
        data = read_json(path, {})
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
