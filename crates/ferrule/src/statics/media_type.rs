//! `media_type`: a file's `Content-Type`, from its extension.

use std::path::Path;

use http::HeaderValue;

/// The file's media type as its extension says (`application/octet-stream` when it says
/// nothing known), with `charset=utf-8` for text, as Starlette's `StaticFiles` sends it.
pub fn media_type(path: &Path) -> HeaderValue {
    let guess = mime_guess::from_path(path).first_or_octet_stream();
    let essence = guess.essence_str();
    let text = essence.starts_with("text/") || essence == "application/javascript";
    let value = if text {
        format!("{essence}; charset=utf-8")
    } else {
        essence.to_owned()
    };
    HeaderValue::from_str(&value).unwrap_or(HeaderValue::from_static("application/octet-stream"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_extension_names_the_type() {
        let of = |name: &str| media_type(Path::new(name));
        assert_eq!(of("a/index.html"), "text/html; charset=utf-8");
        assert_eq!(of("app.css"), "text/css; charset=utf-8");
        assert_eq!(of("data.json"), "application/json");
        assert_eq!(of("logo.PNG"), "image/png");
        assert_eq!(of("blob.unknownext"), "application/octet-stream");
        assert_eq!(of("noext"), "application/octet-stream");
    }
}
