//! The daemon's policy for a full disk.
//!
//! A store write that fails with ENOSPC/EDQUOT leaves sled's database handle unusable for
//! the rest of the process (sled 0.34 keeps the first I/O error as a global error and returns
//! it from every later call), and the query API holds a clone of that handle. So the daemon
//! does not exit and does not go on with the broken handle: it logs the error, leaves the
//! batch file in the inbox, waits until the store's file system has room again (or a time
//! bound passes), and restarts itself in place (`exec` of its own binary with the same
//! arguments, same pid). The new process opens the store — sled recovers the last flushed
//! state, a half-written snapshot from the full disk is removed ([`super::check`]) — and
//! takes the file again: it was either not committed (processed again) or committed and
//! flushed (recognised by its hash and only moved). A full disk at start-up is waited out the
//! same way by [`open_waiting`].

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::StoreError;

/// Free space on the store's file system after which a retry is worth it.
pub const FREE_BYTES_WANTED: u64 = 16 << 20;
/// Longest wait for that much free space before trying anyway.
pub const MAX_WAIT: Duration = Duration::from_secs(60);
/// Pause between checks of the free space.
const POLL: Duration = Duration::from_millis(500);

/// Whether `e` is an error caused by a full disk or an exhausted quota.
pub fn is_disk_full(e: &StoreError) -> bool {
    let io = match e {
        StoreError::Io { source, .. } => Some(source),
        StoreError::Sled {
            source: sled::Error::Io(io),
            ..
        } => Some(io),
        _ => None,
    };
    io.is_some_and(|io| {
        matches!(io.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
            || matches!(
                io.kind(),
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
            )
    }) || e.to_string().contains("No space left on device")
}

/// Bytes available to this user on the file system holding `dir` (None if unknown).
pub fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid NUL-terminated path and a zeroed out-parameter of the right type.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Wait until `dir`'s file system has [`FREE_BYTES_WANTED`] free or [`MAX_WAIT`] passed.
/// Returns false when `term` was set while waiting.
fn wait_for_room(dir: &Path, term: &AtomicBool) -> bool {
    let t = Instant::now();
    while t.elapsed() < MAX_WAIT {
        if term.load(Ordering::SeqCst) {
            return false;
        }
        if free_bytes(dir).is_some_and(|b| b >= FREE_BYTES_WANTED) {
            return true;
        }
        std::thread::sleep(POLL);
    }
    !term.load(Ordering::SeqCst)
}

/// The daemon loop's answer to a store error while ingesting. A full disk: log, wait for
/// room, then restart the process in place (does not return unless the restart fails or a
/// shutdown was requested, then `Ok(())`; the caller's loop sees `term` and stops). Any other
/// error is returned unchanged (the daemon stops with it).
pub fn after_store_error(
    e: StoreError,
    store_dir: &Path,
    term: &AtomicBool,
) -> Result<(), StoreError> {
    if !is_disk_full(&e) {
        return Err(e);
    }
    tracing::error!(
        error = %e,
        free_bytes = free_bytes(store_dir).unwrap_or(0),
        "the store's disk is full; the batch file stays in the inbox; waiting for free space, then restarting to reopen the store"
    );
    if !wait_for_room(store_dir, term) {
        return Ok(());
    }
    restart_in_place();
    Err(e)
}

/// Replace this process with a fresh run of the same binary and arguments (same pid).
/// Returns only if the exec failed (logged).
fn restart_in_place() {
    use std::os::unix::process::CommandExt;
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    tracing::warn!("restarting novad in place to reopen the store");
    let err = std::process::Command::new("/proc/self/exe")
        .args(args)
        .exec();
    tracing::error!(error = %err, "cannot restart novad");
}

/// Open with `open`, waiting out a full disk: on a disk-full error, log, wait for room and
/// try again, until it succeeds, fails otherwise, or `term` is set (then the last error).
pub fn open_waiting<T>(
    store_dir: &Path,
    term: &AtomicBool,
    mut open: impl FnMut() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    loop {
        match open() {
            Err(e) if is_disk_full(&e) && !term.load(Ordering::SeqCst) => {
                tracing::error!(error = %e, "cannot open the store: its disk is full; waiting for free space");
                std::thread::sleep(POLL);
                if !wait_for_room(store_dir, term) {
                    return Err(e);
                }
            }
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_full_is_recognised_in_both_error_shapes_and_nothing_else() {
        let full = std::io::Error::from_raw_os_error(libc::ENOSPC);
        let a = StoreError::Sled {
            dir: "s".into(),
            source: sled::Error::Io(std::io::Error::from_raw_os_error(libc::ENOSPC)),
        };
        let b = StoreError::Io {
            dir: "s".into(),
            what: "cannot write committed.json".into(),
            source: full,
        };
        assert!(is_disk_full(&a) && is_disk_full(&b));
        let other = StoreError::Io {
            dir: "s".into(),
            what: "x".into(),
            source: std::io::Error::from_raw_os_error(libc::EACCES),
        };
        assert!(!is_disk_full(&other));
        assert!(free_bytes(Path::new("/")).is_some());
    }
}
