//! ferrule's core: the bridge that drives Python coroutines from Rust.
pub mod bridge;
