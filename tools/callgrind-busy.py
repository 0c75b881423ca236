#!/usr/bin/env python3
"""Busy instructions per iteration of a ping-pong benchmark, from a callgrind profile.

A waiting rank spins, so inclusive callgrind counts of a receive mostly measure how long it
waited. This keeps only the work done once per iteration: an instruction (or a call site)
counts when it ran a whole multiple (1 to 6) of ITERATIONS times, within 0.2%; spin rounds,
start-up and the clock reads of the wait loop run other counts and drop out. A function's busy
total is its own busy instructions plus, for each busy call site, its share of the callee's
busy total (never the callee's recorded inclusive cost, which includes the callee's spinning).

Record with --dump-instr=yes (the counts are per instruction), for example:
  target/release/rsrun -n 2 valgrind --tool=callgrind --dump-instr=yes \\
      --callgrind-out-file=/tmp/cg.%p target/release/osu_latency -m 8:8 -i 20000 -x 0
  tools/callgrind-busy.py /tmp/cg.PID 20000 send_with_tag receive_into_with_tag on_frame
  tools/callgrind-busy.py --lines /tmp/cg.PID 20000 on_frame    # per source line
Open MPI's C port (osu-benches/compare/osu_p2p.c, latency 8 8) runs 10,100 iterations.
The last line is the whole program's busy instructions per iteration.
"""
import collections
import re
import sys


def parse(path):
    """Per function: busy-countable self costs by (address, file, line), and call sites."""
    names = {}

    def name(kind, text):
        m = re.match(r"\((\d+)\)(?: (.*))?", text)
        if not m:
            return text
        key = (kind, m.group(1))
        if m.group(2) is not None:
            names[key] = m.group(2)
        return names[key]

    def step(value, token):
        if token == "*":
            return value
        if token[0] in "+-":
            return value + int(token, 0)
        return int(token, 0)

    costs = collections.defaultdict(lambda: collections.defaultdict(int))
    calls = collections.defaultdict(list)
    fn = fl = fi = callee = None
    call_count = None
    addr = line_no = 0
    with open(path) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not line:
                continue
            if line.startswith("fn="):
                fn, fi = name("fn", line[3:]), None
            elif line.startswith("fl="):
                fl, fi = name("fl", line[3:]), None
            elif line.startswith(("fi=", "fe=")):
                fi = name("fl", line[3:])
            elif line.startswith("cfn="):
                callee = name("fn", line[4:])
            elif line.startswith(("cfi=", "cfl=")):
                name("fl", line[4:])
            elif line.startswith("calls="):
                call_count = int(line[6:].split()[0])
            elif line[0].isdigit() or line[0] in "+-*":
                parts = line.split()
                addr = step(addr, parts[0])
                if len(parts) > 1:
                    line_no = step(line_no, parts[1])
                if len(parts) < 3:
                    call_count = None
                    continue
                if call_count is not None:
                    calls[fn].append((call_count, callee))
                    call_count = None
                else:
                    costs[fn][(addr, fi or fl, line_no)] += int(parts[2])
    return costs, calls


def main():
    args = sys.argv[1:]
    by_line = args[:1] == ["--lines"]
    if by_line:
        args = args[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    path, iters, patterns = args[0], int(args[1]), args[2:]

    def busy_count(n):
        return any(abs(n - k * iters) <= k * iters * 0.002 + 3 for k in range(1, 7))

    costs, calls = parse(path)
    if by_line:
        per_line = collections.Counter()
        for fn, sites in costs.items():
            if not patterns or any(p in fn for p in patterns):
                for (_, file, line), n in sites.items():
                    if busy_count(n):
                        per_line[(file, line, fn)] += n
        for (file, line, fn), n in per_line.most_common():
            print(f"{n / iters:7.1f}  {file}:{line}  [{fn[:70]}]")
    calls_of = collections.Counter()
    for sites in calls.values():
        for n, callee in sites:
            calls_of[callee] += n
    memo = {}

    def busy(fn):
        if fn not in memo:
            memo[fn] = 0  # a recursive call adds nothing
            own = sum(n for n in costs[fn].values() if busy_count(n))
            called = sum(
                busy(callee) * n / calls_of[callee]
                for n, callee in calls[fn]
                if busy_count(n) and callee != fn
            )
            memo[fn] = own + called
        return memo[fn]

    if not by_line:
        for fn in sorted(set(costs) | set(calls)):
            if any(p in fn for p in patterns):
                print(f"{busy(fn) / iters:9.1f}  {fn[:150]}")
    total = sum(n for sites in costs.values() for n in sites.values() if busy_count(n))
    print(f"{total / iters:9.1f}  busy instructions per iteration, whole program")


if __name__ == "__main__":
    main()
