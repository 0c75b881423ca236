//! Where a host's ranks run and which file they run, decided on that host as `mpirun` does:
//! rsrun's working directory (or `--wdir`), a relative program path taken from there, a bare
//! program name looked up in the ranks' `PATH`.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

/// The directory a host's ranks start in.
#[derive(Debug, PartialEq, Eq)]
pub struct WorkDir {
    pub dir: PathBuf,
    /// Set when the wanted directory does not exist here and the ranks run in `dir`, the home
    /// directory, instead; says so for a warning.
    pub fallback: Option<String>,
}

/// Chooses the directory: `wanted` if it is one here; otherwise an error if the user named it
/// (`--wdir`, as Open MPI fails then), else the home directory (`home`, `/` when unset), as a
/// remote login would start, with words for a warning.
pub fn choose(wanted: &Path, named: bool, home: Option<&OsStr>) -> Result<WorkDir, String> {
    match std::fs::metadata(wanted) {
        Ok(meta) if meta.is_dir() => {
            return Ok(WorkDir {
                dir: wanted.to_path_buf(),
                fallback: None,
            })
        }
        Ok(_) if named => return Err(format!("--wdir {}: not a directory", wanted.display())),
        Err(e) if named => return Err(format!("--wdir {}: {e}", wanted.display())),
        _ => {}
    }
    let dir = PathBuf::from(home.unwrap_or(OsStr::new("/")));
    Ok(WorkDir {
        fallback: Some(format!(
            "working directory {} does not exist there; its ranks run in {}",
            wanted.display(),
            dir.display()
        )),
        dir,
    })
}

/// The file a rank runs: a path with a slash taken from `dir` when relative, a bare name looked
/// up in `path` (the ranks' `PATH`) as execvp would. A name not found is a `NotFound` error
/// naming the `PATH` searched.
pub fn resolve(program: &OsStr, dir: &Path, path: Option<&OsStr>) -> io::Result<PathBuf> {
    let as_path = Path::new(program);
    if program.as_encoded_bytes().contains(&b'/') {
        // `./prog` is `dir/prog` (a leading `.` is the only one `components` keeps).
        let clean: PathBuf = as_path
            .components()
            .filter(|c| *c != Component::CurDir)
            .collect();
        return Ok(dir.join(clean));
    }
    let path = path.unwrap_or_default();
    for entry in std::env::split_paths(path) {
        // An empty PATH entry means the working directory, as in every shell.
        let candidate = dir.join(entry).join(as_path);
        let runnable = std::fs::metadata(&candidate)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
        if runnable {
            return Ok(candidate);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("not found in PATH={}", path.to_string_lossy()),
    ))
}

/// What a failed start says after "cannot start 'PROGRAM' on HOST: ": the cause, the path tried
/// (when there was one) and the directory.
pub fn start_error(e: &io::Error, tried: Option<&Path>, dir: &Path) -> String {
    match tried {
        Some(path) => format!(
            "{e} (tried {}, in directory {})",
            path.display(),
            dir.display()
        ),
        None => format!("{e} (in directory {})", dir.display()),
    }
}

/// The `PATH` ranks see: the one the rank environment sets (`-x PATH`, `--env PATH=...`), else
/// the launcher's own.
pub fn rank_path(rank_env: &[(String, OsString)]) -> Option<OsString> {
    rank_env
        .iter()
        .rev()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.clone())
        .or_else(|| std::env::var_os("PATH"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rsrun-workdir-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        dir
    }

    #[test]
    fn the_wanted_directory_or_home_with_words_or_an_error_when_named() {
        let dir = scratch("choose");
        let home = Some(OsStr::new("/home/u"));
        assert_eq!(
            choose(&dir, false, home).unwrap(),
            WorkDir {
                dir: dir.clone(),
                fallback: None
            }
        );
        let missing = dir.join("missing");
        let fell = choose(&missing, false, home).unwrap();
        assert_eq!(fell.dir, Path::new("/home/u"));
        assert_eq!(
            fell.fallback.unwrap(),
            format!(
                "working directory {} does not exist there; its ranks run in /home/u",
                missing.display()
            )
        );
        assert_eq!(choose(&missing, false, None).unwrap().dir, Path::new("/"));
        let e = choose(&missing, true, home).unwrap_err();
        assert!(
            e.starts_with(&format!("--wdir {}: No such file", missing.display())),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn programs_resolve_against_the_directory_and_path() {
        let dir = scratch("resolve");
        let tool = dir.join("bin/tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(dir.join("bin/data"), "").unwrap();
        let path = OsString::from(format!("/nonexistent:{}", dir.join("bin").display()));
        assert_eq!(
            resolve(OsStr::new("bin/x"), &dir, None).unwrap(),
            dir.join("bin/x")
        );
        assert_eq!(
            resolve(OsStr::new("./bin/./x"), &dir, None).unwrap(),
            dir.join("bin/x")
        );
        assert_eq!(
            resolve(OsStr::new("/abs/x"), &dir, None).unwrap(),
            Path::new("/abs/x")
        );
        assert_eq!(
            resolve(OsStr::new("tool"), &dir, Some(&path)).unwrap(),
            tool
        );
        // Relative PATH entries count from the directory; files that cannot run are skipped.
        assert_eq!(
            resolve(OsStr::new("tool"), &dir, Some(OsStr::new("bin"))).unwrap(),
            tool
        );
        let e = resolve(OsStr::new("data"), &dir, Some(&path)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert_eq!(
            e.to_string(),
            format!("not found in PATH={}", path.to_string_lossy())
        );
        let said = start_error(&e, None, &dir);
        assert!(
            said.ends_with(&format!("(in directory {})", dir.display())),
            "{said}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
