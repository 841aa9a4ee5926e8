//! Connections that have not sent a byte yet, so that they cannot keep real clients out.
//!
//! Every accepted connection first waits for its first byte, for at most [`FIRST_BYTE`]; until
//! then it is *silent*, registered here oldest first, and holds no connection slot (only a
//! descriptor and a waiting task). At most [`MAX_SILENT`] are kept: beyond, the oldest silent
//! connection is closed to make room ([`Silent::evict_oldest`]). A client that sends its
//! request at once (every browser and HTTP library) leaves the register within a round trip
//! and only then takes a slot, so sockets that connect and say nothing never take a slot from
//! a client that speaks. Closing silent sockets sparingly matters too: a client that
//! reconnects whenever it is closed would otherwise turn each close into an accept storm.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

/// Longest wait for a connection's first byte; it is closed after.
pub const FIRST_BYTE: Duration = Duration::from_secs(5);
/// Most connections waiting for their first byte at once.
pub const MAX_SILENT: usize = 2048;

/// The register of silent connections, oldest first.
#[derive(Clone, Default)]
pub struct Silent(Arc<Mutex<Inner>>);

#[derive(Default)]
struct Inner {
    next: u64,
    waiting: VecDeque<(u64, oneshot::Sender<()>)>,
}

/// A connection's entry in the register; dropping it leaves the register.
pub struct Entry {
    id: u64,
    reg: Silent,
    /// Fires when the server closes this connection to make room.
    pub evicted: oneshot::Receiver<()>,
}

impl Silent {
    /// Register a new silent connection (the youngest).
    pub fn enter(&self) -> Entry {
        let (tx, rx) = oneshot::channel();
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let id = g.next;
        g.next += 1;
        g.waiting.push_back((id, tx));
        Entry {
            id,
            reg: self.clone(),
            evicted: rx,
        }
    }

    /// Tell the oldest silent connection to close; false when none is silent.
    pub fn evict_oldest(&self) -> bool {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        while let Some((_, tx)) = g.waiting.pop_front() {
            // a receiver already gone belongs to a connection that is leaving anyway
            if tx.send(()).is_ok() {
                return true;
            }
        }
        false
    }

    /// Connections silent now.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .waiting
            .len()
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let mut g = self.reg.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = g.waiting.iter().position(|(id, _)| *id == self.id) {
            g.waiting.remove(i);
        }
    }
}

/// Wait until `stream` has a byte to read (true), or it closed, failed, stayed silent for
/// [`FIRST_BYTE`] or was evicted (false). Reads nothing: the byte stays for HTTP. The
/// connection leaves the register when this returns.
pub async fn first_byte(stream: &tokio::net::TcpStream, mut entry: Entry) -> bool {
    let mut b = [0u8; 1];
    tokio::select! {
        r = stream.peek(&mut b) => matches!(r, Ok(n) if n > 0),
        _ = tokio::time::sleep(FIRST_BYTE) => false,
        _ = &mut entry.evicted => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_silent_connection_is_evicted_first_and_leavers_are_skipped() {
        let reg = Silent::default();
        let mut a = reg.enter();
        let b = reg.enter();
        let mut c = reg.enter();
        assert_eq!(reg.len(), 3);
        drop(b);
        assert_eq!(reg.len(), 2);
        assert!(reg.evict_oldest());
        assert!(a.evicted.try_recv().is_ok());
        assert!(c.evicted.try_recv().is_err());
        assert!(reg.evict_oldest());
        assert!(c.evicted.try_recv().is_ok());
        assert!(!reg.evict_oldest());
        drop((a, c));
        assert_eq!(reg.len(), 0);
    }
}
