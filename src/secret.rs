//! Files that hold a secret (the cluster's key, a webhook's signing secret): readable by
//! their owner alone, of a bounded size.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use thiserror::Error;

/// Why a secret file cannot be used. `what` names the file's role ("cluster key", …).
#[derive(Debug, Error)]
pub enum SecretError {
    #[error("{what} {path}: {source}")]
    Read {
        what: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{what} {path} has mode {mode:04o}: group or others may read it; \
         it must be readable by its owner only (chmod 600 {path})"
    )]
    Exposed {
        what: &'static str,
        path: String,
        mode: u32,
    },
    #[error("{what} {path} holds {len} bytes; it needs at least {min} ({hint})")]
    Short {
        what: &'static str,
        path: String,
        len: usize,
        min: usize,
        hint: &'static str,
    },
    #[error("{what} {path} is larger than {max} bytes: not a secret file")]
    Long {
        what: &'static str,
        path: String,
        max: u64,
    },
}

/// The bytes of the secret file at `path`, refused unless it is readable by its owner alone
/// (no group or other permission bits; checked on the opened file, so it is the file read)
/// and holds from `min` to `max` bytes. `hint` says how to make a good one.
pub fn read_private(
    path: &Path,
    what: &'static str,
    min: usize,
    max: u64,
    hint: &'static str,
) -> Result<Vec<u8>, SecretError> {
    let name = path.display().to_string();
    let read = |source| SecretError::Read {
        what,
        path: name.clone(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read)?;
    let mode = file.metadata().map_err(read)?.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(SecretError::Exposed {
            what,
            path: name,
            mode,
        });
    }
    let mut secret = Vec::new();
    file.take(max + 1).read_to_end(&mut secret).map_err(read)?;
    if secret.len() < min {
        return Err(SecretError::Short {
            what,
            path: name,
            len: secret.len(),
            min,
            hint,
        });
    }
    if secret.len() as u64 > max {
        return Err(SecretError::Long {
            what,
            path: name,
            max,
        });
    }
    Ok(secret)
}
