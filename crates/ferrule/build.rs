//! Exposes PyO3's interpreter-version cfgs (`Py_3_13`, ...) to this crate, for the few FFI
//! declarations that differ between versions.
fn main() {
    pyo3_build_config::use_pyo3_cfgs();
}
