//! A real HTTP receiver of webhooks for the tests: a listener thread that records every
//! request (headers, body, arrival) and answers as told (2xx, another status, or late).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// One request received.
#[derive(Debug, Clone)]
pub struct Got {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// When it was read in full (Unix milliseconds).
    pub at_ms: i64,
}

impl Got {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

/// How the receiver answers.
#[derive(Debug, Clone, Copy)]
pub enum Answer {
    Status(u16),
    /// 200 after this long.
    Late(Duration),
}

pub struct Receiver {
    pub port: u16,
    got: Arc<Mutex<Vec<Got>>>,
    answer: Arc<Mutex<Answer>>,
    stop: Arc<AtomicBool>,
}

/// A free loopback port (nothing listens on it once this returns).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A request's header lines (name, value) and its body.
type Request = (Vec<(String, String)>, Vec<u8>);

/// Read one request from `s`: its headers and its body (by Content-Length).
fn read_request(s: &TcpStream) -> Option<Request> {
    let mut r = BufReader::new(s.try_clone().ok()?);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    if line.is_empty() {
        return None;
    }
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).ok()?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':')?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some((headers, body))
}

impl Receiver {
    /// Listen on `port` (0: any), answering `answer`.
    pub fn start(port: u16, answer: Answer) -> Receiver {
        let l = TcpListener::bind(("127.0.0.1", port)).unwrap();
        let port = l.local_addr().unwrap().port();
        l.set_nonblocking(true).unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let answer = Arc::new(Mutex::new(answer));
        let stop = Arc::new(AtomicBool::new(false));
        let (g, a, st) = (Arc::clone(&got), Arc::clone(&answer), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                let Ok((s, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let (g, a) = (Arc::clone(&g), Arc::clone(&a));
                std::thread::spawn(move || {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    let Some((headers, body)) = read_request(&s) else {
                        return;
                    };
                    g.lock().unwrap().push(Got {
                        headers,
                        body,
                        at_ms: now_ms(),
                    });
                    let ans = *a.lock().unwrap();
                    let status = match ans {
                        Answer::Status(c) => c,
                        Answer::Late(d) => {
                            std::thread::sleep(d);
                            200
                        }
                    };
                    let mut s = s;
                    let _ = write!(
                        s,
                        "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    );
                });
            }
        });
        Receiver {
            port,
            got,
            answer,
            stop,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    pub fn got(&self) -> Vec<Got> {
        self.got.lock().unwrap().clone()
    }

    pub fn answer(&self, a: Answer) {
        *self.answer.lock().unwrap() = a;
    }

    /// Wait up to `secs` for at least `n` requests.
    pub fn wait_for(&self, n: usize, secs: u64) -> Vec<Got> {
        let t0 = Instant::now();
        while self.got().len() < n && t0.elapsed() < Duration::from_secs(secs) {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.got()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}
