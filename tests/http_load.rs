//! The HTTP server under hostile load from the same machine, against the real daemon.
#[path = "common/daemon.rs"]
#[allow(dead_code)]
mod harness;
#[path = "common/http.rs"]
#[allow(dead_code)]
mod http;

use harness::*;
use http::*;
use std::io::{ErrorKind, Read};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Keep `n` connections to `addr` open that never send a byte, reconnecting each as soon as
/// the server closes it, until `stop`; counts the reconnections.
fn hog(addr: String, n: usize, stop: Arc<AtomicBool>, closed: Arc<AtomicUsize>) {
    let open = |addr: &str| -> Option<TcpStream> {
        let s = TcpStream::connect(addr).ok()?;
        s.set_nonblocking(true).ok()?;
        Some(s)
    };
    let mut socks: Vec<Option<TcpStream>> = (0..n).map(|_| open(&addr)).collect();
    let mut b = [0u8; 1];
    while !stop.load(Ordering::SeqCst) {
        for s in socks.iter_mut() {
            let gone = match s {
                None => true,
                Some(t) => match t.read(&mut b) {
                    Ok(_) => true,
                    Err(e) => e.kind() != ErrorKind::WouldBlock,
                },
            };
            if gone {
                closed.fetch_add(1, Ordering::SeqCst);
                *s = open(&addr);
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// 600 sockets that connect, send nothing and come back when closed (more than the server's
/// 512 connection slots): authorised requests must still be answered, each within 5 s.
#[test]
fn silent_sockets_do_not_starve_authorised_requests() {
    let d = Dirs::new();
    let s = start(&d, &[]);
    ingest_example(&d, &example_batches()[0]);
    let addr = s.base.trim_start_matches("http://").to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let closed = Arc::new(AtomicUsize::new(0));
    let hogs = {
        let (stop, closed) = (Arc::clone(&stop), Arc::clone(&closed));
        std::thread::spawn(move || hog(addr, 600, stop, closed))
    };
    std::thread::sleep(Duration::from_secs(2));
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(5)))
            .build(),
    );
    let paths = [
        "/api/v1/status",
        "/api/v1/verdicts?limit=5",
        "/api/v1/topics",
    ];
    let mut answered = 0;
    let mut slowest = Duration::ZERO;
    for i in 0..44 {
        let t = Instant::now();
        let r = agent
            .get(format!("{}{}", s.base, paths[i % paths.len()]))
            .header("Authorization", format!("Bearer {}", s.token))
            .call();
        if r.is_ok_and(|r| r.status().as_u16() == 200) {
            answered += 1;
            slowest = slowest.max(t.elapsed());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::SeqCst);
    hogs.join().unwrap();
    let closed = closed.load(Ordering::SeqCst);
    eprintln!("answered {answered} of 44, slowest {slowest:?}; silent sockets closed by the server: {closed}");
    if answered < 42 {
        eprintln!(
            "{}",
            std::fs::read_to_string(d.log())
                .unwrap_or_default()
                .lines()
                .rev()
                .take(15)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    assert!(
        answered >= 42,
        "answered {answered} of 44 under 600 silent sockets"
    );
    // silent sockets are closed after their first-byte deadline (5 s), not kept for ever
    assert!(
        closed >= 300,
        "the silent sockets were not closed: {closed}"
    );
}
