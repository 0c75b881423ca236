"""Instructions per message of an osu_latency ping-pong, mpirt --pml ucx beside Open MPI's
pml ucx, from callgrind profiles taken with --dump-instr=yes and collection toggled on only
inside the send and receive calls (ucx-callgrind.sh takes them).
   ucx_callgrind.py MPIRT_PROFILE,... OMPI_PROFILE,...

A waiting rank polls: rounds of ucp_worker_progress that find nothing, as many as the peer
takes to answer, which under callgrind depends on scheduling, not on either runtime. So each
instruction is counted by how often it ran: the work of a message runs the same instructions
for every message, once or a few times, so one that ran 1 to 4 times the message count (give
or take 0.5% of it, for the odd message that took another path) is message work (counted per
message); any other is polling or bookkeeping every so many rounds (counted per polling
round, i.e. per ucp_worker_progress call). A profile whose rounds per message come within 1%
of 1 to 4 cannot be split so, and is refused: take it again. The table gives both, per group of
functions, averaged over the profiles (one per rank); "per message" covers one send and one
receive. Both profiles must hold one message size (ucx-callgrind.sh runs 8 B only)."""
import re
import sys
from collections import Counter

# Function name patterns, first match wins: the MPI layer, the PML, then UCX by role.
GROUPS = [
    ("MPI layer (mpirt / PMPI)", r"^(mpirt::|<mpirt|std::|core::|alloc::|<alloc|<core|<std|PMPI_|ompi_)"),
    ("PML (pml::ucx / pml_ucx)", r"^(pml::|<pml|mca_pml_ucx_(send|recv|isend|irecv))"),
    ("UCX posting (send, recv)", r"^(ucp_tag_send|ucp_tag_recv_nb|ucp_proto|ucp_request_send|uct_.*_ep_)"),
    ("UCX request test", r"^(ucp_request_|ucp_tag_recv_request_test)"),
    ("Open MPI opal_progress", r"^(opal_|mca_pml_ucx_progress|event_|evutil)"),
    # Unnamed code is UCX's (static functions of libuct) or a call stub.
    ("UCX progress", r"^(ucp_|uct_|ucs_|0x)"),
    ("libc (memcpy, clock, syscalls)", r"^(__|clock_gettime|pthread|recv|send|write|read|epoll|poll)"),
]
ENTRIES = {"mpirt": "mpirt::point_to_point::Source::receive_into_with_tag", "ompi": "PMPI_Recv"}
PROGRESS = "ucp_worker_progress"


def group(function):
    for name, pattern in GROUPS:
        if re.search(pattern, function):
            return name
    return "other"


def executions(path):
    """(function, instruction address) -> executions, and function -> calls, from a
    callgrind profile with positions "instr line" (callgrind's --dump-instr=yes)."""
    names = {}
    ran, calls = Counter(), Counter()
    positions, previous = 1, [0]
    function = callee = None
    after_calls = False

    def name(kind, text):
        # Compressed names: "(id) name" the first time, "(id)" after.
        m = re.match(r"\((\d+)\)(?: (.*))?", text)
        if not m:
            return text
        if m.group(2) is not None:
            names[kind, m.group(1)] = m.group(2)
        return names[kind, m.group(1)]

    for line in open(path):
        line = line.rstrip("\n")
        if line.startswith("positions:"):
            positions = len(line.split()) - 1
            previous = [0] * positions
        elif line.startswith("fn="):
            function = name("fn", line[3:])
        elif line.startswith("cfn="):
            callee = name("fn", line[4:])
        elif line.startswith("calls="):
            calls[callee] += int(line[6:].split()[0])
            after_calls = True  # the next cost line is the call's inclusive cost
        elif line[:1] and line[0] in "0123456789+-*":
            fields = line.split()
            current = []
            for i, field in enumerate(fields[:positions]):
                if field == "*":
                    current.append(previous[i])
                elif field[0] in "+-":
                    current.append(previous[i] + int(field, 0))
                else:
                    current.append(int(field, 0))
            previous = current
            if after_calls:
                after_calls = False
            elif len(fields) > positions:
                ran[function, current[0]] += int(fields[positions])
    return ran, calls


def message_work(count, messages):
    """Whether an instruction that ran `count` times ran a few times per message."""
    times = round(count / messages)
    return 1 <= times <= 4 and abs(count - times * messages) <= 0.005 * messages


def split(path, entry):
    """Per message and per polling round, by group, for one rank's profile."""
    ran, calls = executions(path)
    messages, rounds = calls[entry], calls[PROGRESS]
    if not messages or not rounds:
        sys.exit(f"{path}: no calls of {entry} or {PROGRESS}: not a ping-pong profile")
    if message_work(rounds, messages):
        sys.exit(f"{path}: {rounds / messages:.3f} polling rounds per message: too close to a "
                 "whole number to tell polling from message work; profile again")
    per_message, per_round = Counter(), Counter()
    for (function, _), count in ran.items():
        if message_work(count, messages):
            per_message[group(function)] += count / messages
        else:
            per_round[group(function)] += count / rounds
    return per_message, per_round, rounds / messages


def average(paths, entry):
    splits = [split(p, entry) for p in paths]
    names = [n for n, _ in GROUPS] + ["other"]
    mean = lambda i: {n: sum(s[i][n] for s in splits) / len(splits) for n in names}  # noqa: E731
    return mean(0), mean(1), [round(s[2], 1) for s in splits]


def main():
    mpirt = average(sys.argv[1].split(","), ENTRIES["mpirt"])
    ompi = average(sys.argv[2].split(","), ENTRIES["ompi"])
    print(f"polling rounds per message: mpirt {mpirt[2]}, Open MPI {ompi[2]}")
    print(f"{'instructions':28} {'per message (send + receive)':>30}  {'per polling round':>24}")
    print(f"{'':28} {'mpirt':>9} {'OMPI':>9} {'diff':>10}  {'mpirt':>7} {'OMPI':>7} {'diff':>8}")
    totals = [0.0] * 4
    for name in mpirt[0]:
        row = [mpirt[0][name], ompi[0][name], mpirt[1][name], ompi[1][name]]
        if max(row) < 0.5:
            continue
        totals = [t + v for t, v in zip(totals, row)]
        print(f"{name:28} {row[0]:9.0f} {row[1]:9.0f} {row[0] - row[1]:+10.0f}"
              f"  {row[2]:7.1f} {row[3]:7.1f} {row[2] - row[3]:+8.1f}")
    print(f"{'total':28} {totals[0]:9.0f} {totals[1]:9.0f} {totals[0] - totals[1]:+10.0f}"
          f"  {totals[2]:7.1f} {totals[3]:7.1f} {totals[2] - totals[3]:+8.1f}")


if __name__ == "__main__":
    main()
