#!/usr/bin/env python3
"""Runs a command and prints the peak shared memory its processes held, by kind.

    shm_peak.py [-i SECONDS] -- COMMAND...

Every SECONDS (0.2) it reads /proc/PID/maps of the command's descendants, keeps the mappings
of tmpfs files (/dev/shm files, removed or not, memfd files, System V segments), and sums the
pages each file has allocated (st_blocks of /proc/PID/map_files/RANGE), each file once however
many ranks map it: pages a rank allocated and never touched count, pages no rank can reach any
more do not. The peak of each kind and of their sum goes to stderr when the command ends
(its output and exit status pass through), with the peak of the job's whole memory beside it
(the sum of its processes' Pss, /proc/PID/smaps_rollup: private pages, and each shared page
split among the processes that map it):

    shm_peak: total 133.4 MB (mpirt segment 130.1 MB, mpirt arena 3.1 MB, ...); all memory 310.2 MB

Kinds: "mpirt segment" (the transport's rings, /dev/shm/mpirt-JOB-N), "mpirt area" (the
collectives' areas, /dev/shm/mpirt-JOB-coll-...), "mpirt arena" (the shared arenas, memfd
files: the program's own large heap blocks, which other MPIs keep in private memory), "open mpi"
(vader/sm segments and anything else under /dev/shm), "memfd", "sysv".
"""

import os
import subprocess
import sys
import time


def kind(path):
    if path.startswith("/dev/shm/mpirt-"):
        return "mpirt area" if "-coll-" in path else "mpirt segment"
    if path.startswith("/memfd:mpirt"):
        return "mpirt arena"
    if path.startswith("/memfd:"):
        return "memfd"
    if path.startswith("/SYSV"):
        return "sysv"
    if path.startswith("/dev/shm/"):
        return "open mpi" if ("vader" in path or "sm_segment" in path) else "other /dev/shm"
    return None


def descendants(root):
    children = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: the fields follow the last ')'.
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def pss(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def sample(root):
    """Bytes allocated by each kind of shared file the processes under `root` map now, and
    the processes' whole memory (under the key None)."""
    files = {}
    memory = 0
    for pid in descendants(root):
        memory += pss(pid)
        try:
            with open(f"/proc/{pid}/maps") as f:
                lines = f.readlines()
        except OSError:
            continue
        for line in lines:
            fields = line.split(maxsplit=5)
            if len(fields) < 6 or fields[4] == "0":
                continue
            path = fields[5].strip().removesuffix(" (deleted)")
            k = kind(path)
            key = (fields[3], fields[4])
            if k is None or key in files:
                continue
            try:
                st = os.stat(f"/proc/{pid}/map_files/{fields[0]}")
            except OSError:
                continue
            files[key] = (k, st.st_blocks * 512)
    by_kind = {}
    for k, allocated in files.values():
        by_kind[k] = by_kind.get(k, 0) + allocated
    return by_kind, memory


def main():
    args = sys.argv[1:]
    interval = 0.2
    if args[:1] == ["-i"]:
        interval, args = float(args[1]), args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        sys.exit(__doc__)
    child = subprocess.Popen(args)
    peak_total, peak, peak_memory = 0, {}, 0
    while child.poll() is None:
        by_kind, memory = sample(child.pid)
        peak_total = max(peak_total, sum(by_kind.values()))
        peak_memory = max(peak_memory, memory)
        for k, v in by_kind.items():
            peak[k] = max(peak.get(k, 0), v)
        time.sleep(interval)
    parts = ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sorted(peak.items()))
    print(
        f"shm_peak: total {peak_total / 1e6:.1f} MB ({parts}); "
        f"all memory {peak_memory / 1e6:.1f} MB",
        file=sys.stderr,
    )
    sys.exit(child.returncode)


if __name__ == "__main__":
    main()
