"""The audit writer alone (issue 21 item 4): 1 or 64 threads append entries, each waiting until
its entry is in the fsynced log, as the server's requests would if they waited (they do not:
an append only queues). Entries/s of the writer and the process's CPU per entry.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _harness import result

from gpu_platform.adapters.outbound.storage.audit_file import JsonlAuditLog, verify_file


def _wait_written(log: JsonlAuditLog, target: int) -> None:
    # the writer's own bookkeeping: the log's fsynced end (the head file may follow later)
    with log._changed:
        log._changed.wait_for(lambda: log._written >= target)


def _one(writers: int, per: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "audit.jsonl"
        log = JsonlAuditLog(path)
        samples: list[float] = []

        def client() -> None:
            for i in range(per):
                t0 = time.perf_counter()
                log.append({"action": "job.submit", "actor": "bench", "target": f"job-{i}"})
                with log._lock:
                    target = log._seq
                _wait_written(log, target)
                samples.append((time.perf_counter() - t0) * 1e6)

        threads = [threading.Thread(target=client) for _ in range(writers)]
        cpu0, t0 = time.process_time(), time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        log.close()
        n = writers * per
        assert verify_file(path) == n
    row = result(
        "audit.writer",
        {"writers": writers, "entries": n},
        samples,
        extra={
            "cpu_us_per_entry": round(cpu / n * 1e6),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        },
    )
    row["ops_per_s"] = round(n / wall, 1)
    print(
        f"   writers {writers:>3}: {row['ops_per_s']:8.0f} entries/s, "
        f"cpu {row['extra']['cpu_us_per_entry']} us/entry",
        flush=True,
    )
    return row


def run(quick: bool = False) -> list[dict[str, Any]]:
    smoke = bool(os.environ.get("GPU_PLATFORM_BENCH_SMOKE"))  # the test suite's run: schema only
    per1, per64 = (5, 1) if smoke else (100, 10) if quick else (500, 40)
    return [_one(1, per1), _one(64, per64)]
