//! With the `ucx` feature, generates Rust bindings for the part of UCX's UCP API that
//! `pml::ucx` uses, from the system's headers, and links libucp and libucs; with the `ofi`
//! feature, the same for libfabric. Without either this does nothing, so the default build
//! needs no C library and no libclang.

fn main() {
    #[cfg(feature = "ucx")]
    ucx::generate();
    #[cfg(feature = "ofi")]
    ofi::generate();
}

#[cfg(feature = "ofi")]
mod ofi {
    use std::env;
    use std::path::PathBuf;

    /// libfabric's exported functions that the OFI transport calls. Everything else it uses
    /// (fi_domain, fi_send, fi_cq_read, fi_mr_reg, ...) is `static inline` in the headers, a
    /// call through an object's ops table, which `transport/ofi/sys.rs` makes from the
    /// table types these bring in.
    const FUNCTIONS: &[&str] = &[
        "fi_getinfo",
        "fi_freeinfo",
        "fi_dupinfo",
        "fi_fabric",
        "fi_strerror",
        "fi_version",
    ];

    const TYPES: &[&str] = &[
        "fi_info",
        "fid_fabric",
        "fid_domain",
        "fid_ep",
        "fid_cq",
        "fid_av",
        "fid_mr",
        "fid_wait",
        "fi_cq_attr",
        "fi_av_attr",
        "fi_cq_data_entry",
        "fi_cq_err_entry",
        "fi_context2",
        "fi_wait_obj",
        "fi_cq_format",
        "fi_cq_wait_cond",
        "fi_av_type",
        "fi_ep_type",
        "fi_progress",
        "fi_threading",
        "fi_resource_mgmt",
        "fi_msg_rma",
        "fi_rma_iov",
        "fi_ops_atomic",
        "fi_atomic_attr",
        "fi_datatype",
        "fi_op",
    ];

    pub fn generate() {
        let fabric = pkg_config::Config::new()
            .atleast_version("1.10")
            .probe("libfabric")
            .expect(
                "the `ofi` feature needs libfabric's headers and library (Debian: libfabric-dev)",
            );
        let mut builder = bindgen::Builder::default()
            .header_contents(
                "ofi.h",
                "#include <rdma/fabric.h>\n#include <rdma/fi_domain.h>\n\
                 #include <rdma/fi_endpoint.h>\n#include <rdma/fi_cm.h>\n\
                 #include <rdma/fi_rma.h>\n#include <rdma/fi_atomic.h>\n\
                 #include <rdma/fi_errno.h>\n",
            )
            .clang_args(
                fabric
                    .include_paths
                    .iter()
                    .map(|p| format!("-I{}", p.display())),
            )
            .default_enum_style(bindgen::EnumVariation::Consts)
            .prepend_enum_name(false)
            .layout_tests(false)
            .size_t_is_usize(true)
            .allowlist_var("FI_.*")
            .parse_callbacks(Box::new(bindgen::CargoCallbacks));
        for f in FUNCTIONS {
            builder = builder.allowlist_function(f);
        }
        for t in TYPES {
            builder = builder.allowlist_type(t);
        }
        let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
        builder
            .generate()
            .expect("bindgen could not read libfabric's headers (is libclang-dev installed?)")
            .write_to_file(out.join("ofi_bindings.rs"))
            .expect("writing the libfabric bindings");
    }
}

#[cfg(feature = "ucx")]
mod ucx {
    use std::env;
    use std::path::PathBuf;

    /// The UCP functions `pml::ucx` calls; their types and constants come with them, plus
    /// the enums listed below. Everything else in ucp.h stays out of the bindings.
    const FUNCTIONS: &[&str] = &[
        "ucp_init_version",
        "ucp_cleanup",
        "ucp_context_query",
        "ucp_worker_create",
        "ucp_worker_destroy",
        "ucp_worker_get_address",
        "ucp_worker_release_address",
        "ucp_worker_progress",
        "ucp_worker_get_efd",
        "ucp_worker_arm",
        "ucp_worker_flush_nbx",
        "ucp_ep_create",
        "ucp_ep_close_nbx",
        "ucp_tag_send_nbx",
        "ucp_tag_send_sync_nbx",
        "ucp_tag_recv_nbx",
        "ucp_tag_probe_nb",
        "ucp_tag_msg_recv_nbx",
        "ucp_request_check_status",
        "ucp_request_cancel",
        "ucp_request_free",
        "ucs_status_string",
        "ucp_get_version_string",
        "ucp_ep_print_info",
        "ucp_mem_map",
        "ucp_mem_unmap",
        "ucp_rkey_pack",
        "ucp_rkey_buffer_release",
        "ucp_ep_rkey_unpack",
        "ucp_rkey_destroy",
        "ucp_put_nbx",
        "ucp_get_nbx",
        "ucp_atomic_op_nbx",
        "ucp_am_send_nbx",
        "ucp_worker_set_am_recv_handler",
        "ucp_ep_flush_nbx",
        "ucp_dt_create_generic",
        "ucp_dt_destroy",
    ];

    const TYPES: &[&str] = &[
        "ucp_feature",
        "ucp_params_field",
        "ucp_context_attr_field",
        "ucp_worker_params_field",
        "ucp_ep_params_field",
        "ucp_op_attr_t",
        "ucp_ep_close_flags_t",
        "ucs_thread_mode_t",
        "ucp_err_handling_mode_t",
        "ucs_status_t",
        "ucp_mem_map_params_field",
        "ucp_atomic_op_t",
        "ucp_dt_type",
        "ucp_dt_iov_t",
        "ucp_am_handler_param_field",
    ];

    const CONSTANTS: &[&str] = &["UCP_API_MAJOR", "UCP_API_MINOR"];

    pub fn generate() {
        let ucx = pkg_config::Config::new()
            .atleast_version("1.13")
            .probe("ucx")
            .expect("the `ucx` feature needs UCX's headers and libraries (Debian: libucx-dev)");
        let mut builder = bindgen::Builder::default()
            .header_contents("ucx.h", "#include <ucp/api/ucp.h>\n")
            .clang_args(
                ucx.include_paths
                    .iter()
                    .map(|p| format!("-I{}", p.display())),
            )
            .default_enum_style(bindgen::EnumVariation::Consts)
            .prepend_enum_name(false)
            .layout_tests(false)
            .parse_callbacks(Box::new(bindgen::CargoCallbacks));
        for f in FUNCTIONS {
            builder = builder.allowlist_function(f);
        }
        for t in TYPES {
            builder = builder.allowlist_type(t);
        }
        for c in CONSTANTS {
            builder = builder.allowlist_var(c);
        }
        let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
        builder
            .generate()
            .expect("bindgen could not read UCX's headers (is libclang-dev installed?)")
            .write_to_file(out.join("ucx_bindings.rs"))
            .expect("writing the UCX bindings");
    }
}
