"""What a driver's `ray.get` on an actor's method raises when Ray's memory monitor kills that actor.

  python lab/probes/ray_oom_error.py      # a local Ray of 2 CPUs; prints the error's type and first lines

The monitor's threshold is set to the node's used share now plus 0.6 GiB (RAY_memory_usage_threshold, refresh
100 ms, no minimum free bytes), so an actor that touches 4 GiB in 100 MiB blocks crosses it within a second or two
and uses at most that much more of the machine. Its answer is what `fleet/ray_executor.py` maps to `ray-oom`.
"""

from __future__ import annotations

import os
import time


def used_share() -> tuple[float, int]:
    info = dict(line.split(":", 1) for line in open("/proc/meminfo"))
    total, available = (int(info[k].split()[0]) for k in ("MemTotal", "MemAvailable"))
    return (total - available) / total, total * 1024


def main() -> None:
    share, total = used_share()
    os.environ.update(RAY_memory_usage_threshold=f"{share + 0.6 * 2**30 / total:.3f}",
                      RAY_memory_monitor_refresh_ms="100", RAY_min_memory_free_bytes="-1")
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)

    @ray.remote(max_restarts=0, max_task_retries=0)
    class Hog:
        def hog(self) -> int:
            blocks = []
            for i in range(40):
                blocks.append(bytes([i % 250 + 1]) * (100 << 20))
                time.sleep(0.05)
            return len(blocks)

    try:
        print("returned", ray.get(Hog.remote().hog.remote()))
    except Exception as exc:  # noqa: BLE001 - the point is which one
        print("raised", type(exc).__module__, type(exc).__name__, [c.__name__ for c in type(exc).__mro__[1:3]])
        print("\n".join(str(exc).splitlines()[:3]))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
