//! With the `pmix` feature, generates Rust bindings for the part of PMIx's client API that
//! `bootstrap::pmix` uses, from the system's headers (Debian: libpmix-dev, PMIx 4), and links
//! libpmix. Without the feature this does nothing, so the default build needs no C library.

fn main() {
    #[cfg(feature = "pmix")]
    pmix::generate();
}

#[cfg(feature = "pmix")]
mod pmix {
    use std::env;
    use std::path::PathBuf;

    /// The client calls `bootstrap::pmix` makes; their types come with them.
    const FUNCTIONS: &[&str] = &[
        "PMIx_Init",
        "PMIx_Finalize",
        "PMIx_Put",
        "PMIx_Commit",
        "PMIx_Fence",
        "PMIx_Get",
        "PMIx_Abort",
        "PMIx_Error_string",
        "PMIx_Info_load",
        "PMIx_Value_destruct",
    ];

    /// The data types, scope, status and attribute names it uses.
    const CONSTANTS: &[&str] = &[
        "PMIX_SUCCESS",
        "PMIX_ERR_NOT_FOUND",
        "PMIX_GLOBAL",
        "PMIX_BOOL",
        "PMIX_STRING",
        "PMIX_SIZE",
        "PMIX_UINT8",
        "PMIX_UINT16",
        "PMIX_UINT32",
        "PMIX_UINT64",
        "PMIX_INT",
        "PMIX_UINT",
        "PMIX_BYTE_OBJECT",
        "PMIX_JOB_SIZE",
        "PMIX_LOCAL_RANK",
        "PMIX_LOCAL_SIZE",
        "PMIX_NODEID",
        "PMIX_JOBID",
        "PMIX_COLLECT_DATA",
    ];

    pub fn generate() {
        let pmix = pkg_config::Config::new()
            .atleast_version("4")
            .probe("pmix")
            .expect("the `pmix` feature needs PMIx 4's headers and library (Debian: libpmix-dev)");
        let mut builder = bindgen::Builder::default()
            .header_contents("pmix_client.h", "#include <pmix.h>\n")
            .clang_args(
                pmix.include_paths
                    .iter()
                    .map(|p| format!("-I{}", p.display())),
            )
            .size_t_is_usize(true)
            .layout_tests(false)
            .parse_callbacks(Box::new(bindgen::CargoCallbacks));
        for f in FUNCTIONS {
            builder = builder.allowlist_function(f);
        }
        for c in CONSTANTS {
            builder = builder.allowlist_var(c);
        }
        let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
        builder
            .generate()
            .expect("bindgen could not read PMIx's headers (is libclang-dev installed?)")
            .write_to_file(out.join("pmix_bindings.rs"))
            .expect("writing the PMIx bindings");
    }
}
