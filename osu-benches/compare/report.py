"""Medians of run.sh's interleaved runs.
   report.py OUTDIR REPEATS BENCHMARK...
       prints a table per benchmark with ratios, and writes OUTDIR/results.csv (one row per
       benchmark, size, runtime and repeat) and a chart per benchmark (PNG, with matplotlib) in OUTDIR.
   report.py --sweep FILE COMMANDS SWEEP_OUTDIR...
       replaces only FILE's section of issue 23's collective sweep (below) with one from these
       folders, with its heat map, the machine's load and CPU and COMMANDS; the rest of FILE
       stays as it is (sections other scripts added included).
   report.py --markdown FILE COMMANDS SHM_OUTDIR TCP_OUTDIR [UCX_OUTDIR [CALLGRIND_OUTDIR
             [SWEEP_OUTDIR...]]]
       from those results.csv files, writes FILE: the issue-8 report (medians, ratios, the
       targets met and missed, the machine, COMMANDS: the lines that ran) with its charts and
       the CSV files in FILE's folder report/. Without TCP_OUTDIR/results.csv, TCP goes
       unmeasured, for the reason in TCP_OUTDIR-failed if there is one. UCX_OUTDIR (ucx.sh -o)
       adds issue 6's part: mpirt --pml ucx against Open MPI's pml ucx, one folder per
       UCX_TLS; without measurements there, the reason in UCX_OUTDIR-failed. Each SWEEP_OUTDIR
       (run.sh -o, one per rank count, named coll-RANKS) adds issue 23's collective sweep: a
       heat map of mpirt's paired ratios to Open MPI (operation x size x ranks), the cells
       over 1.0, the geometric mean, and the runs over 3x the median of their cell."""
import csv
import math
import shutil
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402 (after choosing the backend)

# "-rs": mpirt's benchmark source built on rsmpi over that C MPI (run.sh -s rsmpi or both).
# "perftest": UCX's ucx_perftest (tag_lat, tag_bw) at a few sizes, in ucx.sh's runs.
RUNTIMES = {"mpirt": "mpirt", "ompi": "Open MPI", "mpich": "MPICH",
            "ompi-rs": "Open MPI (rsmpi)", "mpich-rs": "MPICH (rsmpi)", "perftest": "ucx_perftest"}
RATIO_LABELS = {"ompi": "/OMPI", "mpich": "/MPICH", "ompi-rs": "/OMPI-rs", "mpich-rs": "/MPICH-rs",
                "perftest": "/perftest"}
COLORS = {"mpirt": "#d62728", "ompi": "#1f77b4", "mpich": "#2ca02c", "ompi-rs": "#1f77b4",
          "mpich-rs": "#2ca02c", "perftest": "#7f7f7f"}
UNITS = {"bw": "MB/s", "bibw": "MB/s", "mbw_mr": "messages/s", "launch": "s", "memcpy": "MB/s",
         "cma": "MB/s"}
FIELDS = ["benchmark", "size", "runtime", "repeat", "value", "unit"]


def unit(bench):
    return UNITS.get(bench, "us")


def higher_is_better(bench):
    return unit(bench) in ("MB/s", "messages/s")


def rows(path, column=-1):
    """Size -> value, `column` indexing a row's values after its size (the last: osu_mbw_mr's
    message rate, the non-blocking collectives' overlap; 0: their overall time). The barriers'
    rows have no size column in OSU's format (a value with a decimal point first): size 0."""
    if not path.exists():
        return {}  # a run cut short by run.sh's time limit (see its "limits" file)
    figures = {}
    for line in path.read_text().splitlines():
        v = line.split()
        # Comments and column headers.
        if not v or not v[0][0].isdigit():
            continue
        size, row = (0, v) if "." in v[0] else (int(v[0]), v[1:])
        figures[size] = float(row[column])
    return figures


def overlapping(bench):
    """Whether `bench` is a non-blocking collective, whose rows hold OSU's overlap columns."""
    return bench.startswith("i") and bench[1:] in COLLECTIVES


# Every collective OSU 7.4 measures (osu_coll.c runs them all, and the i forms).
COLLECTIVES = ["barrier", "bcast", "reduce", "allreduce", "allgather", "allgatherv", "alltoall",
               "alltoallv", "gather", "gatherv", "scatter", "scatterv", "reduce_scatter",
               "reduce_scatter_block"]


def median(values):
    return statistics.median(values) if values else float("nan")


def collect(out, repeats, benches):
    """Every measurement of OUTDIR as results.csv rows."""
    records = []
    for bench in benches:
        # mpirt always runs; the others as run.sh's -s chose.
        ran = [w for w in RUNTIMES if w == "mpirt" or (out / f"{bench}.{w}.1").exists()]
        for who in ran:
            for r in range(1, repeats + 1):
                path = out / f"{bench}.{who}.{r}"
                if overlapping(bench):
                    for size, value in rows(path).items():
                        records.append([f"{bench} overlap", size, who, r, value, "%"])
                for size, value in rows(path, 0 if overlapping(bench) else -1).items():
                    records.append([bench, size, who, r, value, unit(bench)])
    # Launch times and memcpy are measured on one host only; one line per repeat.
    for who in ("mpirt", "mpich"):
        path = out / f"launch.{who}"
        if path.exists():
            for r, line in enumerate(path.read_text().splitlines(), 1):
                start, end = map(float, line.split())
                records.append(["launch", 8, who, r, end - start, "s"])
    # memcpy.txt: between two warm buffers (osu_bw's window lands in one); cma.txt:
    # whole-message then 256 KiB calls, the first being the single-copy ceiling.
    for file, columns in (("memcpy", ("memcpy",)), ("cma", ("cma",))):
        path = out / f"{file}.txt"
        if path.exists():
            for r, line in enumerate(path.read_text().splitlines(), 1):
                for bench, value in zip(columns, line.split()):
                    records.append([bench, 1 << 22, bench, r, float(value), "MB/s"])
    return records


def medians(records):
    """(benchmark, size, runtime) -> median over the repeats."""
    groups = defaultdict(list)
    for bench, size, who, _, value, _ in records:
        groups[bench, int(size), who].append(float(value))
    return {key: median(values) for key, values in groups.items()}


def paired(records):
    """(benchmark, size, runtime) -> {repeat: value}: the runs, for ratios taken pair by pair."""
    runs = defaultdict(dict)
    for bench, size, who, r, value, _ in records:
        runs[bench, int(size), who][int(r)] = float(value)
    return runs


def paired_ratio(runs, mine, ref):
    """The median of each repeat's ratio, mpirt's run over the reference's run of the same
    repeat. A repeat runs mpirt and then the others within seconds, so the two share the
    machine's state: on this VM two-rank latency switches between a fast and a slow phase
    every few seconds, for every runtime, and medians taken apart can each fall in a
    different phase."""
    a, b = runs.get(mine, {}), runs.get(ref, {})
    return median([a[r] / b[r] for r in sorted(a.keys() & b.keys()) if b[r]])


def table(m, bench):
    """Lines of a per-size table: the medians of every runtime measured, then mpirt's ratio to
    each of the others."""
    sizes = sorted({s for b, s, w in m if b == bench})
    ran = [w for w in RUNTIMES if any(b == bench and x == w for b, _, x in m)]
    others = [w for w in ran if w != "mpirt"]
    widths = {w: max(7, len(RATIO_LABELS[w])) for w in others}
    names = {"ompi-rs": "OMPI (rs)", "mpich-rs": "MPICH (rs)"}
    yield " ".join([f"{'size':>9}"] + [f"{names.get(w, RUNTIMES[w]):>12}" for w in ran]
                   + [f"{RATIO_LABELS[w]:>{widths[w]}}" for w in others])
    for s in sizes:
        v = {who: m.get((bench, s, who), float("nan")) for who in ran}
        # A bandwidth too small for OSU's two decimals prints as 0.00: no ratio to it.
        ratios = [v["mpirt"] / v[w] if v[w] and "mpirt" in v else float("nan")
                  for w in others]
        yield " ".join([f"{s:>9}"] + [f"{v[w]:>12.2f}" for w in ran]
                       + [f"{r:>{widths[w]}.2f}" for r, w in zip(ratios, others)])


def line_chart(path, title, ylabel, series):
    """Log-log lines, one per runtime: series is runtime -> [(size, value)]."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for who, points in series.items():
        points = sorted((x, y) for x, y in points if x > 0 and y > 0)
        if points:
            # ucx_perftest ran at a few sizes only: points, not a line between them.
            style = {"marker": "o", "linestyle": "none"} if who == "perftest" else {
                "marker": ".", "linestyle": "--" if who.endswith("-rs") else "-"}
            ax.plot(*zip(*points), color=COLORS[who], label=RUNTIMES[who], **style)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set(title=title, xlabel="message size (bytes)", ylabel=ylabel)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def bar_chart(path, title, ylabel, bars):
    """One bar per (label, value, color)."""
    fig, ax = plt.subplots(figsize=(5, 4))
    labels, values, colors = zip(*bars)
    ax.bar(labels, values, color=colors)
    ax.bar_label(ax.containers[0], fmt="%.3g")
    ax.set(title=title, ylabel=ylabel)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def charts(m, folder, prefix="", where="shared memory"):
    """A chart per benchmark (PNG) in `folder`; returns (file name, caption) of each."""
    made = []
    ylabels = {"us": "latency (us)", "MB/s": "bandwidth (MB/s)", "messages/s": "messages/s"}
    for bench in sorted({b for b, _, _ in m} - {"launch", "memcpy", "cma",
                                                 "barrier"}):
        name = f"{prefix}{bench}.png"
        series = {who: [(s, v) for (b, s, w), v in m.items() if b == bench and w == who]
                  for who in RUNTIMES}
        line_chart(folder / name, f"osu_{bench}, {where}", ylabels[unit(bench)], series)
        made.append((name, f"osu_{bench} ({where})"))
    launch = [(RUNTIMES[w], m[("launch", 8, w)], COLORS[w]) for w in ("mpirt", "mpich")
              if ("launch", 8, w) in m]
    if launch:
        name = f"{prefix}launch.png"
        bar_chart(folder / name, "8 ranks of hello: launch to exit", "seconds", launch)
        made.append((name, "launch time, 8 ranks"))
    return made


def write_csv(path, records):
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(FIELDS)
        out.writerows(records)


def read_csv(path):
    with open(path, newline="") as f:
        return [[r["benchmark"], int(r["size"]), r["runtime"], int(r["repeat"]),
                 float(r["value"]), r["unit"]] for r in csv.DictReader(f)]


def summary(out, repeats, benches):
    records = collect(out, repeats, benches)
    write_csv(out / "results.csv", records)
    m = medians(records)
    for bench in benches:
        print(f"\n{bench} ({unit(bench)}), median of {repeats}")
        print("\n".join(table(m, bench)))
    charts(m, out)
    if ("memcpy", 1 << 22, "memcpy") not in m:
        return
    mpirt, mpich = m[("launch", 8, "mpirt")], m[("launch", 8, "mpich")]
    memcpy = m[("memcpy", 1 << 22, "memcpy")]
    cma = m[("cma", 1 << 22, "cma")]
    print(f"\nlaunch, 8 ranks hello (s): mpirt {mpirt:.3f}  MPICH {mpich:.3f}  "
          f"ratio {mpirt / mpich:.2f}")
    print(f"memcpy of 4 MiB on one core: {memcpy:.0f} MB/s")
    print(f"process_vm_readv of 4 MiB on one core (the single-copy ceiling): {cma:.0f} MB/s "
          f"({cma / memcpy:.0%} of memcpy)")


# Issue 8's targets: (what, benchmark, size, reference, factor), the reference a runtime
# measured alike or memcpy; mpirt must be at most factor times the reference where lower is
# better, at least where higher is.
TARGETS = [
    ("shm latency, 8 B", "latency", 8, "ompi", 0.8),
    ("shm message rate, 8 B", "mbw_mr", 8, "ompi", 1.2),
    ("shm bandwidth, 4 MiB", "bw", 1 << 22, "ompi", 1.0),
    ("shm bandwidth, 4 MiB, vs memcpy", "bw", 1 << 22, "memcpy", 0.85),
    ("allreduce 8 B, 4 ranks on 2 cores", "allreduce", 8, "ompi", 1.0),
    ("launch, rsrun -n 8 hello", "launch", 8, "mpich", 0.5),
    ("TCP latency, 8 B", "tcp latency", 8, "ompi", 1.0),
    ("TCP bandwidth, 4 MiB", "tcp bw", 1 << 22, "ompi", 1.0),
]


# The shared-memory targets whose work per message shm-callgrind.sh measures: the target's
# benchmark -> the loop that shows its work.
WORK_MEASURED = {"latency": "latency", "mbw_mr": "bw"}


def figure(v):
    return f"{v:,.0f}" if v >= 1000 else f"{v:.3g}"


def verdict(bench, ratio, factor):
    """Met or missed by the paired ratio, and by how much."""
    if math.isnan(ratio):
        return "no repeat ran both: not judged"
    if higher_is_better(bench.split()[-1]):
        return "met" if ratio >= factor else f"**missed**: {1 - ratio / factor:.0%} short"
    return "met" if ratio <= factor else f"**missed**: {ratio / factor - 1:.0%} over"


def machine_load(*outs):
    """What the load average was around each run (run.sh writes it), so that a reader knows
    whether other work shared the cores."""
    said = []
    for out in outs:
        path = out / "load.txt"
        if path.exists():
            said.append(f"`{out.name}`: " + "; ".join(path.read_text().strip().splitlines()))
    return ("The 1-minute load average on the host (`/proc/loadavg`) before and after each run "
            "(a load well above 0 means other work shared the cores, and single figures can "
            "then be off by a wide margin): " + ". ".join(said) + ".") if said else ""


def time_limits(out):
    """The runs run.sh stopped at its time limit, one line each."""
    path = out / "limits"
    return path.read_text().strip().splitlines() if path.exists() else []


# Issue 6's targets, on every UCX_TLS measured: mpirt --pml ucx within 10% of Open MPI's
# pml ucx, at the sizes ucx.sh also runs ucx_perftest at.
UCX_TARGETS = [("latency", 8, 1.1), ("latency", 8192, 1.1), ("bw", 1 << 16, 0.9),
               ("bw", 1 << 20, 0.9)]


def ucx_part(ucx_out, folder):
    """Issue 6's section (lines) and its charts, from ucx.sh -o UCX_OUTDIR: one folder per
    UCX_TLS, named as the setting with "_" for ","."""
    runs = sorted(d for d in ucx_out.iterdir() if (d / "latency.mpirt.1").exists()) \
        if ucx_out.is_dir() else []
    lines = ["", "## mpirt on UCX (issue 6)", ""]
    if not runs:
        failed = ucx_out.parent / f"{ucx_out.name}-failed"
        why = failed.read_text().strip() if failed.exists() else "no measurements were made"
        return lines + ["UCX was not measured:", "", "```", why, "```"], []
    lines += ["`rsrun --pml ucx` against Open MPI's `--mca pml ucx` (told to take any "
              "transport: `pml_ucx_tls any`, `pml_ucx_devices any`), both on the same "
              "`UCX_TLS`, two ranks on this host bound to a core each, beside UCX's own "
              "`ucx_perftest` (`tag_lat`, `tag_bw`: UCX without any MPI above it). Written by "
              "`ucx.sh`; medians of its interleaved repeats.", "",
              machine_load(*runs), "",
              "| target | mpirt | Open MPI pml ucx | ucx_perftest | ratio of medians | "
              "paired ratio | goal | verdict |",
              "|---|---|---|---|---|---|---|---|"]
    tables, made = [], []
    for run in runs:
        tls = run.name.replace("_", ",")
        repeats = len(list(run.glob("latency.mpirt.*")))
        records = collect(run, repeats, ["latency", "bw"])
        write_csv(folder / f"results-ucx-{run.name}.csv", records)
        m, pairs = medians(records), paired(records)
        for bench, size, factor in UCX_TARGETS:
            mine, other = m.get((bench, size, "mpirt")), m.get((bench, size, "ompi"))
            what = f"UCX_TLS={tls}, {'latency' if bench == 'latency' else 'bandwidth'}, " \
                   f"{size_name(size)}"
            if mine is None or other is None:
                lines.append(f"| {what} | | | | | | | not measured |")
                continue
            floor = m.get((bench, size, "perftest"))
            u = unit(bench)
            sign = "≥" if higher_is_better(bench) else "≤"
            ratio = paired_ratio(pairs, (bench, size, "mpirt"), (bench, size, "ompi"))
            lines.append(f"| {what} | {figure(mine)} {u} | {figure(other)} {u} | "
                         + (f"{figure(floor)} {u}" if floor else "") + " | "
                         f"{mine / other:.2f} | {ratio:.2f} | {sign} {factor:g}× Open MPI | "
                         f"{verdict(bench, ratio, factor)} |")
        # The per-size tables leave ucx_perftest out: it ran at the target sizes only.
        osu = {k: v for k, v in m.items() if k[2] != "perftest"}
        for bench in ("latency", "bw"):
            tables += ["", f"### UCX_TLS={tls}: {bench} ({unit(bench)}), medians", "", "```"]
            tables += list(table(osu, bench)) + ["```"]
        made += charts(m, folder, f"ucx_{run.name}_", f"UCX_TLS={tls}, --pml ucx / pml ucx")
    return lines + tables, made


def work_part(callgrind_out, missed):
    """The instructions each runtime spends per 8-byte message over shared memory
    (shm-callgrind.sh -o CALLGRIND_OUTDIR), and what they say about the shared-memory latency
    and rate targets in `missed`."""
    lines = ["", "## Work per message (callgrind)", ""]
    table = callgrind_out / "callgrind.csv"
    if not table.exists():
        failed = callgrind_out.parent / f"{callgrind_out.name}-failed"
        why = failed.read_text().strip() if failed.exists() else "no profile was made"
        return lines + ["Not measured:", "", "```", why, "```"]
    n = {(b, r, int(k)): float(v) for b, r, k, v in
         (row.split(",") for row in table.read_text().split()[1:])}
    work = [
        ("receiving one message of a window of 64 (`osu_bw`, rank 1)", "bw", 1),
        ("sending one message of a window of 64 (`osu_bw`, rank 0)", "bw", 0),
        ("one round trip of `osu_latency`, each rank", "latency", 0),
    ]
    lines += ["Instructions run once per 8-byte message (`compare/shm-callgrind.sh`: the same "
              "OSU loops as above under callgrind; `tools/callgrind-busy.py` keeps the "
              "instructions run a whole multiple of the message count, so that spinning, "
              "start-up and per-window work drop out). Counts repeat under load, unlike "
              "timings.", "",
              "| work | mpirt | Open MPI | ratio |", "|---|---|---|---|"]
    for what, bench, rank in work:
        mine, other = n[(bench, "mpirt", rank)], n[(bench, "ompi", rank)]
        lines.append(f"| {what} | {mine:,.0f} | {other:,.0f} | {mine / other:.2f} |")
    for what, bench in missed:
        # The message rate is bound by the busier side of the window; latency by both ranks.
        ranks = [0, 1] if bench == "bw" else [0]
        ratio = max(n[(bench, "mpirt", k)] / n[(bench, "ompi", k)] for k in ranks)
        if ratio <= 1:
            lines += ["", f"{what}: missed although mpirt runs no more instructions per "
                      f"message than Open MPI (at most {ratio:.2f} of its count above), so the "
                      "gap is in how long those instructions take here, not in how many there "
                      "are: callgrind counts neither the cache lines each message moves "
                      "between the two cores nor the waits on them."]
        else:
            lines += ["", f"{what}: missed, and mpirt runs {ratio:.2f} times Open MPI's "
                      "instructions per message: the work per message is a gap of its own."]
    return lines


def size_name(size):
    for shift, suffix in ((20, "MiB"), (10, "KiB")):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {suffix}"
    return f"{size} B"


def sweep_part(dirs, folder):
    """Issue 23's collective sweep, one run.sh folder per rank count: the markdown lines and
    the heat map, of mpirt's paired ratio to Open MPI per operation, size and rank count."""
    cells, outliers, ompi_only = {}, [], set()
    for out in dirs:
        ranks = int(out.name.split("-")[-1])
        records = read_csv(out / "results.csv")
        runs = paired(records)
        shutil.copy(out / "results.csv", folder / f"results-coll-{ranks}.csv")
        for (bench, size, who), values in runs.items():
            if bench.endswith("overlap"):
                continue
            cell = median(list(values.values()))
            outliers += [(bench, size, ranks, who, v, cell) for v in values.values()
                         if v > 3 * cell]
            if who == "ompi":
                ratio = paired_ratio(runs, (bench, size, "mpirt"), (bench, size, "ompi"))
                if math.isnan(ratio):
                    ompi_only.add(bench)
                else:
                    cells[bench, size, ranks] = ratio
    lines = ["", SWEEP_HEADING, ""]
    if not cells:
        return lines + ["Not measured: no sweep folder holds mpirt and Open MPI runs."], []
    benches = [b for b in COLLECTIVES + [f"i{c}" for c in COLLECTIVES]
               if any(k[0] == b for k in cells)]
    sizes = sorted({k[1] for k in cells})
    rank_counts = sorted({k[2] for k in cells})
    ratios = list(cells.values())
    geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    over = sorted(((r, k) for k, r in cells.items() if r > 1.0), reverse=True)
    lines += [f"mpirt's time over Open MPI's (paired ratio, lower is better) on "
              f"{', '.join(map(str, rank_counts))} ranks: {len(ratios)} cells, geometric mean "
              f"{geomean:.2f} (target 0.7), {len(over)} over 1.0 (target none), "
              f"{len(outliers)} runs over 3x the median of their cell (target none).", ""]
    if over:
        lines += ["Cells over 1.0, worst first: " + ", ".join(
            f"{b} {size_name(s)} on {n} ranks {r:.2f}" for r, (b, s, n) in over[:20])
            + (" ..." if len(over) > 20 else ""), ""]
    if ompi_only:
        lines += ["Measured on the C MPIs only (mpirt has no port of them yet): "
                  + ", ".join(sorted(ompi_only)) + ".", ""]
    fig, axes = plt.subplots(1, len(rank_counts), squeeze=False,
                             figsize=(2 + 0.55 * len(sizes) * len(rank_counts),
                                      1 + 0.4 * len(benches)))
    for ax, n in zip(axes[0], rank_counts):
        grid = [[math.log2(cells[b, s, n]) if (b, s, n) in cells else float("nan")
                 for s in sizes] for b in benches]
        image = ax.imshow(grid, cmap="RdYlGn_r", vmin=-2, vmax=2, aspect="auto")
        ax.set_title(f"{n} ranks")
        ax.set_xticks(range(len(sizes)), [size_name(s) for s in sizes], rotation=90,
                      fontsize=7)
        ax.set_yticks(range(len(benches)), benches if ax is axes[0][0] else [], fontsize=7)
        for i, b in enumerate(benches):
            for j, s in enumerate(sizes):
                if (b, s, n) in cells:
                    ax.text(j, i, f"{cells[b, s, n]:.1f}", ha="center", va="center",
                            fontsize=5)
    fig.colorbar(image, ax=axes[0].tolist(), label="log2(mpirt / Open MPI)")
    fig.savefig(folder / "collectives-heatmap.png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    for n in rank_counts:
        lines += [f"### {n} ranks", "", "| operation | " + " | ".join(map(size_name, sizes))
                  + " |", "|---" * (len(sizes) + 1) + "|"]
        lines += [f"| {b} | " + " | ".join(f"{cells[b, s, n]:.2f}" if (b, s, n) in cells
                                          else "" for s in sizes) + " |" for b in benches]
        lines.append("")
    lines += [f"Every measurement: `report/results-coll-RANKS.csv`."]
    return lines, [("collectives-heatmap.png",
                    "mpirt / Open MPI per collective, size and rank count")]


SWEEP_HEADING = "## Collectives against Open MPI (issue 23)"


# Fewer cells than this say too little for a mean: one cell is one noisy pair of runs.
MIN_MEAN_CELLS = 10


def mpich_part(dirs):
    """The sweep's geometric mean of mpirt's paired ratio to MPICH per rank count, where MPICH
    finished (run.sh stops its oversubscribed runs at a time limit) in `MIN_MEAN_CELLS` cells
    at least; "not measured" below that."""
    said = []
    for out in dirs:
        runs = paired(read_csv(out / "results.csv"))
        ratios = [paired_ratio(runs, (b, s, "mpirt"), (b, s, "mpich"))
                  for (b, s, who) in runs if who == "mpich" and (b, s, "mpirt") in runs
                  and not b.endswith("overlap")]
        ratios = [r for r in ratios if r > 0 and not math.isnan(r)]
        if 0 < len(ratios) < MIN_MEAN_CELLS:
            said.append(f"{out.name.split('-')[-1]} ranks not measured ({len(ratios)} cells, "
                        f"fewer than {MIN_MEAN_CELLS})")
        elif ratios:
            geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
            said.append(f"{out.name.split('-')[-1]} ranks {geomean:.2f} ({len(ratios)} cells)")
    return ("Against MPICH, geometric mean of mpirt's paired ratio: " + ", ".join(said) + "."
            if said else "MPICH: no cell measured (its oversubscribed runs hit run.sh's limit).")


def sweep_only(file, commands, dirs):
    """Replaces FILE's sweep section (from its heading to the next second-level heading) with
    one made from `dirs`, self-contained: heat map, load, CPU model and commands."""
    folder = file.parent / "report"
    folder.mkdir(parents=True, exist_ok=True)
    sh = lambda c: subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
    lines, made = sweep_part(dirs, folder)
    limited = [line for out in dirs for line in time_limits(out)]
    cpu = " ".join(sh("lscpu | grep 'Model name'").split())
    lines += ["", mpich_part(dirs), "",
              f"Measured on {sh('date -u +%Y-%m-%d')} at commit "
              f"`{sh('git rev-parse --short HEAD')}` on `{cpu}`, "
              f"{sh('nproc')} CPUs; Open MPI with `--oversubscribe` (it yields while it waits "
              "past the cores), rsrun with `--bind-to core` (every rank unbound where a host's ranks outnumber its CPUs). "
              + machine_load(*dirs), ""]
    if limited:
        lines += ["Runs stopped at run.sh's time limit:", ""] + [f"- {l}" for l in limited] + [""]
    lines += [f"![{caption}](report/{name})" for name, caption in made]
    lines += ["", "```", commands, "```", ""]
    old = file.read_text().splitlines() if file.exists() else []
    start = next((i for i, l in enumerate(old) if l == SWEEP_HEADING), None)
    if start is None:
        at = next((i for i, l in enumerate(old) if l == "## Charts"), len(old))
        new = old[:at] + lines[1:] + old[at:]
    else:
        end = next((i for i in range(start + 1, len(old)) if old[i].startswith("## ")), len(old))
        new = old[:start] + lines[1:] + old[end:]
    file.write_text("\n".join(new) + "\n")


def markdown(file, commands, shm, tcp_out, ucx_out=None, callgrind_out=None, sweep=()):
    tcp = tcp_out if (tcp_out / "results.csv").exists() else None
    folder = file.parent / "report"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    records = read_csv(shm / "results.csv")
    repeats = max(r[3] for r in records)
    m, runs = medians(records), paired(records)
    made = charts(m, folder)
    if tcp:
        tcp_records = read_csv(tcp / "results.csv")
        tm = medians(tcp_records)
        made += charts(tm, folder, "tcp_", "TCP between two hosts")
        m.update({(f"tcp {b}", s, w): v for (b, s, w), v in tm.items()})
        runs.update({(f"tcp {b}", s, w): v for (b, s, w), v in paired(tcp_records).items()})
    shutil.copy(shm / "results.csv", folder / "results.csv")
    if tcp:
        shutil.copy(tcp / "results.csv", folder / "results-tcp.csv")
    sh = lambda c: subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
    lines = [
        "# mpirt against Open MPI and MPICH (issue 8)", "",
        "Written by `osu-benches/compare/report.sh` (the commands it ran are at the end) on "
        f"{sh('date -u +%Y-%m-%d')} at commit "
        f"`{sh('git rev-parse --short HEAD')}`: medians of {repeats} interleaved repeats (mpirt, "
        "Open MPI, MPICH, mpirt, ...), each runtime running the same OSU 7.4 loops "
        "(mpirt's ports; `compare/osu_p2p.c` and `compare/osu_coll.c` on the others). "
        + ("The columns marked rs (rsmpi) run mpirt's own benchmark source, built on rsmpi "
           "over that C MPI (`osu-benches` feature `rsmpi`). "
           if any(w.endswith("-rs") for _, _, w in m) else "")
        + "Ratios are mpirt's figure over the other's. The verdicts go by the paired ratio: "
        "the median of each repeat's ratio, mpirt's run over the other's run of the same "
        "repeat, made seconds apart. On this VM two-rank latency switches between a fast and "
        "a slow phase every few seconds (vCPU placement on the host), for every runtime, and "
        "medians taken apart can each fall in a different phase; a pair mostly shares one.", "",
        machine_load(shm, tcp_out), "",
        "The collective tests run 4 ranks on the 2 cores. Open MPI is started with "
        "`--oversubscribe`, under which it yields the CPU while it waits; MPICH's ranks poll "
        "without yielding, so a rank waiting for one that is not running burns the time slice "
        "that rank needs.", "",
        "## Issue 8's targets", "",
        "| target | mpirt | reference | ratio of medians | paired ratio | goal | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    missed = []
    for what, bench, size, ref, factor in TARGETS:
        ref_key = (ref, size, ref) if ref.startswith("memcpy") else (bench, size, ref)
        mine, other = m.get((bench, size, "mpirt")), m.get(ref_key)
        refname = RUNTIMES.get(ref, ref)
        u = unit(bench.split()[-1])
        if mine is None or other is None:
            lines.append(f"| {what} | | | | | | not measured (see below) |")
            continue
        ratio = paired_ratio(runs, (bench, size, "mpirt"), ref_key)
        sign = "≥" if higher_is_better(bench.split()[-1]) else "≤"
        judged = verdict(bench, ratio, factor)
        if judged.startswith("**missed**") and bench in WORK_MEASURED:
            missed.append((what, WORK_MEASURED[bench]))
            judged += " (why: see Work per message)"
        lines.append(f"| {what} | {figure(mine)} {u} | {refname} {figure(other)} {u} | "
                     f"{mine / other:.2f} | {ratio:.2f} | {sign} {factor:g}× {refname} | "
                     f"{judged} |")
    failed = tcp_out.parent / f"{tcp_out.name}-failed"
    if failed.exists():
        lines += ["", "TCP was not measured: the run between the test hosts (shared with other "
                  "engineers, who had them up) failed with", "", "```",
                  failed.read_text().strip(), "```"]
    elif not tcp:
        lines += ["", "TCP was not measured: it needs root and the test hosts "
                  "(`../shared/testhosts/ssh-hosts`)."]
    if callgrind_out:
        lines += work_part(callgrind_out, missed)
    limited = time_limits(shm)
    if limited:
        lines += ["", "Runs stopped at run.sh's time limit (their figures are missing below):",
                  ""] + [f"- {line}" for line in limited]
    for bench in sorted({b for b, _, w in m if w == "mpirt"} - {"launch"}):
        lines += ["", f"## {bench} ({unit(bench.split()[-1])}), medians", "", "```"]
        lines += list(table(m, bench)) + ["```"]
    if ("launch", 8, "mpich") in m:
        mpirt, mpich = m[("launch", 8, "mpirt")], m[("launch", 8, "mpich")]
        lines += ["", "## Launch and copy ceilings", "",
                  f"- 8 ranks of `hello`, launch to exit: rsrun {mpirt:.3f} s, mpiexec.mpich "
                  f"{mpich:.3f} s (ratio {mpirt / mpich:.2f}).",
                  f"- memcpy of 4 MiB on one core: {m[('memcpy', 1 << 22, 'memcpy')]:.0f} MB/s "
                  "between two cache-warm buffers (osu_bw's window lands in one receive "
                  "buffer, in OSU's source and in every port here, mpirt's through its raw "
                  "immediate receive); process_vm_readv of 4 MiB: "
                  f"{m[('cma', 1 << 22, 'cma')]:.0f} MB/s."]
    if sweep:
        sweep_lines, sweep_charts = sweep_part(sweep, folder)
        lines += sweep_lines
        made += sweep_charts
    if ucx_out:
        ucx_lines, ucx_charts = ucx_part(ucx_out, folder)
        lines += ucx_lines
        made += ucx_charts
    lines += ["", "## Charts", ""] + [f"![{caption}](report/{name})" for name, caption in made]
    lines += ["", "Every measurement: `report/results.csv`"
              + (" and `report/results-tcp.csv`" if tcp else "")
              + (", UCX's in `report/results-ucx-*.csv`" if ucx_out and any(
                  folder.glob("results-ucx-*.csv")) else "")
              + " (benchmark, size, runtime, repeat, value, unit).", "",
              "## Machine", "", "```",
              f"$ nproc\n{sh('nproc')}", f"$ lscpu | head\n{sh('lscpu | head')}",
              f"$ uname -r\n{sh('uname -r')}",
              f"$ mpirun.openmpi --version | head -1\n{sh('mpirun.openmpi --version | head -1')}",
              f"$ mpichversion | head -1\n{sh('mpichversion | head -1')}",
              f"$ ucx_info -v | head -1\n{sh('ucx_info -v 2>/dev/null | head -1')}", "```", "",
              "## Commands", "", "```", commands, "```", ""]
    file.write_text("\n".join(lines))


# A script, or a module whose readers and ratios others use (compare/bundle-run.sh).
if __name__ == "__main__":
    if sys.argv[1] == "--sweep":
        sweep_only(Path(sys.argv[2]), sys.argv[3], [Path(d) for d in sys.argv[4:]])
    elif sys.argv[1] == "--markdown":
        markdown(Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), Path(sys.argv[5]),
                 Path(sys.argv[6]) if len(sys.argv) > 6 else None,
                 Path(sys.argv[7]) if len(sys.argv) > 7 else None,
                 [Path(d) for d in sys.argv[8:]])
    else:
        summary(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])
