#!/usr/bin/env bash
# Packs the one-host comparison of mpirt against Open MPI into one folder that runs on an x86-64
# Linux machine with neither Rust nor an MPI installed (a larger machine, say):
# mpirt's release binaries (stripped), the C ports (compare/osu_coll.c, osu_p2p.c) built
# against this machine's Open MPI, and that Open MPI's runtime: mpirun, its libraries, and the
# components a one-host run can load, with every library they need beyond the C library,
# relocated with OPAL_PREFIX. Run the folder's run.sh there (compare/bundle-run.sh: which
# comparisons, sizes and rank counts, and how it keeps to a time budget, are said there).
#   osu-benches/compare/bundle.sh [-o DIR] [-x BIN_DIR]
# -o: the folder to write (target/bundle): an earlier bundle there is replaced, any other
#     folder that holds files is refused.
# -x: mpirt's binaries from BIN_DIR, built already (by default this checkout's release build,
#     built first).
# Network and OpenSHMEM components (UCX, libfabric, verbs, PSM, netlink) stay behind: ranks on
# one host talk through btl vader, and those components would pull in the network stacks'
# libraries. Needs Debian's openmpi-bin and libopenmpi-dev (mpicc.openmpi), and binutils.
set -euo pipefail
out=
bin=
# DIR and BIN_DIR are the caller's paths: resolved before the script moves to the checkout.
while getopts "o:x:" opt; do
    case $opt in
        o) out=$(realpath -m "$OPTARG") ;;
        x) bin=$(realpath "$OPTARG") ;;
        *) sed -n 9,13p "$0" >&2; exit 2 ;;
    esac
done
cd "$(dirname "$0")/../.."
out=${out:-target/bundle}
# DIR is replaced: only an earlier bundle, or a folder empty or not there yet.
if [ -n "$(ls -A "$out" 2>/dev/null)" ] && ! [ -f "$out/run.sh" ] && ! [ -f "$out/env.sh" ]; then
    echo "$0: -o $out is not an earlier bundle (no run.sh, no env.sh): nothing removed" >&2
    exit 2
fi
for tool in mpicc.openmpi ompi_info strip ldd; do
    command -v $tool >/dev/null || { echo "$0: $tool is missing" >&2; exit 1; }
done
c=osu-benches/compare
collectives="barrier bcast reduce allreduce allgather alltoall gather scatter reduce_scatter"
programs="rsrun $(printf 'osu_%s ' $collectives latency mbw_mr bw)"
if [ -z "$bin" ]; then
    cargo build --release -q -p launcher -p osu-benches
    bin=$(realpath "${CARGO_TARGET_DIR:-target}")/release
fi
rm -rf "$out"
# The layout of a checkout, so that the scripts copied below find what they look for (their
# binaries in target/release, one another in osu-benches/compare).
mkdir -p "$out/target/release" "$out/$c" "$out/c/bin" "$out/bin" "$out/ompi/lib" "$out/glibc"
for p in $programs; do
    strip -o "$out/target/release/$p" "$bin/$p"
done
cp $c/bundle-run.sh "$out/run.sh"
cp $c/many-ranks.sh $c/shm_peak.py $c/report.py $c/python.sh "$out/$c/"
mpicc.openmpi -O2 -o "$out/c/bin/osu_coll" $c/osu_coll.c
mpicc.openmpi -O2 -Wno-stringop-overflow -o "$out/c/bin/osu_p2p" $c/osu_p2p.c
# What the scripts start, so that a machine with an older C library runs them through this
# one's (env.sh).
for port in osu_coll osu_p2p; do
    printf '#!/bin/sh\nexec $BUNDLE_LOADER "$BUNDLE/c/bin/%s" "$@"\n' $port > "$out/c/$port"
    chmod +x "$out/c/$port"
done

# Open MPI's installation directories; with OPAL_PREFIX set, each one under the configured
# prefix moves with it, so DIR is copied to ompi/DIR and OPAL_PREFIX is ompi/PREFIX.
path() { ompi_info --parsable --path "$1" | sed -n "s/^path:$1://p"; }
prefix=$(path prefix)
pkglibdir=$(path pkglibdir)
pkgdatadir=$(path pkgdatadir)
for dir in "$pkglibdir" "$pkgdatadir"; do
    case $dir in
        "$prefix"/*) ;;
        *) echo "$0: Open MPI's $dir lies outside its prefix $prefix: OPAL_PREFIX cannot move it" >&2
           exit 1 ;;
    esac
done
mkdir -p "$out/ompi$pkglibdir" "$out/ompi$prefix/bin" "$out/ompi/etc" "$out/ompi${pkgdatadir%/*}"
cp -rL "$pkgdatadir" "$out/ompi$pkgdatadir"
# Debian's defaults (pml, btl and osc choices), read from the bundle's copy through
# mca_base_param_files: the sysconfdir itself does not move with OPAL_PREFIX.
conf=$(path sysconfdir)/openmpi-mca-params.conf
if [ -f "$conf" ]; then
    cp "$conf" "$out/ompi/etc/"
fi
network='lib(ucp|uct|ucs|ucm|fabric|ibverbs|rdmacm|psm|psm2|infinipath|nl-[0-9a-z-]*|oshmem|efa)\.so'
kept=()
for component in "$pkglibdir"/*.so; do
    # Whole before grep: grep -q stops reading at its match, and under pipefail ldd's SIGPIPE
    # would read as "not matched".
    libraries=$(ldd "$component")
    if ! grep -Eq "$network" <<< "$libraries"; then
        cp "$component" "$out/ompi$pkglibdir/"
        kept+=("$component")
    fi
done
runner=$(readlink -f "$(command -v mpirun.openmpi)")
cp "$runner" "$out/ompi$prefix/bin/mpirun"
cp "$(command -v ompi_info)" "$out/ompi$prefix/bin/ompi_info"
# An external PMIx (Debian's) keeps a few components of its own beside its library.
pmix=$(ompi_info --parsable --config | grep -o "'--with-pmix=[^']*'" | sed "s/.*=//; s/'//" || true)
if [ -n "$pmix" ] && [ -d "$pmix/lib/pmix" ]; then
    mkdir -p "$out/ompi$pmix/lib"
    cp -rL "$pmix/lib/pmix" "$out/ompi$pmix/lib/"
    if [ -d "$pmix/share" ]; then
        cp -rL "$pmix/share" "$out/ompi$pmix/"
    fi
fi
# Every library these need, by the name they ask for, except the C library's own and GCC's
# libgcc_s, which the other machine has (VERSION names the newest glibc symbol needed).
libc='^(libc|libm|libpthread|libdl|librt|libresolv|libutil|ld-linux-x86-64|libgcc_s)\.so'
needed=("$out/ompi$prefix/bin/"* "${kept[@]}" "$out/c/bin/"*)
if [ -n "$pmix" ]; then
    needed+=("$pmix/lib/pmix/"*.so)
fi
ldd "${needed[@]}" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u |
    while read -r name file; do
        if ! [[ $name =~ $libc ]]; then
            cp -L "$file" "$out/ompi/lib/$name"
        fi
    done
# Debian's libraries need the glibc they were built with (libevent 2.1 in Debian 12 calls
# glibc 2.36's arc4random): the newest version Open MPI's files here ask for, and that C
# library itself, which env.sh runs Open MPI's programs with on a machine whose own is older.
newest=$(objdump -T "$out/ompi/lib/"* "$out/ompi$prefix/bin/"* "$out/c/bin/"* "${kept[@]}" \
    2>/dev/null | grep -o 'GLIBC_2\.[0-9]*' | sort -uV | tail -1)
echo "${newest#GLIBC_}" > "$out/glibc/needed"
libc_dir=$(dirname "$(ldd "$out/c/bin/osu_coll" | awk '$1 == "libc.so.6" { print $3 }')")
for lib in libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libresolv.so.2; do
    cp -L "$libc_dir/$lib" "$out/glibc/"
done
cp -L "$(ldd "$out/c/bin/osu_coll" | awk '/ld-linux-x86-64/ { print $1 }')" "$out/glibc/"

cat > "$out/env.sh" <<EOF
# Sourced by run.sh and bin/*: Open MPI from this folder, wherever it lies.
bundle=\$(cd "\$(dirname "\${BASH_SOURCE[0]:-\$0}")" && pwd)
export BUNDLE=\$bundle
# Open MPI's programs (mpirun, the C ports) run through the loader of the C library they were
# built with where this machine's is older (or BUNDLE_FORCE_LOADER is set), from glibc/ and
# nowhere else: the machine's own programs keep its own.
bundle_needed=\$(cat "\$bundle/glibc/needed")
bundle_have=\$(getconf GNU_LIBC_VERSION | cut -d' ' -f2)
BUNDLE_LOADER=
if [ -n "\${BUNDLE_FORCE_LOADER:-}" ] ||
    [ "\$(printf '%s\n' "\$bundle_needed" "\$bundle_have" | sort -V | head -1)" != "\$bundle_needed" ]; then
    BUNDLE_LOADER="\$bundle/glibc/ld-linux-x86-64.so.2 --library-path \$bundle/glibc:\$bundle/ompi/lib"
fi
export BUNDLE_LOADER
export OPAL_PREFIX=\$bundle/ompi$prefix
export LD_LIBRARY_PATH=\$bundle/ompi/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export PATH=\$bundle/bin:\$PATH
export OMPI_MCA_mca_base_param_files=\$bundle/ompi/etc/openmpi-mca-params.conf
# One host: ob1 over shared memory, as Debian's defaults choose there; no ssh is needed to
# start ranks here, but the launcher wants an agent named.
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_plm_rsh_agent=false
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
${pmix:+export PMIX_PREFIX=\$bundle/ompi$pmix
export PMIX_MCA_mca_base_component_path=\$bundle/ompi$pmix/lib/pmix}
# hwloc's plugins (PCI, GPUs) stay behind: binding needs only the CPUs.
export HWLOC_PLUGINS_PATH=\$bundle/ompi/lib/no-hwloc-plugins
EOF
# The scripts call Open MPI's launcher by Debian's name; no links, which not every copy keeps.
for tool in mpirun:mpirun mpirun.openmpi:mpirun ompi_info:ompi_info; do
    printf '#!/usr/bin/env bash\nsource "$(dirname "$0")/../env.sh"\nexec $BUNDLE_LOADER "$OPAL_PREFIX/bin/%s" "$@"\n' \
        "${tool#*:}" > "$out/bin/${tool%:*}"
    chmod +x "$out/bin/${tool%:*}"
done
{
    echo "scripts at commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (modified)')"
    echo "binaries from $bin, whose checkout is at $(git -C "$bin" rev-parse --short HEAD 2>/dev/null)"
    echo "Open MPI $(ompi_info --parsable | sed -n 's/^ompi:version:full://p')"
    echo "Open MPI's files need $newest"
} > "$out/VERSION"
echo "wrote $out ($(du -sh "$out" | cut -f1)): $(cat "$out/VERSION" | tr '\n' ';')"
