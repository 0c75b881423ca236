# Sourced by shm-callgrind.sh, ucx-callgrind.sh and coll-callgrind.sh once their options are read: checks for
# valgrind, sets $out (the folder $keep names, made if need be, else a temporary one removed
# at exit), builds Open MPI's C port of the OSU loops there, and sets $callgrind.
if ! command -v valgrind >/dev/null; then
    echo "$0: valgrind is missing (apt-get install -y valgrind)" >&2
    exit 1
fi
if [ -n "$keep" ]; then
    mkdir -p "$keep"
    out=$(cd "$keep" && pwd)
else
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
fi
mpicc.openmpi -O2 -Wno-stringop-overflow -o "$out/osu_p2p.ompi" osu-benches/compare/osu_p2p.c
callgrind="valgrind --tool=callgrind --dump-instr=yes"
