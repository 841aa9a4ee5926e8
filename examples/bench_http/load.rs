//! The load generator of `bench_http`: many keep-alive HTTP/1.1 clients as coroutines of one
//! thread, each with one request in flight at a time.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio::sync::watch;

/// What the clients do now.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Phase {
    /// Wait, connections open.
    Idle,
    /// Send requests.
    Load,
    /// Finish.
    Stop,
}

/// Clients to run against one server.
pub struct Load {
    pub addr: SocketAddr,
    /// The request heads, without the final empty line (so a header can be added).
    pub requests: Vec<String>,
    pub clients: usize,
    pub think: Duration,
    /// Send `If-None-Match` with the tag of the last answer for the same path.
    pub revalidate: bool,
}

/// `GET path` to `host` with the bearer `token`, keep-alive, without the final empty line.
pub fn request(host: &str, path: &str, token: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nAccept: application/json\r\n")
}

/// One answer: its status, its `ETag`, and where it ends in the buffer.
struct Head {
    status: u16,
    etag: Option<String>,
    end: usize,
}

/// Parse the response head in `buf` (None: incomplete; Err: not one this client reads).
fn parse_head(buf: &[u8]) -> Result<Option<Head>, String> {
    let Some(h) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&buf[..h]).map_err(|e| e.to_string())?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or("no status line")?;
    let (mut len, mut etag) = (0usize, None);
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
        match k.as_str() {
            "content-length" => len = v.parse().map_err(|_| "bad content-length")?,
            "etag" => etag = Some(v.to_string()),
            "transfer-encoding" => return Err("chunked answers are not read".into()),
            _ => {}
        }
    }
    Ok(Some(Head {
        status,
        etag,
        end: h + 4 + len,
    }))
}

/// Send `req` on `conn` and read its answer into `buf` (cleared first).
async fn exchange(conn: &TcpStream, req: &[u8], buf: &mut Vec<u8>) -> Result<Head, String> {
    let mut sent = 0;
    while sent < req.len() {
        conn.writable().await.map_err(|e| e.to_string())?;
        match conn.try_write(&req[sent..]) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    buf.clear();
    let mut head = None;
    loop {
        if let Some(h) = &head {
            let h: &Head = h;
            if buf.len() >= h.end {
                return head.ok_or_else(String::new);
            }
        }
        conn.readable().await.map_err(|e| e.to_string())?;
        let at = buf.len();
        buf.resize(at + 64 * 1024, 0);
        match conn.try_read(&mut buf[at..]) {
            Ok(0) => return Err("connection closed".into()),
            Ok(n) => buf.truncate(at + n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => buf.truncate(at),
            Err(e) => return Err(e.to_string()),
        }
        if head.is_none() {
            head = parse_head(buf)?;
        }
    }
}

/// What one client measured: latencies (ms) of its answers, errors, `304`s.
type Tally = (Vec<f64>, u64, u64);

/// One client: from its `first` request on, loop over `requests` while the phase is `Load`.
async fn client(
    addr: SocketAddr,
    requests: std::sync::Arc<Vec<String>>,
    first: usize,
    clients: usize,
    think: Duration,
    revalidate: bool,
    mut phase: watch::Receiver<Phase>,
) -> Tally {
    let (mut lat, mut errors, mut not_modified) = (Vec::new(), 0, 0);
    let mut tags: Vec<Option<String>> = vec![None; requests.len()];
    let mut conn = None;
    let mut buf = Vec::new();
    let mut i = first;
    let mut loading = false;
    loop {
        let now = *phase.borrow_and_update();
        match now {
            Phase::Stop => return (lat, errors, not_modified),
            Phase::Idle => {
                loading = false;
                if phase.changed().await.is_err() {
                    return (lat, errors, not_modified);
                }
                continue;
            }
            Phase::Load if !loading => {
                // spread the clients over one think time, as independent pollers are
                loading = true;
                tokio::time::sleep(think.mul_f64(first as f64 / clients as f64)).await;
            }
            Phase::Load => {}
        }
        let c = match conn.take() {
            Some(c) => c,
            None => match TcpStream::connect(addr).await {
                Ok(c) => c,
                Err(_) => {
                    errors += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let k = i % requests.len();
        let mut req = requests[k].clone();
        if let (true, Some(t)) = (revalidate, &tags[k]) {
            req.push_str(&format!("If-None-Match: {t}\r\n"));
        }
        req.push_str("\r\n");
        let t = Instant::now();
        match exchange(&c, req.as_bytes(), &mut buf).await {
            Ok(h) if h.status == 200 || (h.status == 304 && revalidate) => {
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
                not_modified += u64::from(h.status == 304);
                if h.etag.is_some() {
                    tags[k] = h.etag;
                }
                conn = Some(c);
            }
            _ => errors += 1,
        }
        i += 1;
        if !think.is_zero() {
            tokio::time::sleep(think).await;
        }
    }
}

impl Load {
    /// Run the clients on this thread until the phase is `Stop`; their latencies (ms,
    /// unsorted), errors, and `304` answers.
    pub fn run(self, phase: watch::Receiver<Phase>) -> Tally {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let requests = std::sync::Arc::new(self.requests);
        rt.block_on(async {
            let running: Vec<_> = (0..self.clients)
                .map(|c| {
                    tokio::spawn(client(
                        self.addr,
                        requests.clone(),
                        c,
                        self.clients,
                        self.think,
                        self.revalidate,
                        phase.clone(),
                    ))
                })
                .collect();
            let mut all: Tally = Default::default();
            for t in running {
                let (l, e, n) = t.await.expect("a client");
                all.0.extend(l);
                all.1 += e;
                all.2 += n;
            }
            all
        })
    }
}
