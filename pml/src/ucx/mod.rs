//! A PML on UCX's tag-matching API.

mod ffi;
