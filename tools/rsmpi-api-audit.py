#!/usr/bin/env python3
"""rsmpi 0.8's public API against mpirt's, from rustdoc's JSON of both (tools/rsmpi-api.sh
makes them). Every item of rsmpi that does not hand out or take a C handle (`ffi`, `raw`,
`AsRaw`, `from_raw`, ...) must exist in mpirt (named `mpi`, as a port renames it) under the same
path, of the same kind, with the same parameters and result (types compared by their last path
segment, generics as such, C's names as Rust's), and every trait rsmpi implements for a type
mpirt must implement too; or be one of the differences listed below, each with its reason
(README.md, "Porting from rsmpi", says them to users). Exits 1 on anything else.

usage: rsmpi-api-audit.py RSMPI_JSON MPIRT_JSON [--list]
"""
import json
import re
import sys

# What hands out or takes a C handle (the issue leaves them out), and rsmpi's plumbing.
C_HANDLE = re.compile(
    r"(^|::)(ffi|raw|internal)(::|$)|(^|::)(AsRaw|AsRawMut|FromRaw|MatchesRaw)(::|$)"
    r"|(^|::)(as_raw|as_raw_mut|from_raw|into_raw|raw|try_from_raw)$"
    # C's attribute callbacks (an MPI_Comm and raw pointers) and a raw key value.
    r"|(^|::)(comm_copy_attr_fn|comm_delete_attr_fn|new_unchecked)$"
)


# The same types under other names: C's names for Rust's, and the crates' aliases of i32.
ALIASES = {"c_int": "i32", "c_double": "f64", "Count": "i32", "Rank": "i32", "Tag": "i32",
           "Key": "i32",
           "Complex32": "Complex<f32>", "Complex64": "Complex<f64>",
           "CollectiveRequest": "Request"}


# rustdoc's JSON changes between toolchains; this is the one the script was written against.
FORMAT_VERSION = 57
# The exit code when a JSON file is of another format: nothing was compared (tools/rsmpi-api.sh
# says so and skips).
OTHER_FORMAT = 3

# What mpirt does otherwise, on purpose: (pattern over "kind path" lines, or "impl Trait for
# Type" lines, why).
DIFFERENCES = [
    (r"(^|::|^impl )(AsDatatype|Collection|Pointer|PointerMut)(::|$| )",
     "rsmpi's buffer protocol hands out a C datatype handle and untyped pointers; mpirt's "
     "Buffer and BufferMut say the same (pointer, count, datatype) in one trait each"),
    (r"^trait +mpi::(datatype::)?traits::Datatype$|^impl Datatype for ",
     "rsmpi's Datatype trait is a C handle (AsRaw<Raw = MPI_Datatype>); mpirt's Datatype is "
     "a value, and generic code bounds on UncommittedDatatype"),
    (r"^kind mpi::datatype::Datatype$", "as above: a value, not a trait"),
    (r"^kind mpi::Error$",
     "rsmpi's Error is the C error code (a c_int); mpirt's names the rank, the operation and "
     "the cause"),
    (r"^kind mpi::traits::Equivalence$",
     "both are there: the derive and the trait share the name, and rustdoc lists one first"),
    (r"^impl From<i32> for (CommunicatorRelation|GroupRelation|Threading)$",
     "conversions from the C library's constants (MPI_IDENT, MPI_THREAD_*)"),
    (r"^impl Drop for ", "what dropping does is compared, not whether a Drop impl does it"),
    (r"^impl (Send|Sync) for (Universe|LocalScope)$",
     "handles stay on their thread at every level (threads get their own: mpirt::threads)"),
    (r"^impl Buffer(Mut)? for \[G; D\]$",
     "an array is an Equivalence type in mpirt, so a buffer through `T: Equivalence`: the "
     "same elements"),
]


def expected(line):
    for pattern, why in DIFFERENCES:
        if re.search(pattern, line):
            return why
    return None


def render(t):
    """A type as short text: last path segments only, so both crates' spellings compare."""
    if t is None:
        return "()"
    (kind, v), = t.items()
    if kind == "primitive":
        return ALIASES.get(v, v)
    if kind == "generic":
        return "Self" if v == "Self" else "G"
    if kind == "resolved_path":
        name = v["path"].split("::")[-1]
        name = ALIASES.get(name, name)
        return name + render_args(v.get("args"))
    if kind == "borrowed_ref":
        return "&" + ("mut " if v["is_mutable"] else "") + render(v["type"])
    if kind == "raw_pointer":
        return "*" + ("mut " if v["is_mutable"] else "const ") + render(v["type"])
    if kind == "slice":
        return "[" + render(v) + "]"
    if kind == "array":
        return "[" + render(v["type"]) + "; " + str(v["len"]) + "]"
    if kind == "tuple":
        return "(" + ", ".join(render(x) for x in v) + ")"
    if kind == "dyn_trait":
        return "dyn " + " + ".join(p["trait"]["path"].split("::")[-1] for p in v["traits"])
    if kind == "impl_trait":
        return "impl " + " + ".join(
            b["trait_bound"]["trait"]["path"].split("::")[-1]
            for b in v if "trait_bound" in b
        )
    if kind == "qualified_path":
        return "<" + render(v["self_type"]) + ">::" + v["name"]
    if kind == "function_pointer":
        return "fn(..)"
    return kind


def render_args(args):
    if not args or "angle_bracketed" not in args:
        return ""
    parts = []
    for a in args["angle_bracketed"]["args"]:
        if "type" in a:
            parts.append(render(a["type"]))
        elif "lifetime" in a:
            continue
        elif "const" in a:
            parts.append("N")
    return "<" + ", ".join(parts) + ">" if parts else ""


class Api:
    def __init__(self, path, crate):
        doc = json.load(open(path))
        if doc.get("format_version") != FORMAT_VERSION:
            print(f"{path}: rustdoc JSON format {doc.get('format_version')}, but this script "
                  f"reads format {FORMAT_VERSION} (Rust 1.95's): update its reader and "
                  f"FORMAT_VERSION for this toolchain", file=sys.stderr)
            sys.exit(OTHER_FORMAT)
        self.index = doc["index"]
        self.paths = doc["paths"]
        self.crate = crate
        self.items = {}  # path -> (kind, detail)
        self.impls = set()  # (trait, for type)
        self.seen = set()
        self.walk(str(doc["root"]), crate, 0)
        for item in self.index.values():
            inner = item["inner"]
            if "impl" in inner:
                imp = inner["impl"]
                auto = imp["trait"] and imp["trait"]["path"] in ("Send", "Sync")
                real = not imp["is_synthetic"] or (auto and not imp["is_negative"])
                if imp["trait"] and real and not imp["blanket_impl"] and not imp["is_negative"]:
                    trait = imp["trait"]["path"].split("::")[-1] + render_args(imp["trait"].get("args"))
                    self.impls.add((trait, render(imp["for"])))

    def get(self, id):
        return self.index.get(str(id))

    def add(self, path, kind, detail=""):
        self.items.setdefault(path, (kind, detail))

    def walk(self, id, path, depth):
        if depth > 8 or (id, path) in self.seen:
            return
        self.seen.add((id, path))
        item = self.get(id)
        (kind, inner), = item["inner"].items()
        if kind == "module":
            self.add(path, "module")
            for child in inner["items"]:
                self.child(child, path, depth)
        elif kind in ("struct", "enum", "union"):
            self.add(path, kind)
            for variant in inner.get("variants", []):
                self.add(path + "::" + self.get(variant)["name"], "variant")
            for imp in inner["impls"]:
                imp = self.get(imp)["inner"]["impl"]
                if imp["trait"] is None:
                    for member in imp["items"]:
                        self.member(member, path, path.split("::")[-1])
        elif kind == "trait":
            self.add(path, "trait")
            for member in inner["items"]:
                self.member(member, path, None)
        else:
            self.add(path, kind, self.detail(item))

    def child(self, child, path, depth):
        item = self.get(child)
        if item is None:
            return
        (kind, inner), = item["inner"].items()
        if kind == "use":
            target = inner["id"]
            if inner["is_glob"]:
                target_item = self.get(target) if target is not None else None
                if target_item and "module" in target_item["inner"]:
                    for grandchild in target_item["inner"]["module"]["items"]:
                        self.child(grandchild, path, depth + 1)
                elif target_item and "enum" in target_item["inner"]:
                    for variant in target_item["inner"]["enum"]["variants"]:
                        self.add(path + "::" + self.get(variant)["name"], "variant")
                else:
                    self.add(path + "::*", "glob of " + inner["source"])
                return
            name = path + "::" + inner["name"]
            if target is not None and self.get(target) is not None:
                self.walk(str(target), name, depth + 1)
            else:
                summary = self.paths.get(str(target)) if target is not None else None
                kind = summary["kind"] if summary else "?"
                self.add(name, kind, "re-export of " + inner["source"])
            return
        if item["name"] is None:
            return
        self.walk(str(child), path + "::" + item["name"], depth + 1)

    def member(self, member, path, owner):
        item = self.get(member)
        (kind, _), = item["inner"].items()
        detail = self.detail(item)
        if owner:
            detail = re.sub(r"\bSelf\b", owner, detail)
        self.add(path + "::" + item["name"], kind, detail)

    def detail(self, item):
        inner = item["inner"]
        if "function" in inner:
            sig = inner["function"]["sig"]
            params = []
            for name, ty in sig["inputs"]:
                params.append("self" if name == "self" else render(ty))
            return "(" + ", ".join(params) + ") -> " + render(sig["output"])
        return ""


def main():
    rsmpi = Api(sys.argv[1], "mpi")
    mpirt = Api(sys.argv[2], "mpi")
    listing = "--list" in sys.argv
    kept = {p: v for p, v in rsmpi.items.items() if not C_HANDLE.search(p)}
    gaps, allowed, ok = [], {}, 0
    for path, (kind, detail) in sorted(kept.items()):
        if listing:
            print(f"{kind:12} {path} {detail}")
        if path not in mpirt.items:
            line, shown = f"{kind} {path}", f"missing: {kind} {path} {detail}"
        elif mpirt.items[path][0] != kind:
            line, shown = f"kind {path}", f"other kind: {path}: rsmpi {kind}, mpirt {mpirt.items[path][0]}"
        elif kind == "function" and mpirt.items[path][1] != detail:
            line = shown = (f"other parameters: {path}: rsmpi {detail}, mpirt "
                            f"{mpirt.items[path][1]}")
        else:
            ok += 1
            continue
        line = re.sub(r" +", " ", line)
        why = expected(line) or expected(re.sub(r"^\S+ ", "", line))
        if why:
            allowed.setdefault(why, []).append(path)
        else:
            gaps.append(shown)
    impls = {(t, f) for (t, f) in rsmpi.impls if not C_HANDLE.search(t.split("<")[0])
             and not t.startswith(("AsRaw", "FromRaw", "MatchesRaw", "AsHandle"))}
    for trait, for_type in sorted(impls - mpirt.impls):
        line = f"impl {trait} for {for_type}"
        why = expected(line)
        if why:
            allowed.setdefault(why, []).append(line)
        else:
            gaps.append(line)
    print(f"rsmpi 0.8: {len(kept)} items without a C handle and {len(impls)} trait impls; "
          f"{ok} items alike in mpirt")
    for why, paths in allowed.items():
        print(f"\nexpected ({len(paths)}): {why}")
        for path in paths:
            print(f"    {path}")
    print(f"\nnot in mpirt, or other ({len(gaps)}):")
    print("\n".join(f"    {gap}" for gap in gaps) or "    none")
    sys.exit(1 if gaps else 0)


if __name__ == "__main__":
    main()
