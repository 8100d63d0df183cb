//! The indirections' error type.

use std::path::{Path, PathBuf};

use thiserror::Error;

#[derive(Debug, Error)]
pub enum IndirectError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not an indirection log: {why}")]
    Corrupt { path: PathBuf, why: String },
    #[error("{log} names the swap file {store}, which cannot be read ({source}); without it the blocks the log lists are lost: restore the file, then run `memvisor disk disentangle` again")]
    StoreMissing {
        log: PathBuf,
        store: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{0} already has an indirection log; run `memvisor disk disentangle` on the image first"
    )]
    Exists(PathBuf),
}

pub(super) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> IndirectError + '_ {
    move |source| IndirectError::Io {
        path: path.to_owned(),
        source,
    }
}
