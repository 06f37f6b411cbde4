#!/usr/bin/env python3
"""Splits the confirmed reply's message period into four legs, the service's and the server's.

Reads `perf script -F comm,pid,tid,cpu,time,event,trace` output of `raw_syscalls:sys_enter` and
`raw_syscalls:sys_exit` recorded on every CPU (`perf record -a`) while one side of
`js-reply-stored` runs against a server given by `--url` (docs/benchmarks.md, "Profiling").
The server's process id is the second argument: only its system calls count as the server's,
and only the bench's `tokio-rt-worker` threads' as the service's.

For each message (each `writev` of the service, which carries the input's acknowledgement and
the next receipt), in the middle 80 % of the round:

    to the server   the service's writev -> the server's first read that returns bytes
    server          that read -> the server's next write (the stream's acknowledgement)
    to the service  that write -> the service's last wake-up (epoll_wait or futex) before its
                    next writev
    service         that wake-up -> the service's next writev (its turn)

Also counted: how often the server's read ran on the CPU the service wrote from. A message whose
legs cannot all be found (the server's answer falls after the next writev) is left out.

Usage: perf script -i sys.data -F comm,pid,tid,cpu,time,event,trace | legs.py /dev/stdin PID
"""

import bisect
import re
import sys

from turns import report

READ, WRITE, WRITEV, EPOLL_WAIT, EPOLL_PWAIT, FUTEX = 0, 1, 20, 232, 281, 202
WAKES = (EPOLL_WAIT, EPOLL_PWAIT, FUTEX)
# `perf script`: command, pid/tid, [CPU], time stamp, event, system call number, its result.
EVENT = re.compile(
    r"\s*(\S+)\s+(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+raw_syscalls:sys_(enter|exit):"
    r"\s+NR (\d+)(?: = (-?\d+))?"
)
# How far past a moment the next matching system call is looked for.
LOOK = 400


def read(path, server_pid):
    service, server = [], []
    with open(path) as lines:
        for line in lines:
            match = EVENT.match(line)
            if not match:
                continue
            comm, pid, _tid, cpu, at, kind, nr, result = match.groups()
            event = (float(at), kind, int(nr), int(cpu), int(result) if result else None)
            if comm == "tokio-rt-worker":
                service.append(event)
            elif int(pid) == server_pid:
                server.append(event)
    service.sort()
    server.sort()
    return service, server


def first_after(events, times, at, wanted):
    start = bisect.bisect_right(times, at)
    return next((e for e in events[start : start + LOOK] if wanted(e)), None)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    service, server = read(sys.argv[1], int(sys.argv[2]))
    if not server:
        sys.exit(f"no system calls of process {sys.argv[2]}: record with -a, pass the server's pid")
    writevs = [e for e in service if e[2] == WRITEV and e[1] == "enter"]
    if len(writevs) < 100:
        sys.exit(f"only {len(writevs)} writev calls: record a whole round (see the docstring)")
    server_times = [e[0] for e in server]
    service_times = [e[0] for e in service]
    legs = {"to the server": [], "server": [], "to the service": [], "service": []}
    same_cpu = 0
    low, high = len(writevs) // 10, len(writevs) * 9 // 10
    for this, following in zip(writevs[low:high], writevs[low + 1 : high + 1]):
        got = first_after(
            server, server_times, this[0], lambda e: e[1] == "exit" and e[2] == READ and e[4]
        )
        if got is None:
            continue
        answer = first_after(
            server, server_times, got[0], lambda e: e[1] == "enter" and e[2] in (WRITE, WRITEV)
        )
        if answer is None or answer[0] > following[0]:
            continue
        end = bisect.bisect_left(service_times, following[0])
        wake = next(
            (
                e
                for e in reversed(service[max(0, end - LOOK) : end])
                if e[1] == "exit" and e[2] in WAKES
            ),
            None,
        )
        if wake is None or wake[0] < answer[0]:
            continue
        legs["to the server"].append(got[0] - this[0])
        legs["server"].append(answer[0] - got[0])
        legs["to the service"].append(wake[0] - answer[0])
        legs["service"].append(following[0] - wake[0])
        same_cpu += this[3] == got[3]
    counted = len(legs["service"])
    for name, values in legs.items():
        report(name, values, width=15)
    print(f"messages {counted}; the server read on the service's CPU for {same_cpu}")


if __name__ == "__main__":
    main()
