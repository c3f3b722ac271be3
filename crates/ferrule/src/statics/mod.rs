//! Static files (`--static-path-mount`), the parts that know nothing of the server:
//! - `mount`: `Mount`, a directory served under a route, and the file a request path names
//!   in it (refusing what would step outside);
//! - `range`: `ByteRange`, what a `Range` header asks of a file;
//! - `validators`: a file's `ETag` and `Last-Modified`, and the conditional headers checked
//!   against them;
//! - `media_type`: a file's `Content-Type` from its extension.
//!
//! `http` serves them, before the app.

mod media_type;
mod mount;
mod range;
mod validators;

pub use self::media_type::media_type;
pub use self::mount::{Lookup, Mount, Opened, StaticFiles};
pub use self::range::ByteRange;
pub use self::validators::Validators;
