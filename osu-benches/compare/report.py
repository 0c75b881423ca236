"""Medians of the interleaved runs: a CSV per benchmark and a table with ratios.
   report.py OUTDIR REPEATS BENCHMARK..."""
import statistics
import sys
from pathlib import Path

out, repeats = Path(sys.argv[1]), int(sys.argv[2])
benches = sys.argv[3:]
units = {"bw": "MB/s", "bibw": "MB/s"}


def rows(path):
    """Size -> value; the barrier's one value (no size column in OSU's format) is size 0."""
    values = [l.split() for l in path.read_text().splitlines() if l and not l.startswith("#")]
    return {int(v[0]) if len(v) > 1 else 0: float(v[-1]) for v in values}


def median(values):
    return statistics.median(values) if values else float("nan")


for bench in benches:
    unit = units.get(bench, "us")
    runs = {who: [rows(out / f"{bench}.{who}.{r}") for r in range(1, repeats + 1)]
            for who in ("mpirt", "ompi", "mpich")}
    sizes = sorted(runs["mpirt"][0])
    print(f"\n{bench} ({unit}), median of {repeats}")
    print(f"{'size':>9} {'mpirt':>10} {'OpenMPI':>10} {'MPICH':>10} {'/OMPI':>7} {'/MPICH':>7}")
    with open(out / f"{bench}.csv", "w") as csv:
        csv.write("size,mpirt,openmpi,mpich\n")
        for s in sizes:
            m = {who: median([r[s] for r in runs[who] if s in r]) for who in runs}
            csv.write(f"{s},{m['mpirt']},{m['ompi']},{m['mpich']}\n")
            print(f"{s:>9} {m['mpirt']:>10.2f} {m['ompi']:>10.2f} {m['mpich']:>10.2f} "
                  f"{m['mpirt'] / m['ompi']:>7.2f} {m['mpirt'] / m['mpich']:>7.2f}")

def durations(path):
    return [float(b) - float(a) for a, b in (l.split() for l in path.read_text().splitlines())]


# Launch times and memcpy are measured on one host only.
if not (out / "memcpy.txt").exists():
    sys.exit()
launch = {who: median(durations(out / f"launch.{who}")) for who in ("mpirt", "mpich")}
memcpy = median([float(x) for x in (out / "memcpy.txt").read_text().split()])
print(f"\nlaunch, 8 ranks hello (s): mpirt {launch['mpirt']:.3f}  MPICH {launch['mpich']:.3f}  "
      f"ratio {launch['mpirt'] / launch['mpich']:.2f}")
print(f"memcpy of 4 MiB on one core: {memcpy:.0f} MB/s")
cma = [[float(x) for x in line.split()] for line in (out / "cma.txt").read_text().splitlines()]
whole, chunked = (median(c) for c in zip(*cma))
print(f"process_vm_readv of 4 MiB on one core (the single-copy ceiling): {whole:.0f} MB/s "
      f"({whole / memcpy:.0%} of memcpy); in 256 KiB calls {chunked:.0f} MB/s")
