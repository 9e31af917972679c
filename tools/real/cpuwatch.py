"""Foreign CPU load: busy time on the machine that is not ours.

The machine's busy time comes from /proc/stat (user, nice, system, irq,
softirq, steal: everything but idle and iowait), ours from
/proc/PID/stat (utime + stime, all threads) of the processes we name:
the engines, this process, a gateway. What is left is someone else's,
and a run that had much of it is marked disturbed rather than averaged
in. Sampled every second on a thread of its own.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable, Dict, List

from realfleet import proc_cpu_seconds

_TICK = os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """Busy CPU seconds of the whole machine since boot, all cores."""
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu "):
                v = [int(x) for x in line.split()[1:]]
                # user nice system idle iowait irq softirq steal ...
                busy = v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if
                                                          len(v) > 7 else 0)
                return busy / _TICK
    raise OSError("/proc/stat: no cpu line")


class CpuWatch:
    """Samples the foreign load (cores busy with other processes) every
    `period_s` while running. `pids()` names our processes at each
    sample (engines restart, so it is asked each time)."""

    def __init__(self, pids: Callable[[], List[int]],
                 period_s: float = 1.0) -> None:
        self.pids, self.period_s = pids, period_s
        self.samples: List[float] = []  # foreign cores per period
        self.ours: List[float] = []     # our cores per period
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.ncpu = os.cpu_count() or 1

    def _ours(self, prev: Dict[int, float]) -> "tuple[float, Dict[int, float]]":
        now: Dict[int, float] = {}
        delta = 0.0
        for pid in set(self.pids()):
            t = proc_cpu_seconds(pid)
            now[pid] = t
            delta += max(t - prev.get(pid, t), 0.0) if pid in prev else 0.0
        return delta, now

    def _run(self) -> None:
        t_prev = time.monotonic()
        busy_prev = machine_busy_seconds()
        _, ours_prev = self._ours({})
        while not self._stop.wait(self.period_s):
            t = time.monotonic()
            busy = machine_busy_seconds()
            d_ours, ours_prev = self._ours(ours_prev)
            dt = t - t_prev
            if dt > 0:
                foreign = max(busy - busy_prev - d_ours, 0.0) / dt
                self.samples.append(foreign)
                self.ours.append(d_ours / dt)
            t_prev, busy_prev = t, busy

    def __enter__(self) -> "CpuWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> Dict[str, float]:
        s = self.samples
        if not s:
            return {"foreign_mean": 0.0, "foreign_max5": 0.0,
                    "ours_mean": 0.0, "samples": 0}
        k = min(5, len(s))
        max5 = max(sum(s[i:i + k]) / k for i in range(len(s) - k + 1))
        return {"foreign_mean": sum(s) / len(s), "foreign_max5": max5,
                "ours_mean": sum(self.ours) / len(self.ours),
                "samples": len(s)}


def foreign_now(pids: Callable[[], List[int]], seconds: float = 2.0) -> float:
    """Foreign cores over the next `seconds`."""
    w = CpuWatch(pids, period_s=seconds)
    with w:
        time.sleep(seconds + 0.2)
    return w.samples[0] if w.samples else 0.0


def wait_quiet(pids: Callable[[], List[int]], limit: float,
               timeout_s: float, log: Callable[[str], None],
               window_s: int = 10) -> float:
    """Wait until the foreign load has been under `limit` cores on average
    over the last `window_s` seconds, and under 0.5 in each of them (a
    gap of a few seconds between someone's jobs is not a quiet machine);
    at most timeout_s. Returns the window's mean."""
    deadline = time.monotonic() + timeout_s
    said = False
    w = CpuWatch(pids, period_s=1.0)
    with w:
        while True:
            time.sleep(1.0)
            last = w.samples[-window_s:]
            mean = sum(last) / len(last) if last else 0.0
            if (len(last) == window_s and mean < limit and
                    max(last) < 0.5) or time.monotonic() > deadline:
                return mean
            if not said and len(last) == window_s:
                log(f"waiting for the machine to be quiet ({mean:.2f} "
                    f"foreign cores over {window_s} s, limit {limit:.2f})")
                said = True
