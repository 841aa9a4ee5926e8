//! Driving the real `novad` binary: temp dirs, a daemon process, waiting, 20NG batches.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_novad");

pub fn archive() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data/20news-bydate.tar.gz")
}

/// Training posts of 20NG (group, text), in a fixed interleaved order, read once.
pub fn posts() -> &'static [(String, String)] {
    static P: OnceLock<Vec<(String, String)>> = OnceLock::new();
    P.get_or_init(|| {
        let mut all = novad::corpus::read_20news(&archive()).expect("20NG archive");
        all.retain(|p| p.split == "train" && !p.text.trim().is_empty());
        // interleave groups deterministically: sort by (number mod 97, group, number)
        all.sort_by_key(|p| (p.number % 97, p.group.clone(), p.number));
        all.into_iter().map(|p| (p.group, p.text)).collect()
    })
}

/// A JSONL batch of `n` posts starting at `offset`, all dated `day` (YYYY-MM-DD), with ids
/// `<tag>-<i>`.
pub fn jsonl_batch(offset: usize, n: usize, day: &str, tag: &str) -> String {
    let mut s = String::new();
    for (i, (_, text)) in posts()[offset..offset + n].iter().enumerate() {
        let v = serde_json::json!({
            "id": format!("{tag}-{i}"),
            "time": format!("{day}T{:02}:{:02}:00Z", (i / 60) % 24, i % 60),
            "text": text,
        });
        s.push_str(&v.to_string());
        s.push('\n');
    }
    s
}

pub struct Dirs {
    pub tmp: tempfile::TempDir,
}

impl Dirs {
    pub fn new() -> Dirs {
        Dirs {
            tmp: tempfile::tempdir().unwrap(),
        }
    }
    pub fn inbox(&self) -> PathBuf {
        self.tmp.path().join("inbox")
    }
    pub fn store(&self) -> PathBuf {
        self.tmp.path().join("store")
    }
    pub fn processed(&self) -> PathBuf {
        self.inbox().join("processed")
    }
    pub fn rejected(&self) -> PathBuf {
        self.inbox().join("rejected")
    }
    pub fn log(&self) -> PathBuf {
        self.tmp.path().join("daemon.log")
    }
    /// Write a file into the inbox atomically (temp dotfile + rename), like rsync.
    pub fn drop_file(&self, name: &str, content: &[u8]) {
        std::fs::create_dir_all(self.inbox()).unwrap();
        let tmp = self.inbox().join(format!(".{name}.partial"));
        std::fs::write(&tmp, content).unwrap();
        std::fs::rename(&tmp, self.inbox().join(name)).unwrap();
    }
}

/// A running `novad run`.
pub struct Daemon {
    pub child: Child,
}

impl Daemon {
    pub fn start(d: &Dirs, extra: &[&str]) -> Daemon {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(d.log())
            .unwrap();
        let child = Command::new(BIN)
            .args(["run", "--inbox"])
            .arg(d.inbox())
            .arg("--store")
            .arg(d.store())
            .args(["--settle-ms", "200", "--poll-ms", "100"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Daemon { child }
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([format!("-{sig}"), self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig}");
    }

    /// SIGKILL and reap.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait for a clean exit; returns the exit code.
    pub fn stop(mut self) -> i32 {
        self.signal("TERM");
        let status = wait_child(&mut self.child, Duration::from_secs(60));
        status.expect("daemon exits after SIGTERM")
    }

    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn wait_child(child: &mut Child, timeout: Duration) -> Option<i32> {
    let t = Instant::now();
    while t.elapsed() < timeout {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s.code().unwrap_or(-1));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Poll `cond` every 50 ms until it holds or `secs` pass.
pub fn wait_for(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(secs) {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out after {secs}s waiting for {what}");
}

pub fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    e.path().is_file()
                        || e.path()
                            .symlink_metadata()
                            .is_ok_and(|m| m.file_type().is_symlink())
                })
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Run `novad ARGS` to completion.
pub fn novad(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

pub fn novad_ok(args: &[&str]) -> String {
    let o = novad(args);
    assert!(
        o.status.success(),
        "novad {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

pub fn jsonl(out: &str) -> Vec<serde_json::Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
