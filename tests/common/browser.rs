//! Headless Chromium driven over the DevTools protocol (a websocket, `tungstenite`): navigate,
//! evaluate JavaScript, collect console errors and failed requests, take screenshots.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tungstenite::{stream::MaybeTlsStream, Message, WebSocket};

/// The Chromium binary: `$CHROMIUM`, else `chromium` / `chromium-browser` / `google-chrome` on
/// the PATH. Panics with the install command when there is none.
pub fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("CHROMIUM") {
        return PathBuf::from(p);
    }
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
            let p = dir.join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "headless Chromium is required for the dashboard tests and was not found on the PATH \
         (nor in $CHROMIUM). Install it: `apt-get update && apt-get install -y chromium`"
    );
}

/// A console error, an uncaught exception, or a failed request seen by the page.
#[derive(Debug, Clone)]
pub struct Problem(pub String);

pub struct Browser {
    child: Child,
    _profile: tempfile::TempDir,
    ws: WebSocket<MaybeTlsStream<TcpStream>>,
    next_id: u64,
    /// Console errors, exceptions and HTTP ≥ 400 responses, in arrival order.
    pub problems: Vec<Problem>,
    /// Bytes received over the network (encoded, as transferred) since the last navigation.
    pub bytes_received: u64,
}

impl Browser {
    /// Start headless Chromium with a `width` × `height` viewport and attach to its page.
    pub fn start(width: u32, height: u32) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let mut child = Command::new(chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                "--no-first-run",
                "--remote-debugging-port=0",
                "--remote-debugging-address=127.0.0.1",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(format!("--window-size={width},{height}"))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start chromium");
        // "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/ID"
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(i) = line.find("ws://") {
                    let _ = tx.send(line[i..].trim().to_string());
                }
            }
        });
        let browser_ws = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("chromium printed its DevTools address");
        let port = browser_ws
            .trim_start_matches("ws://127.0.0.1:")
            .split('/')
            .next()
            .unwrap()
            .to_string();
        let page_ws = page_target(&port);
        let (ws, _) = tungstenite::connect(page_ws.as_str()).expect("connect to the page");
        if let MaybeTlsStream::Plain(s) = ws.get_ref() {
            s.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
        }
        let mut b = Browser {
            child,
            _profile: profile,
            ws,
            next_id: 0,
            problems: Vec::new(),
            bytes_received: 0,
        };
        for m in [
            "Runtime.enable",
            "Log.enable",
            "Page.enable",
            "Network.enable",
        ] {
            b.call(m, json!({}));
        }
        b.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
        );
        b
    }

    fn note_event(&mut self, v: &Value) {
        let p = &v["params"];
        match v["method"].as_str().unwrap_or("") {
            "Runtime.consoleAPICalled" if p["type"] == "error" || p["type"] == "assert" => {
                self.problems
                    .push(Problem(format!("console.{}: {}", p["type"], p["args"])));
            }
            "Runtime.exceptionThrown" => self.problems.push(Problem(format!(
                "uncaught exception: {}",
                p["exceptionDetails"]
            ))),
            "Log.entryAdded" if p["entry"]["level"] == "error" => self
                .problems
                .push(Problem(format!("log error: {}", p["entry"]["text"]))),
            "Network.responseReceived" if p["response"]["status"].as_u64() >= Some(400) => {
                self.problems.push(Problem(format!(
                    "HTTP {} for {}",
                    p["response"]["status"], p["response"]["url"]
                )))
            }
            "Network.loadingFinished" => {
                self.bytes_received += p["encodedDataLength"].as_f64().unwrap_or(0.0) as u64
            }
            _ => {}
        }
    }

    /// Read one message (None on a read timeout) and record it if it is an event.
    fn read(&mut self) -> Option<Value> {
        match self.ws.read() {
            Ok(Message::Text(t)) => {
                let v: Value = serde_json::from_str(t.as_str()).unwrap();
                if v.get("method").is_some() {
                    self.note_event(&v);
                }
                Some(v)
            }
            Ok(_) => None,
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                None
            }
            Err(e) => panic!("DevTools connection: {e}"),
        }
    }

    /// Send a DevTools command and wait (≤ 60 s) for its result.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let msg = json!({"id": id, "method": method, "params": params}).to_string();
        self.ws.send(Message::text(msg)).unwrap();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(60) {
            if let Some(v) = self.read() {
                if v["id"].as_u64() == Some(id) {
                    assert!(v.get("error").is_none(), "{method}: {}", v["error"]);
                    return v["result"].clone();
                }
            }
        }
        panic!("no answer to {method} within 60 s");
    }

    /// Drain pending events for `ms` milliseconds.
    pub fn pump(&mut self, ms: u64) {
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(ms) {
            self.read();
        }
    }

    /// Load `url`; returns once the new document has replaced the old one.
    pub fn navigate(&mut self, url: &str) {
        self.eval("window.__replaced = true");
        self.bytes_received = 0;
        self.call("Page.navigate", json!({ "url": url }));
        self.wait_for(30, "the new document", "window.__replaced !== true");
    }

    /// Evaluate `expr` in the page; its value (JSON-serialisable) is returned.
    pub fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(
            r.get("exceptionDetails").is_none(),
            "{expr}: {}",
            r["exceptionDetails"]
        );
        r["result"]["value"].clone()
    }

    /// Poll `expr` until it is `true` (≤ `secs`); panics with `what` otherwise.
    pub fn wait_for(&mut self, secs: u64, what: &str, expr: &str) {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(secs) {
            if self.eval(expr) == Value::Bool(true) {
                return;
            }
            self.pump(100);
        }
        panic!(
            "timed out after {secs}s waiting for {what} ({expr}); problems: {:?}",
            self.problems
        );
    }

    /// A PNG of the whole page (viewport width, full content height).
    pub fn screenshot(&mut self, path: &Path) {
        self.screenshot_with(path, 1.0, f64::INFINITY)
    }

    /// A PNG of the page's top `max_height` CSS pixels (viewport width), scaled by `scale`.
    pub fn screenshot_with(&mut self, path: &Path, scale: f64, max_height: f64) {
        let m = self.call("Page.getLayoutMetrics", json!({}));
        let w = m["cssContentSize"]["width"]
            .as_f64()
            .unwrap_or(1440.0)
            .ceil();
        let h = m["cssContentSize"]["height"]
            .as_f64()
            .unwrap_or(900.0)
            .ceil();
        let vh = m["cssLayoutViewport"]["clientHeight"]
            .as_f64()
            .unwrap_or(900.0);
        // a viewport as tall as the shot, at the wanted pixel density
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": w, "height": h.min(max_height), "deviceScaleFactor": scale, "mobile": false}),
        );
        self.pump(300);
        let r = self.call("Page.captureScreenshot", json!({"format": "png"}));
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": w, "height": vh, "deviceScaleFactor": 1, "mobile": false}),
        );
        let png = base64_decode(r["data"].as_str().unwrap());
        assert!(png.starts_with(b"\x89PNG"), "screenshot is a PNG");
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The websocket address of the browser's first page target.
fn page_target(port: &str) -> String {
    let url = format!("http://127.0.0.1:{port}/json/list");
    let t = Instant::now();
    loop {
        if let Ok(mut r) = ureq::get(&url).call() {
            let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
            if let Some(ws) = v
                .as_array()
                .and_then(|a| a.iter().find(|t| t["type"] == "page"))
                .and_then(|t| t["webSocketDebuggerUrl"].as_str())
            {
                return ws.to_string();
            }
        }
        assert!(t.elapsed() < Duration::from_secs(30), "no page target");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Standard base64 (with padding), as DevTools sends screenshots.
pub fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=' && c != b'\n').collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= val(c) << (18 - 6 * i);
        }
        for i in 0..chunk.len().saturating_sub(1) {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    out
}
