//! CPU clocks: the time a thread or the whole process has run, as Linux counts it. Read by
//! the HTTP server's CPU cap (its threads' clocks) and by a cluster's balance of work (the
//! process's clock).

use std::time::Duration;

/// The reading of the CPU clock `clock` in nanoseconds, when it can be read.
#[cfg(target_os = "linux")]
pub fn read_clock(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to; an invalid clock is an error return.
    let r = unsafe { libc::clock_gettime(clock, &mut ts) };
    (r == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// The CPU time of this process (every thread) so far, when the clock can be read.
pub fn process_cpu() -> Option<Duration> {
    #[cfg(target_os = "linux")]
    {
        read_clock(libc::CLOCK_PROCESS_CPUTIME_ID).map(Duration::from_nanos)
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}
