//! What one client of a daemon API may cost, and the pieces that enforce it. Every listener the
//! daemon runs (the Unix socket, and any later network API) takes one [`Limits`] and uses the
//! same three guards:
//!
//! - [`Slots`]: at most `max_connections` connections are open at once. The accepting thread
//!   takes a slot without waiting; when none is free it answers "busy" at once and closes, so
//!   a client is never left hanging and the acceptor never waits on a client.
//! - [`read_request`]: a request is at most `max_request_bytes` long, so a client cannot make
//!   the daemon buffer an unbounded line.
//! - [`DeadlineStream`]: each blocking read or write waits only for the time left until one
//!   fixed instant. A client gets `request_timeout` from being accepted to deliver its whole
//!   request and `deadline` from being accepted to receive the last byte of the answer,
//!   however it paces its bytes (a byte every few seconds does not extend anything).
//!
//! Together: a slow or silent client holds one slot (one thread and one descriptor, no query
//! work) for at most `request_timeout`, and any client for at most `deadline`; with
//! `max_connections` slots, clients that misbehave cannot keep a well-behaved one waiting
//! unless they hold every slot, and even then it is told "busy" instead of waiting.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The bounds of a daemon API; see the module documentation for what each guarantees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once (reading, answering, or writing); one more is told "busy".
    pub max_connections: usize,
    /// Longest request, in bytes including its newline; a longer one gets a "too_large" error.
    pub max_request_bytes: usize,
    /// Time from accepting a connection until its whole request must have arrived.
    pub request_timeout: Duration,
    /// Time from accepting a connection until the whole answer must be written; the
    /// connection is closed then, finished or not.
    pub deadline: Duration,
}

impl Default for Limits {
    /// 128 connections, 16 KiB requests, 5 s to send a request, 20 s for the whole exchange.
    /// A query request is a few hundred bytes and is sent at once; 20 s covers writing
    /// hundreds of MB of verdicts to a client that reads. The exchange deadline stays below
    /// the store's stall limit (30 s, `store::guard`), so a client that stops reading is cut
    /// off before a blocked write could be mistaken for sled looping on damaged data.
    fn default() -> Self {
        Limits {
            max_connections: 128,
            max_request_bytes: 16 * 1024,
            request_timeout: Duration::from_secs(5),
            deadline: Duration::from_secs(20),
        }
    }
}

/// A counter of open connections with a ceiling; see [`Slots::try_take`].
#[derive(Debug, Clone)]
pub struct Slots {
    open: Arc<AtomicUsize>,
    max: usize,
}

/// One taken slot; dropping it frees the slot.
#[derive(Debug)]
pub struct Slot {
    open: Arc<AtomicUsize>,
}

impl Slots {
    pub fn new(max: usize) -> Slots {
        Slots {
            open: Arc::new(AtomicUsize::new(0)),
            max,
        }
    }

    /// A slot if fewer than `max` are taken; never waits.
    pub fn try_take(&self) -> Option<Slot> {
        self.open
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot {
                open: Arc::clone(&self.open),
            })
    }

    /// Slots taken now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    pub fn max(&self) -> usize {
        self.max
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A socket whose per-call timeouts can be set (so [`DeadlineStream`] can bound each call).
pub trait TimeoutSocket: Read + Write {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()>;
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()>;
}

impl TimeoutSocket for UnixStream {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        UnixStream::set_read_timeout(self, t)
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        UnixStream::set_write_timeout(self, t)
    }
}

impl TimeoutSocket for std::net::TcpStream {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        std::net::TcpStream::set_read_timeout(self, t)
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        std::net::TcpStream::set_write_timeout(self, t)
    }
}

/// A socket on which every read and write fails with [`io::ErrorKind::TimedOut`] once a fixed
/// instant has passed: each call waits at most for the time left, so the total time spent in
/// calls never exceeds the deadline however the peer paces its bytes.
#[derive(Debug)]
pub struct DeadlineStream<S> {
    inner: S,
    until: Instant,
}

impl<S: TimeoutSocket> DeadlineStream<S> {
    pub fn new(inner: S, until: Instant) -> Self {
        DeadlineStream { inner, until }
    }

    /// Move the deadline (e.g. from "request received by" to "answer written by").
    pub fn set_deadline(&mut self, until: Instant) {
        self.until = until;
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Time left, or `TimedOut` when none is.
    fn left(&self) -> io::Result<Duration> {
        let left = self.until.saturating_duration_since(Instant::now());
        // a zero socket timeout means "block forever" to the OS and is refused by std
        if left < Duration::from_millis(1) {
            Err(io::Error::new(io::ErrorKind::TimedOut, "deadline passed"))
        } else {
            Ok(left)
        }
    }
}

/// A socket timeout surfaces as `WouldBlock` (EAGAIN) on Linux: report it as `TimedOut`.
fn as_timeout(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::WouldBlock {
        io::Error::new(io::ErrorKind::TimedOut, "deadline passed")
    } else {
        e
    }
}

impl<S: TimeoutSocket> Read for DeadlineStream<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.left()?;
        self.inner.set_read_timeout(Some(left))?;
        self.inner.read(buf).map_err(as_timeout)
    }
}

impl<S: TimeoutSocket> Write for DeadlineStream<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let left = self.left()?;
        self.inner.set_write_timeout(Some(left))?;
        self.inner.write(buf).map_err(as_timeout)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Why no request could be read.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("request longer than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the request did not arrive in time")]
    TimedOut,
    #[error("connection closed before a request arrived")]
    Closed,
    #[error(transparent)]
    Io(io::Error),
}

/// Read one request line (up to and excluding `\n`; the end of the stream also ends it) of
/// at most `max_bytes` bytes including the newline. Never buffers more than `max_bytes` plus
/// one read chunk (4 KiB), whatever the client sends; bytes after the newline are ignored.
pub fn read_request(r: &mut impl Read, max_bytes: usize) -> Result<Vec<u8>, RequestError> {
    let mut line = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = match r.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::TimedOut => return Err(RequestError::TimedOut),
            Err(e) => return Err(RequestError::Io(e)),
        };
        if n == 0 {
            return if line.iter().all(u8::is_ascii_whitespace) {
                Err(RequestError::Closed)
            } else {
                Ok(line)
            };
        }
        let got = &chunk[..n];
        let end = got.iter().position(|&b| b == b'\n');
        let take = end.unwrap_or(n);
        if line.len() + take + usize::from(end.is_some()) > max_bytes {
            return Err(RequestError::TooLarge { limit: max_bytes });
        }
        line.extend_from_slice(&got[..take]);
        if end.is_some() {
            return Ok(line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_refuse_past_the_ceiling_and_free_on_drop() {
        let s = Slots::new(2);
        let a = s.try_take().expect("first");
        let b = s.try_take().expect("second");
        assert!(s.try_take().is_none());
        assert_eq!(s.open(), 2);
        drop(a);
        let c = s.try_take().expect("freed by the drop");
        drop((b, c));
        assert_eq!(s.open(), 0);
    }

    #[test]
    fn a_request_line_is_capped_at_the_byte_limit() {
        // exactly at the limit (newline included) passes; one byte more fails
        let ok = format!("{}\n", "x".repeat(99));
        assert_eq!(read_request(&mut ok.as_bytes(), 100).unwrap().len(), 99);
        let long = format!("{}\n", "x".repeat(100));
        assert!(matches!(
            read_request(&mut long.as_bytes(), 100),
            Err(RequestError::TooLarge { limit: 100 })
        ));
        // a line without a newline that never ends is cut off too
        let mut endless = std::io::repeat(b'y');
        assert!(matches!(
            read_request(&mut endless, 10_000),
            Err(RequestError::TooLarge { .. })
        ));
        // the stream's end ends a request; an empty stream is no request
        assert_eq!(read_request(&mut &b"abc"[..], 100).unwrap(), b"abc");
        assert!(matches!(
            read_request(&mut &b" \n"[..], 100),
            Ok(l) if l == b" "
        ));
        assert!(matches!(
            read_request(&mut &b""[..], 100),
            Err(RequestError::Closed)
        ));
    }

    #[test]
    fn a_deadline_bounds_the_sum_of_reads_not_each_read() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let start = Instant::now();
        let mut s = DeadlineStream::new(a, start + Duration::from_millis(300));
        // the peer sends a byte every 50 ms forever: a per-read timeout would never fire
        let feeder = std::thread::spawn(move || {
            while b.write_all(b"x").is_ok() {
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let r = read_request(&mut s, 1 << 20);
        assert!(matches!(r, Err(RequestError::TimedOut)), "{r:?}");
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < Duration::from_secs(10), "{took:?}");
        drop(s);
        feeder.join().unwrap();
    }

    #[test]
    fn a_deadline_bounds_writes_to_a_peer_that_does_not_read() {
        let (a, b) = UnixStream::pair().unwrap();
        let start = Instant::now();
        let mut s = DeadlineStream::new(a, start + Duration::from_millis(300));
        // far more than the socket buffers hold; `b` never reads
        let r = s.write_all(&vec![0u8; 64 << 20]);
        let took = start.elapsed();
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < Duration::from_secs(10), "{took:?}");
        drop(b);
    }
}
