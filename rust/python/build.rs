//! The interpreter's cfgs for the bindings' own code: `Py_GIL_DISABLED` on a free-threaded
//! CPython (`gil.rs`), from the same configuration pyo3's build finds.

fn main() {
    pyo3_build_config::use_pyo3_cfgs();
}
