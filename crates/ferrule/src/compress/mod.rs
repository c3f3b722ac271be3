//! Response compression (`--compress`): the parts that know nothing of the server, each a leaf
//! but `policy`, which puts them together:
//! - `coding`: `Coding` (zstd, br, gzip) and `Compression`, a coding at a level;
//! - `accept`: `Accepted`, the coding a request's `Accept-Encoding` lets the server use;
//! - `media_types`: `MediaTypes`, the content types worth compressing;
//! - `encoder`: `Encoder`, one response's compressor (a maintained crate for each coding);
//! - `recycling_alloc`: `RecyclingAlloc`, brotli's allocator, reusing a thread's buffers;
//! - `policy`: `Policy`, which responses are compressed and what their headers become.
//!
//! `http` applies it to a response on its way to hyper, on the tokio side.

mod accept;
mod coding;
mod encoder;
mod media_types;
mod policy;
mod recycling_alloc;

pub use self::accept::Accepted;
pub use self::coding::{Coding, Compression};
pub use self::encoder::Encoder;
pub use self::media_types::MediaTypes;
pub use self::policy::{add_vary, compressed_headers, Policy, Verdict};
