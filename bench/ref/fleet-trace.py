#!/usr/bin/python3
"""Splits Set on A -> PropertiesChanged on B into its parts from two `perf trace -T` files.

  fleet-trace.py LABEL TRACE-A TRACE-B LATENCY-FILE

TRACE-A and TRACE-B: `perf trace -T -p PID -e sendmsg,recvmsg,sendto,recvfrom,...` of host A
and host B (all threads; timestamps in ms of the same monotonic clock) during one
`fleet-latency propagate` run, whose "p50 p99 max n" (µs) is LATENCY-FILE. Both hosts speak
D-Bus with recvmsg/sendmsg (libdbus) and etcd with sendto/recvfrom (libcurl). For every txn A
writes to etcd (a sendto), the parts of that Set's path:

  A      the latest Set read from the bus (recvmsg) before it -> the txn's sendto
  etcd   the txn's sendto -> B's first read of the watch stream (recvfrom on its busiest
         recvfrom fd) after it
  B      that read -> B's first sendmsg after it (the PropertiesChanged)
  answer the txn's sendto -> A's first recvfrom on the same fd (etcd's answer)

Prints one Markdown row of medians (µs) with the number of Sets matched.
"""
import bisect
import re
import statistics
import sys

LINE = re.compile(r"^\s*([\d.]+)\s+\(\s*[\d.]+ ms\): (?:\S+ )?(\w+)\(fd: (\d+)[^)]*.*\)\s+= (-?\d+)")


def events(path):
    found = []
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if not m or int(m.group(4)) <= 0:
                continue
            found.append((float(m.group(1)) * 1000.0, m.group(2), int(m.group(3))))
    return found


def main():
    label, trace_a, trace_b, latency = sys.argv[1:5]
    a, b = events(trace_a), events(trace_b)
    counts = {}
    for _, name, fd in b:
        if name == "recvfrom":
            counts[fd] = counts.get(fd, 0) + 1
    watch_fd = max(counts, key=counts.get) if counts else -1
    bus_in = [t for t, name, _ in a if name == "recvmsg"]
    b_in = [t for t, name, fd in b if name == "recvfrom" and fd == watch_fd]
    b_out = [t for t, name, _ in b if name == "sendmsg"]
    parts = {"A": [], "etcd": [], "B": [], "answer": []}

    def first_after_sorted(times, t, limit=20000.0):
        i = bisect.bisect_right(times, t)
        if i < len(times) and times[i] - t < limit:
            return times[i]
        return None

    for index, (t, name, fd) in enumerate(a):
        if name != "sendto":
            continue
        i = bisect.bisect_right(bus_in, t) - 1
        if i < 0 or t - bus_in[i] > 20000.0:
            continue
        t2 = first_after_sorted(b_in, t)
        if t2 is None:
            continue
        t3 = first_after_sorted(b_out, t2)
        if t3 is None:
            continue
        answer = next((x for x, n, f in a[index + 1:index + 200] if n == "recvfrom" and f == fd), None)
        parts["A"].append(t - bus_in[i])
        parts["etcd"].append(t2 - t)
        parts["B"].append(t3 - t2)
        if answer is not None:
            parts["answer"].append(answer - t)
    with open(latency) as f:
        p50 = f.read().split()[0]
    med = lambda xs: f"{statistics.median(xs):.0f} µs" if xs else "-"
    print(f"| {label} | {float(p50) / 1000:.2f} ms | {med(parts['A'])} | {med(parts['etcd'])} | {med(parts['B'])} | {med(parts['answer'])} | {len(parts['A'])} |")


main()
