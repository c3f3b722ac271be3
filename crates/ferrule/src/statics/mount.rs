//! `StaticFiles` and `Mount`: the directories served under routes, and the file a request's
//! path names in one, refusing any path that would step outside it.

use std::ffi::{CString, OsStr};
use std::fs::{File, Metadata};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::bridge::open_beneath;

/// `--static-path-*`: what is served, and how.
pub struct StaticFiles {
    pub mounts: Vec<Mount>,
    /// Served for a request that names a directory (`--static-path-dir-to-file`).
    pub dir_to_file: Option<String>,
    /// `Cache-Control: public, max-age=N`; `None` for no such header.
    pub max_age: Option<u64>,
    /// Whether `NAME.br`, `NAME.zst` or `NAME.gz` beside a file is sent in its place.
    pub precompressed: bool,
    /// Whether a request for a file that is not there goes to the app (else a 404).
    pub fallthrough: bool,
}

/// A directory served under a route.
pub struct Mount {
    /// The URL prefix, without a trailing slash (empty for `/`).
    route: String,
    /// The directory, canonical (symbolic links resolved), as every file served is checked
    /// to lie under it.
    root: PathBuf,
    /// The directory, open: files are opened beneath it (`open_beneath`).
    dir: File,
}

/// What a request's path comes to.
pub enum Lookup {
    /// Under no route: the app's.
    NotStatic,
    /// A path that would step out of the mount (`..`, a NUL, a backslash), however encoded.
    Refused,
    /// Under a route, but no regular file in the mount (or one out of it, by a link).
    Missing,
    /// Boxed: a file and its metadata are most of the enum's size.
    Found(Box<Opened>),
}

/// A file opened for serving.
pub struct Opened {
    pub file: File,
    pub meta: Metadata,
    /// Its mount (an index into `StaticFiles::mounts`) and its path there, as the request
    /// named it: a precompressed variant is looked for beside it.
    mount: usize,
    relative: Vec<u8>,
}

impl Opened {
    /// Its path in the mount as the request named it (its extension gives its type).
    pub fn name(&self) -> &Path {
        Path::new(OsStr::from_bytes(&self.relative))
    }
}

impl Mount {
    /// `root` must be a directory; it is resolved now, once.
    pub fn new(route: &str, root: &Path) -> Result<Mount, String> {
        let root = std::fs::canonicalize(root)
            .ok()
            .filter(|root| root.is_dir())
            .ok_or_else(|| format!("{} is not a directory", root.display()))?;
        let dir = File::open(&root).map_err(|err| format!("{}: {err}", root.display()))?;
        let route = route.trim_end_matches('/').to_owned();
        Ok(Mount { route, root, dir })
    }

    /// The path under this mount's route, still percent-encoded: `None` if not under it.
    fn rest<'a>(&self, path: &'a str) -> Option<&'a str> {
        let rest = path.strip_prefix(&self.route)?;
        (rest.is_empty() || rest.starts_with('/')).then_some(rest)
    }
}

impl StaticFiles {
    /// Finds and opens the file a request's path (as sent, percent-encoded) names.
    pub fn lookup(&self, path: &str) -> Lookup {
        let Some((mount, rest)) = self
            .mounts
            .iter()
            .enumerate()
            .find_map(|(index, mount)| mount.rest(path).map(|rest| (index, rest)))
        else {
            return Lookup::NotStatic;
        };
        let decoded: Vec<u8> = percent_encoding::percent_decode_str(rest).collect();
        let mut relative = Vec::with_capacity(decoded.len());
        for segment in decoded.split(|&b| b == b'/') {
            let refused =
                matches!(segment, b"." | b"..") || segment.contains(&0) || segment.contains(&b'\\');
            if refused {
                return Lookup::Refused;
            }
            if !segment.is_empty() {
                if !relative.is_empty() {
                    relative.push(b'/');
                }
                relative.extend_from_slice(segment);
            }
        }
        let Some(mut opened) = self.open(mount, relative) else {
            return Lookup::Missing;
        };
        if opened.meta.is_dir() {
            let Some(index) = &self.dir_to_file else {
                return Lookup::Missing;
            };
            let mut relative = std::mem::take(&mut opened.relative);
            if !relative.is_empty() {
                relative.push(b'/');
            }
            relative.extend_from_slice(index.as_bytes());
            match self.open(mount, relative) {
                Some(file) => opened = file,
                None => return Lookup::Missing,
            }
        }
        if opened.meta.is_file() {
            Lookup::Found(Box::new(opened))
        } else {
            Lookup::Missing
        }
    }

    /// The file beside `opened` with `suffix` added to its name (`.br`), if it is a regular
    /// file in the same mount.
    pub fn variant(&self, opened: &Opened, suffix: &str) -> Option<Opened> {
        let mut relative = opened.relative.clone();
        relative.extend_from_slice(suffix.as_bytes());
        self.open(opened.mount, relative)
            .filter(|variant| variant.meta.is_file())
    }

    /// Opens `relative` (no `.` or `..` segments) under a mount, if it resolves (its links
    /// followed) to a path under the mount: in one `openat2` where the system has it; else,
    /// or for a link the kernel will not follow beneath the mount (an absolute one), by
    /// resolving the path and checking where it leads.
    fn open(&self, mount: usize, relative: Vec<u8>) -> Option<Opened> {
        let Mount { root, dir, .. } = &self.mounts[mount];
        let name = CString::new(if relative.is_empty() {
            b".".to_vec()
        } else {
            relative.clone()
        })
        .ok()?;
        let file = match open_beneath(dir, &name) {
            Ok(file) => file,
            Err(err) if NOT_THERE.contains(&err.raw_os_error().unwrap_or(0)) => return None,
            Err(_) => open_resolved(root, &root.join(OsStr::from_bytes(&relative)))?,
        };
        let meta = file.metadata().ok()?;
        Some(Opened {
            file,
            meta,
            mount,
            relative,
        })
    }
}

/// `openat2`'s answers that settle it: nothing there, or not readable.
const NOT_THERE: [i32; 3] = [libc::ENOENT, libc::ENOTDIR, libc::EACCES];

/// Opens `candidate` if it resolves (its links followed) to a path under `root`. Opened
/// without blocking, so that a FIFO cannot hold the thread; what it is, is then asked of the
/// open file itself, so that it cannot change between the check and the read.
fn open_resolved(root: &Path, candidate: &Path) -> Option<File> {
    let path = std::fs::canonicalize(candidate).ok()?;
    if !path.starts_with(root) {
        return None;
    }
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(dir: &Path) -> StaticFiles {
        StaticFiles {
            mounts: vec![Mount::new("/static/", dir).unwrap()],
            dir_to_file: Some("index.html".into()),
            max_age: None,
            precompressed: false,
            fallthrough: false,
        }
    }

    fn found(files: &StaticFiles, path: &str) -> Option<PathBuf> {
        let root = &files.mounts[0].root;
        match files.lookup(path) {
            Lookup::Found(opened) => Some(root.join(opened.name())),
            _ => None,
        }
    }

    #[test]
    fn a_path_under_the_route_names_a_file_of_the_mount() {
        let dir = std::env::temp_dir().join(format!("ferrule-mount-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/a b.txt"), b"x").unwrap();
        std::fs::write(dir.join("index.html"), b"i").unwrap();
        let files = served(&dir);
        let root = std::fs::canonicalize(&dir).unwrap();
        assert_eq!(
            found(&files, "/static/sub/a%20b.txt"),
            Some(root.join("sub/a b.txt"))
        );
        assert_eq!(
            found(&files, "/static//sub//a%20b.txt"),
            Some(root.join("sub/a b.txt"))
        );
        assert_eq!(found(&files, "/static/"), Some(root.join("index.html")));
        assert_eq!(found(&files, "/static"), Some(root.join("index.html")));
        // Links inside that stay inside: a relative one (openat2 follows it beneath the mount)
        // and an absolute one (which it refuses, and the resolved path is checked instead).
        std::os::unix::fs::symlink(root.join("index.html"), dir.join("absolute-in")).unwrap();
        std::os::unix::fs::symlink("sub/a b.txt", dir.join("relative-in")).unwrap();
        for linked in ["/static/absolute-in", "/static/relative-in"] {
            assert!(matches!(files.lookup(linked), Lookup::Found(_)), "{linked}");
        }
        assert!(matches!(files.lookup("/staticx/a"), Lookup::NotStatic));
        assert!(matches!(files.lookup("/other"), Lookup::NotStatic));
        assert!(matches!(files.lookup("/static/nope"), Lookup::Missing));
        assert!(matches!(files.lookup("/static/sub"), Lookup::Missing));
        for refused in [
            "/static/../etc/passwd",
            "/static/%2e%2e/x",
            "/static/sub/..%2f..%2fx",
            "/static/a%00b",
            "/static/a%5cb",
            "/static/./index.html",
        ] {
            assert!(
                matches!(files.lookup(refused), Lookup::Refused),
                "{refused}"
            );
        }
        std::os::unix::fs::symlink("/etc", dir.join("out")).unwrap();
        assert!(matches!(
            files.lookup("/static/out/hostname"),
            Lookup::Missing
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
