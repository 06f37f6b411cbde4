#!/usr/bin/env python3
"""Splits a one-at-a-time row's message period into the service's turn and the wait for the server.

Reads `perf script` output of `raw_syscalls:sys_enter` and `raw_syscalls:sys_exit` recorded
around one side of `js-reply-stored` or `request` (docs/benchmarks.md, "Profiling"). Each
message ends in one `writev` (the input's acknowledgement and the next output, or the response);
between two of them the process waits in `epoll_wait` or `futex` until the server answers, then
works until the next `writev`:

    turn = the next writev's entry - the last wake-up (epoll_wait or futex exit) before it
    wait = that wake-up - the previous writev's entry

Only the middle 80 % of the writevs count (the consumer's creation and the stop left out).
"""

import bisect
import re
import statistics
import sys

WRITEV, EPOLL_WAIT, EPOLL_PWAIT, FUTEX = 20, 232, 281, 202
WAKES = (EPOLL_WAIT, EPOLL_PWAIT, FUTEX)
# `perf script`: command, thread id, [CPU], time stamp, event, system call number.
EVENT = re.compile(r"\s*\S+\s+\d+\s+\[\d+\]\s+([\d.]+):\s+raw_syscalls:sys_(enter|exit): NR (\d+)")


def quantile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def report(name, seconds, width=6):
    """One line: the mean and quartiles of `seconds`, in microseconds (`legs.py` uses it too)."""
    micros = [v * 1e6 for v in seconds]
    print(
        f"{name:{width}} mean {statistics.mean(micros):6.1f} us  p25 {quantile(micros, 0.25):6.1f}"
        f"  p50 {quantile(micros, 0.5):6.1f}  p75 {quantile(micros, 0.75):6.1f}"
    )


def main():
    events = []
    for line in sys.stdin:
        match = EVENT.match(line)
        if match:
            at, kind, nr = match.groups()
            events.append((float(at), kind, int(nr)))
    events.sort()
    times = [at for at, _, _ in events]
    writevs = [at for at, kind, nr in events if nr == WRITEV and kind == "enter"]
    if len(writevs) < 100:
        sys.exit(f"only {len(writevs)} writev calls: record a whole round (see the docstring)")
    low, high = len(writevs) // 10, len(writevs) * 9 // 10
    periods, turns, waits, calls = [], [], [], []
    for previous, this in zip(writevs[low - 1 : high - 1], writevs[low:high]):
        between = events[bisect.bisect_right(times, previous) : bisect.bisect_left(times, this)]
        periods.append(this - previous)
        calls.append(sum(1 for _, kind, _ in between if kind == "enter"))
        wakes = [at for at, kind, nr in between if kind == "exit" and nr in WAKES]
        if wakes:
            turns.append(this - wakes[-1])
            waits.append(wakes[-1] - previous)
    for name, values in (("period", periods), ("turn", turns), ("wait", waits)):
        report(name, values)
    print(f"system calls a message: {statistics.mean(calls):.2f} ({high - low} messages)")


if __name__ == "__main__":
    main()
