//! The load generator of `bench_http`: many keep-alive HTTP/1.1 clients as coroutines of one
//! thread, each with one request in flight at a time.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::Interest;
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
/// With `gzip` it accepts compressed answers as Chromium does (`Accept-Encoding: gzip,
/// deflate, br, zstd`); they are read to their `Content-Length`, not decompressed.
pub fn request(host: &str, path: &str, token: &str, gzip: bool) -> String {
    let accept = if gzip {
        "Accept-Encoding: gzip, deflate, br, zstd\r\n"
    } else {
        ""
    };
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nAccept: application/json\r\n{accept}")
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

/// Ask the kernel to stamp received data with its arrival time (`SO_TIMESTAMPNS`).
fn stamp_arrivals(conn: &TcpStream) {
    let on: libc::c_int = 1;
    // SAFETY: a valid socket and a c_int option value of the size given.
    unsafe {
        libc::setsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            &on as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// `recvmsg` into `buf`: the bytes read and the kernel's arrival time of the newest of them
/// (`SCM_TIMESTAMPNS`, wall clock), when the socket stamps arrivals.
fn recv_stamped(conn: &TcpStream, buf: &mut [u8]) -> std::io::Result<(usize, Option<SystemTime>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut control = [0u64; 16];
    // SAFETY: msghdr is plain data; every pointer set below is valid for the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: the socket is open and msg points at live buffers of the sizes given.
    let n = unsafe { libc::recvmsg(conn.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut stamp = None;
    // SAFETY: walking the control messages the kernel wrote into `control`.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                stamp = Some(UNIX_EPOCH + Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, stamp))
}

/// Send `req` on `conn` and read its answer into `buf` (cleared first), through `chunk` (a
/// read buffer kept from one exchange to the next, so no read zeroes memory); `arrived` gets
/// the kernel's arrival time of the answer's last bytes.
async fn exchange(
    conn: &TcpStream,
    req: &[u8],
    buf: &mut Vec<u8>,
    chunk: &mut [u8],
    arrived: &mut Option<SystemTime>,
) -> Result<Head, String> {
    *arrived = None;
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
        match conn.try_io(Interest::READABLE, || recv_stamped(conn, chunk)) {
            Ok((0, _)) => return Err("connection closed".into()),
            Ok((n, stamp)) => {
                buf.extend_from_slice(&chunk[..n]);
                if stamp.is_some() {
                    *arrived = stamp;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.to_string()),
        }
        if head.is_none() {
            head = parse_head(buf)?;
        }
    }
}

/// What one client measured: latencies (ms) of its answers as it saw them, the same until the
/// kernel received each answer's last bytes (the server's part, without this generator's own
/// wait for a core; for the answers the kernel stamped), errors, `304`s.
pub type Tally = (Vec<f64>, Vec<f64>, u64, u64);

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
    let (mut lat, mut wire, mut errors, mut not_modified) = (Vec::new(), Vec::new(), 0, 0);
    let mut tags: Vec<Option<String>> = vec![None; requests.len()];
    let mut conn = None;
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut i = first;
    let mut loading = false;
    loop {
        let now = *phase.borrow_and_update();
        match now {
            Phase::Stop => return (lat, wire, errors, not_modified),
            Phase::Idle => {
                loading = false;
                if phase.changed().await.is_err() {
                    return (lat, wire, errors, not_modified);
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
                Ok(c) => {
                    stamp_arrivals(&c);
                    c
                }
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
        let sent = SystemTime::now();
        let mut arrived = None;
        match exchange(&c, req.as_bytes(), &mut buf, &mut chunk, &mut arrived).await {
            Ok(h) if h.status == 200 || (h.status == 304 && revalidate) => {
                let seen = t.elapsed().as_secs_f64() * 1000.0;
                lat.push(seen);
                // only answers the kernel stamped (the clocks differ: never above what was seen)
                if let Some(d) = arrived.and_then(|a| a.duration_since(sent).ok()) {
                    wire.push((d.as_secs_f64() * 1000.0).min(seen));
                }
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
                let (l, w, e, n) = t.await.expect("a client");
                all.0.extend(l);
                all.1.extend(w);
                all.2 += e;
                all.3 += n;
            }
            all
        })
    }
}
