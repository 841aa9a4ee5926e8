//! Guards around sled calls on a store that may be damaged.
//!
//! Measured with sled 0.34.7 on damaged `db` files (docs/OPERATIONS.md): sled answers damage
//! in three ways besides an error — it panics (e.g. `segment.rs:556` on a truncated log), it
//! loops forever inside one `Iter::next` (re-reading a page whose checksum fails), or it
//! silently opens the valid prefix of the log as if the rest had never been written. The last
//! is caught by the committed-state sidecar ([`super::sidecar`]); this module handles the
//! first two:
//!
//! - [`watched`] runs a closure under `catch_unwind`; a panic inside it is recorded (not
//!   printed) and becomes [`StoreError::Damaged`];
//! - while a watched closure runs, a watchdog thread checks that it makes progress: if it
//!   neither returns nor calls [`progress`] for [`stall_limit`] (30 s, or
//!   `NOVAD_STALL_SECS`), sled is taken to be looping on corrupt data and the process prints
//!   a "store damaged" error naming the way out and exits with [`EXIT_DAMAGED`]. A thread
//!   stuck inside sled cannot be stopped any other way, and a process that keeps running on a
//!   store it cannot read must not commit on top of it.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use super::StoreError;

/// Exit status of a process that stopped because its store is damaged.
pub const EXIT_DAMAGED: u8 = 3;

/// Default longest time a watched store operation may go without progress.
const DEFAULT_STALL_SECS: u64 = 30;

/// How long a watched operation may go without returning or calling [`progress`] before the
/// store is declared damaged: `NOVAD_STALL_SECS` (whole seconds ≥ 1) or 30 s.
pub fn stall_limit() -> Duration {
    let secs = std::env::var("NOVAD_STALL_SECS")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|&s| s >= 1)
        .unwrap_or(DEFAULT_STALL_SECS);
    Duration::from_secs(secs)
}

struct Section {
    dir: String,
    what: String,
    last: Instant,
}

static SECTIONS: Mutex<Option<HashMap<u64, Section>>> = Mutex::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static WATCHDOG: Once = Once::new();
static HOOK: Once = Once::new();

thread_local! {
    /// Ids of the watched sections this thread is in (innermost last).
    static ACTIVE: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    /// Depth of watched sections on this thread (panics inside are not printed).
    static DEPTH: Cell<usize> = const { Cell::new(0) };
    /// The message and place of the last panic caught inside a watched section.
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

fn sections() -> std::sync::MutexGuard<'static, Option<HashMap<u64, Section>>> {
    SECTIONS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The message an operator sees for a damaged store, naming the way out.
pub fn damaged_message(dir: &str, detail: &str) -> String {
    format!(
        "store {dir} is damaged: {detail}. Stop novad, keep this directory for inspection, and rebuild the store from the processed batch files: `novad rebuild --from INBOX/processed --old {dir} --store NEW_DIR` (see docs/OPERATIONS.md)"
    )
}

fn install_hook() {
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if DEPTH.with(|d| d.get()) > 0 {
                let msg = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                let place = info
                    .location()
                    .map(|l| format!(" ({}:{})", l.file(), l.line()))
                    .unwrap_or_default();
                LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{msg}{place}")));
            } else {
                previous(info)
            }
        }));
    });
}

fn start_watchdog() {
    WATCHDOG.call_once(|| {
        let limit = stall_limit();
        let tick = (limit / 10).clamp(Duration::from_millis(20), Duration::from_millis(500));
        let _ = std::thread::Builder::new()
            .name("novad-store-watchdog".into())
            .spawn(move || loop {
                std::thread::sleep(tick);
                let stalled = sections().as_ref().and_then(|m| {
                    m.values()
                        .find(|s| s.last.elapsed() >= limit)
                        .map(|s| (s.dir.clone(), s.what.clone()))
                });
                if let Some((dir, what)) = stalled {
                    let detail = format!(
                        "{what} made no progress for {} s (sled loops on unreadable data)",
                        limit.as_secs()
                    );
                    eprintln!("novad: error: {}", damaged_message(&dir, &detail));
                    std::process::exit(EXIT_DAMAGED as i32);
                }
            });
    });
}

/// Run `f`, a piece of work on the store in `dir` described by `what` ("reading verdicts").
///
/// Guarantees: a panic inside `f` is not printed and is returned as
/// [`StoreError::Damaged`] naming `what` and the panic; if `f` makes no progress (returns or
/// calls [`progress`]) for [`stall_limit`], the process exits with [`EXIT_DAMAGED`] after
/// printing a "store damaged" error. Sections nest.
pub fn watched<T>(dir: &Path, what: &str, f: impl FnOnce() -> T) -> Result<T, StoreError> {
    install_hook();
    start_watchdog();
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    sections().get_or_insert_with(HashMap::new).insert(
        id,
        Section {
            dir: dir.display().to_string(),
            what: what.to_string(),
            last: Instant::now(),
        },
    );
    ACTIVE.with(|a| a.borrow_mut().push(id));
    DEPTH.with(|d| d.set(d.get() + 1));
    let res = panic::catch_unwind(AssertUnwindSafe(f));
    DEPTH.with(|d| d.set(d.get() - 1));
    ACTIVE.with(|a| a.borrow_mut().retain(|&x| x != id));
    if let Some(m) = sections().as_mut() {
        m.remove(&id);
    }
    res.map_err(|_| {
        let why = LAST_PANIC
            .with(|p| p.borrow_mut().take())
            .unwrap_or_else(|| "unknown panic".into());
        StoreError::Damaged {
            dir: dir.display().to_string(),
            detail: format!("{what}: sled failed on the stored data: {why}"),
        }
    })
}

/// Report progress of the innermost watched section of this thread (e.g. once per record of
/// a scan), so that long but advancing work is not taken for a stall.
pub fn progress() {
    let Some(id) = ACTIVE.with(|a| a.borrow().last().copied()) else {
        return;
    };
    if let Some(s) = sections().as_mut().and_then(|m| m.get_mut(&id)) {
        s.last = Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_inside_becomes_a_damaged_error_and_nesting_unwinds() {
        let dir = Path::new("/nowhere");
        let r: Result<(), _> = watched(dir, "outer", || {
            let inner = watched(dir, "reading a tree", || -> u32 { panic!("boom {}", 7) });
            let e = inner.unwrap_err().to_string();
            assert!(e.contains("reading a tree") && e.contains("boom 7"), "{e}");
            assert!(e.contains("novad rebuild"), "{e}");
        });
        r.unwrap();
        assert_eq!(DEPTH.with(|d| d.get()), 0);
        assert!(ACTIVE.with(|a| a.borrow().is_empty()));
        assert_eq!(watched(dir, "fine", || 5).unwrap(), 5);
    }

    /// Runs itself as a child process (the watchdog ends the process it runs in): a section
    /// that reports progress outlives the stall limit; one that does not ends the process
    /// with [`EXIT_DAMAGED`] and a message naming the store and the operation.
    #[test]
    fn a_stalled_section_ends_the_process_with_the_damaged_status() {
        const NAME: &str =
            "store::guard::tests::a_stalled_section_ends_the_process_with_the_damaged_status";
        if std::env::var_os("NOVAD_GUARD_STALL_CHILD").is_some() {
            let dir = Path::new("/stalled-store");
            let t = Instant::now();
            watched(dir, "a long scan", || {
                while t.elapsed() < Duration::from_millis(2500) {
                    std::thread::sleep(Duration::from_millis(100));
                    progress();
                }
            })
            .unwrap();
            println!("survived a 2.5 s scan with progress");
            let _ = watched(dir, "a read", || loop {
                std::thread::sleep(Duration::from_millis(50));
            });
            unreachable!("the watchdog ends the process");
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
            .env("NOVAD_GUARD_STALL_CHILD", "1")
            .env("NOVAD_STALL_SECS", "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(EXIT_DAMAGED as i32),
            "{stdout}{stderr}"
        );
        assert!(stdout.contains("survived a 2.5 s scan"), "{stdout}");
        assert!(
            stderr.contains("store /stalled-store is damaged: a read made no progress for 1 s"),
            "{stderr}"
        );
    }
}
