//! The name under which the crate being compiled depends on mpirt: the generated code's paths
//! start with it.
//!
//! A program ported from rsmpi keeps its `mpi::` paths by renaming the dependency
//! (`mpi = { package = "mpirt", ... }`), and then `::mpirt::` resolves to nothing there. A
//! derive cannot ask the compiler for the name, so, as the proc-macro-crate crate does, it
//! reads the manifest of the crate being compiled (cargo gives its directory to the compiler
//! that runs the derive) and, for a dependency inherited with `workspace = true`, the
//! workspace's. Only the few shapes a dependency's rename takes in TOML are recognised, line
//! by line (an inline table is one line in TOML); without a rename the name is `mpirt`.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

const PACKAGE: &str = "mpirt";

/// The crate name to start paths with: `mpirt`, or what the manifest renames it to.
pub fn mpirt_name() -> String {
    let Some(dir) = env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from) else {
        return PACKAGE.to_string();
    };
    let member = fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
    let name = renamed(&member, false).or_else(|| {
        let workspace = workspace_manifest(&dir)?;
        renamed(&workspace, true).filter(|key| declares(&member, key))
    });
    name.map_or_else(|| PACKAGE.to_string(), |key| key.replace('-', "_"))
}

/// The text of the nearest manifest at or above `dir` that declares a workspace.
fn workspace_manifest(dir: &Path) -> Option<String> {
    dir.ancestors().find_map(|d| {
        let text = fs::read_to_string(d.join("Cargo.toml")).ok()?;
        let is_workspace = lines(&text).any(|line| matches!(line, Line::Header("workspace")));
        is_workspace.then_some(text)
    })
}

/// The dependency key that names package mpirt in `manifest`: in a dependency table
/// (`[dependencies]`, `[dev-dependencies]`, `[target.'cfg(..)'.dependencies]`, ...) or, with
/// `workspace`, in `[workspace.dependencies]` only.
fn renamed(manifest: &str, workspace: bool) -> Option<String> {
    let mut table = "";
    for line in lines(manifest) {
        match line {
            Line::Header(h) => table = h,
            Line::Entry(key, value) => {
                let (dependency, attribute) = match dependency_table(table, workspace) {
                    Some(Some(name)) => (name, key),
                    Some(None) => match key.split_once('.') {
                        Some((name, attribute)) => (name.trim(), attribute.trim()),
                        None if value.starts_with('{') => (key, ""),
                        None => continue,
                    },
                    None => continue,
                };
                let names_mpirt = match attribute {
                    "package" => is_mpirt(value),
                    "" => inline_package(value).is_some_and(is_mpirt),
                    _ => false,
                };
                if names_mpirt {
                    return Some(unquote(dependency).to_string());
                }
            }
        }
    }
    None
}

/// Whether `manifest` declares a dependency called `key` (inherited or not).
fn declares(manifest: &str, key: &str) -> bool {
    let mut table = "";
    lines(manifest).any(|line| match line {
        Line::Header(h) => {
            table = h;
            dependency_table(h, false) == Some(Some(key))
        }
        Line::Entry(k, _) => {
            dependency_table(table, false) == Some(None)
                && unquote(k.split('.').next().unwrap_or(k).trim()) == key
        }
    })
}

/// For a table header: not a dependency table (None), a table of dependencies (Some(None)),
/// or one dependency's own table, `[dependencies.NAME]` (Some(Some(NAME))).
fn dependency_table(header: &str, workspace: bool) -> Option<Option<&str>> {
    const KINDS: [&str; 3] = ["dependencies", "dev-dependencies", "build-dependencies"];
    let rest = if workspace {
        header.strip_prefix("workspace.dependencies")?
    } else if let Some(target) = header.strip_prefix("target.") {
        // `target.'cfg(unix)'.dependencies`: the part after the quoted or dotted target.
        let after = match target.strip_prefix(['\'', '"']) {
            Some(quoted) => quoted.split_once(['\'', '"'])?.1.strip_prefix('.')?,
            None => target.split_once('.')?.1,
        };
        KINDS.iter().find_map(|k| after.strip_prefix(k))?
    } else {
        KINDS.iter().find_map(|k| header.strip_prefix(k))?
    };
    match rest.strip_prefix('.') {
        Some(name) => Some(Some(unquote(name.trim()))),
        None if rest.is_empty() => Some(None),
        None => None,
    }
}

/// `package = "..."` inside an inline table `{ ... }`.
fn inline_package(value: &str) -> Option<&str> {
    let inner = value.strip_prefix('{')?.trim_end().strip_suffix('}')?;
    inner.split(',').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key.trim() == "package").then(|| value.trim())
    })
}

fn is_mpirt(value: &str) -> bool {
    unquote(value.trim()) == PACKAGE
}

fn unquote(s: &str) -> &str {
    let quoted = |q| s.strip_prefix(q).and_then(|s| s.strip_suffix(q));
    quoted('"').or_else(|| quoted('\'')).unwrap_or(s)
}

enum Line<'a> {
    /// `[table]` or `[[array]]`, without brackets.
    Header(&'a str),
    /// `key = value`, both trimmed; the key may be dotted.
    Entry(&'a str, &'a str),
}

/// The manifest's headers and entries, comments and blank lines left out.
fn lines(text: &str) -> impl Iterator<Item = Line<'_>> {
    text.lines().filter_map(|raw| {
        let line = strip_comment(raw).trim();
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_start_matches('[');
            let header = header.trim_end().trim_end_matches(']');
            return Some(Line::Header(header.trim()));
        }
        let (key, value) = line.split_once('=')?;
        Some(Line::Entry(key.trim(), value.trim()))
    })
}

/// `line` up to a `#` that is not inside a string.
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '#') => return &line[..i],
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            _ => {}
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_dependency_is_not_a_rename() {
        let manifest = "[dependencies]\nmpirt = { path = \"../mpirt\" }\nlibc = \"0.2\"\n";
        assert_eq!(renamed(manifest, false), None);
    }

    #[test]
    fn inline_renames_in_every_dependency_table() {
        for table in [
            "dependencies",
            "dev-dependencies",
            "target.'cfg(unix)'.dependencies",
            "target.x86_64-unknown-linux-gnu.dependencies",
        ] {
            let manifest = format!(
                "[package]\nname = \"app\"  # package = \"mpirt\" in a comment is no rename\n\
                 [{table}]\nmpi = {{ package = \"mpirt\", path = \"/opt/mpirt/mpirt\" }}\n"
            );
            assert_eq!(renamed(&manifest, false).as_deref(), Some("mpi"), "{table}");
        }
    }

    #[test]
    fn table_and_dotted_renames() {
        let table = "[dependencies.my-mpi]\npackage = 'mpirt'\ngit = \"https://x/mpirt\"\n";
        assert_eq!(renamed(table, false).as_deref(), Some("my-mpi"));
        let dotted = "[dependencies]\nmpi.package = \"mpirt\"\nmpi.path = \"../mpirt\"\n";
        assert_eq!(renamed(dotted, false).as_deref(), Some("mpi"));
    }

    #[test]
    fn other_packages_and_tables_are_not_mpirt() {
        let manifest = "[dependencies]\nrsmpi = { package = \"mpi\", version = \"0.8\" }\n\
                        [package.metadata.x]\nmpi = { package = \"mpirt\" }\n";
        assert_eq!(renamed(manifest, false), None);
    }

    #[test]
    fn workspace_renames_count_where_the_member_inherits_them() {
        let workspace = "[workspace]\nmembers = [\"app\"]\n\
                         [workspace.dependencies]\nmpi = { package = \"mpirt\", path = \"m\" }\n";
        assert_eq!(renamed(workspace, false), None);
        assert_eq!(renamed(workspace, true).as_deref(), Some("mpi"));
        for inherits in [
            "[dependencies]\nmpi.workspace = true\n",
            "[dependencies]\nmpi = { workspace = true }\n",
            "[dev-dependencies.mpi]\nworkspace = true\n",
        ] {
            assert!(declares(inherits, "mpi"), "{inherits}");
        }
        let plain = "[dependencies]\nmpirt = { path = \"m\" }\n";
        assert!(!declares(plain, "mpi"));
    }
}
