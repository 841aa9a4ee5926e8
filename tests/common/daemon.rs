//! Driving the real `novad` binary: temp dirs, a daemon process, waiting, 20NG batches.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The `novad` binary: cargo's path for integration tests; for examples, the `novad` next to
/// the example's directory (`target/<profile>/novad`, build it with `cargo build --release`).
pub fn bin() -> PathBuf {
    match option_env!("CARGO_BIN_EXE_novad") {
        Some(p) => PathBuf::from(p),
        None => {
            let exe = std::env::current_exe().unwrap();
            exe.parent().unwrap().parent().unwrap().join("novad")
        }
    }
}

/// The 20NG archive (see `novad_lab::corpus::archive_20news`).
pub fn archive() -> PathBuf {
    novad_lab::corpus::archive_20news()
}

/// Posts of 20NG (group, text; train and test), in a fixed interleaved order, read once.
pub fn posts() -> &'static [(String, String)] {
    static P: OnceLock<Vec<(String, String)>> = OnceLock::new();
    P.get_or_init(|| {
        let mut all = novad_lab::corpus::read_20news(&archive()).expect("20NG archive");
        all.retain(|p| !p.text.trim().is_empty());
        // interleave groups deterministically: sort by (number mod 97, group, number)
        all.sort_by_key(|p| (p.number % 97, p.group.clone(), p.number));
        all.into_iter().map(|p| (p.group, p.text)).collect()
    })
}

/// The walk-through's batch files (`examples/batches`), in name order.
pub fn example_batches() -> Vec<PathBuf> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/batches");
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    names.sort();
    names
}

/// A JSONL batch of `n` posts starting at `offset` (wrapping around the corpus), all dated
/// `day` (YYYY-MM-DD), with ids `<tag>-<i>`.
pub fn jsonl_batch(offset: usize, n: usize, day: &str, tag: &str) -> String {
    let mut s = String::new();
    let all = posts();
    for i in 0..n {
        // wraps around past the end: ids (and so file contents) stay distinct
        let text = &all[(offset + i) % all.len()].1;
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
    /// `novad run` with the tests' short settle and poll times, then `extra`.
    pub fn start(d: &Dirs, extra: &[&str]) -> Daemon {
        let mut args = vec!["--settle-ms", "200", "--poll-ms", "100"];
        args.extend_from_slice(extra);
        Daemon::start_exactly(d, &args)
    }

    /// `novad run` with exactly `args` after the inbox and store (no test defaults); its log
    /// is appended to `d.log()`.
    pub fn start_exactly(d: &Dirs, args: &[&str]) -> Daemon {
        Daemon::start_on(d, &d.inbox(), &d.store(), args)
    }

    /// `novad run --inbox INBOX --store STORE` then exactly `args`; its log is appended to
    /// `d.log()`.
    pub fn start_on(
        d: &Dirs,
        inbox: &std::path::Path,
        store: &std::path::Path,
        args: &[&str],
    ) -> Daemon {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(d.log())
            .unwrap();
        let child = Command::new(bin())
            .args(["run", "--inbox"])
            .arg(inbox)
            .arg("--store")
            .arg(store)
            .args(args)
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
pub fn wait_for(secs: u64, what: &str, cond: impl FnMut() -> bool) {
    wait_or_say(secs, what, cond, String::new);
}

/// [`wait_for`], with `say()` (e.g. the daemon's log) in the message when it times out.
pub fn wait_or_say(
    secs: u64,
    what: &str,
    mut cond: impl FnMut() -> bool,
    say: impl FnOnce() -> String,
) {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(secs) {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out after {secs}s waiting for {what}\n{}", say());
}

/// The last `n` lines of the daemon log of `d`.
pub fn log_tail(d: &Dirs, n: usize) -> String {
    let log = std::fs::read_to_string(d.log()).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
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
    Command::new(bin()).args(args).output().unwrap()
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

/// Kill -9 the daemon at random moments while it ingests, restart, repeat; the outcome must
/// equal an uninterrupted run.
pub fn crash_cycles(cycles: usize, files: usize, docs: usize, seed: u64) -> CrashReport {
    crash_cycles_with(cycles, files, docs, seed, &["--k", "60"], 0..400)
}

/// [`crash_cycles`] for a store created with `model_args` (e.g. `--model dnmf`). Most daemons
/// are killed a random number of milliseconds in `window` after they are up and have moved
/// a random 0–2 further files (size `window` to about one batch's time, so that kills land
/// both between and inside ingests); one in four is killed blindly during start-up. The
/// window is cut to two files' time of the uninterrupted reference run, so that a fast
/// machine does not ingest the whole stream in a few cycles.
pub fn crash_cycles_with(
    cycles: usize,
    files: usize,
    docs: usize,
    seed: u64,
    model_args: &[&str],
    window: std::ops::Range<u64>,
) -> CrashReport {
    let d = Dirs::new();
    let names: Vec<String> = (0..files).map(|i| format!("{i:03}.jsonl")).collect();
    let contents: Vec<String> = (0..files)
        .map(|i| {
            jsonl_batch(
                i * docs,
                docs,
                &format!("2026-04-{:02}", 1 + i % 28),
                &format!("c{i}"),
            )
        })
        .collect();
    for (n, c) in names.iter().zip(&contents) {
        d.drop_file(n, c.as_bytes());
    }
    // The daemon takes files oldest first: (mtime, name). Files written within the same few
    // milliseconds can carry out-of-order mtimes (coarse vs fine-grained kernel timestamps),
    // so the reference order is read back from the files themselves.
    let mut order: Vec<(std::time::SystemTime, String)> = names
        .iter()
        .map(|n| {
            (
                std::fs::metadata(d.inbox().join(n))
                    .unwrap()
                    .modified()
                    .unwrap(),
                n.clone(),
            )
        })
        .collect();
    order.sort();
    // reference: the same files, uninterrupted, in that order, through the same code path
    let ref_store = d.tmp.path().join("ref").display().to_string();
    let ref_dir = d.tmp.path().join("ref-files");
    std::fs::create_dir_all(&ref_dir).unwrap();
    let mut args = vec!["ingest".to_string(), "--store".into(), ref_store.clone()];
    args.extend(model_args.iter().map(|a| a.to_string()));
    for (_, n) in &order {
        let p = ref_dir.join(n);
        std::fs::copy(d.inbox().join(n), &p).unwrap();
        args.push(p.display().to_string());
    }
    let a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let t_ref = std::time::Instant::now();
    novad_ok(&a);
    let per_file = t_ref.elapsed().as_millis() as u64 / files as u64;
    let window = window.start..window.end.min(window.start + 2 * per_file + 1);
    let want = novad_ok(&["digest", "--store", &ref_store]);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    // the number of daemons that got as far as logging "novad running" (signal handlers in,
    // store open, recovery done)
    let started = |d: &Dirs| {
        std::fs::read_to_string(d.log())
            .unwrap_or_default()
            .matches("novad running")
            .count()
    };
    let mut kills = 0;
    let mut progress = 0;
    let mut done_before = 0;
    for cycle in 0..cycles {
        if files_in(&d.processed()).len() == files {
            break;
        }
        let up_before = started(&d);
        let daemon = Daemon::start(&d, model_args);
        // Kill moments are anchored to what the daemon has done, not to wall-clock guesses
        // (a loaded CI machine starts and ingests several times slower than a workstation):
        // one cycle in four kills blindly during start-up/recovery; the others wait until the
        // daemon is up and has moved 0–2 more files, then kill after a random delay in
        // `window`, which lands between or inside the next ingest.
        if rng.random_range(0..4) > 0 {
            let tail = || log_tail(&d, 40);
            wait_or_say(120, "the daemon is up", || started(&d) > up_before, tail);
            let target = (done_before + rng.random_range(0..=2)).min(files);
            let processed = || files_in(&d.processed()).len() >= target;
            wait_or_say(120, "files processed before the kill", processed, tail);
        }
        std::thread::sleep(Duration::from_millis(rng.random_range(window.clone())));
        daemon.kill9();
        kills += 1;
        let done = files_in(&d.processed()).len();
        if done > done_before && done < files {
            progress += 1;
        }
        done_before = done;
        // after every kill: the store opens (once the daemon got as far as creating it) and
        // no file is in two places
        if d.store().join("db").exists() {
            let st = novad(&["status", "--store", &s(&d), "--format", "json"]);
            assert!(
                st.status.success(),
                "cycle {cycle}: {}",
                String::from_utf8_lossy(&st.stderr)
            );
        } else {
            assert_eq!(done, 0, "cycle {cycle}: files processed without a store");
        }
        let inbox: HashSet<String> = files_in(&d.inbox()).into_iter().collect();
        for f in files_in(&d.processed()) {
            assert!(
                !inbox.contains(&f),
                "cycle {cycle}: {f} in inbox and processed"
            );
        }
    }
    assert!(
        kills >= cycles.div_ceil(2),
        "at least half the cycles killed the daemon before it finished ({kills} of {cycles})"
    );
    assert!(
        progress >= (kills / 4).max(1),
        "kills landed during ingest ({progress} of {kills} cycles made progress)"
    );
    // the last daemon must be up (signal handlers installed: it logs "novad running" after
    // that) before it is stopped, or a SIGTERM during its start-up kills it by default action
    let before = started(&d);
    let daemon = Daemon::start(&d, &[]);
    let all = || files_in(&d.processed()).len() == files;
    wait_or_say(120, "all processed", all, || log_tail(&d, 40));
    wait_for(60, "the last daemon is up", || started(&d) > before);
    assert_eq!(stop(daemon), 0);
    assert!(files_in(&d.inbox()).is_empty());
    assert_eq!(files_in(&d.processed()), names);
    let vs = jsonl(&novad_ok(&[
        "verdicts",
        "--store",
        &s(&d),
        "--format",
        "jsonl",
    ]));
    assert_eq!(vs.len(), files * docs, "every document exactly one verdict");
    let ids: HashSet<&str> = vs.iter().map(|v| v["doc_id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), files * docs);
    // same files in the same timesteps
    let st = status_json(&d, files);
    let mut got_order: Vec<(u64, String)> = st["recent"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["timestep"].as_u64().unwrap(),
                r["file"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    got_order.sort();
    let want_order: Vec<String> = order.into_iter().map(|o| o.1).collect();
    assert_eq!(
        got_order.into_iter().map(|o| o.1).collect::<Vec<_>>(),
        want_order
    );
    assert_eq!(
        novad_ok(&["digest", "--store", &s(&d)]),
        want,
        "model equals the uninterrupted run's"
    );
    CrashReport { kills, progress }
}

/// What a crash run did.
#[derive(Debug, Clone, Copy)]
pub struct CrashReport {
    pub kills: usize,
    /// Kills after which more files were processed than before, but not all.
    pub progress: usize,
}

/// The store directory as a string argument.
/// `novad status --format json` of `d`'s store, with the `recent` newest timesteps.
pub fn status_json(d: &Dirs, recent: usize) -> serde_json::Value {
    let n = recent.to_string();
    let out = novad_ok(&[
        "status",
        "--store",
        &s(d),
        "--format",
        "json",
        "--recent",
        &n,
    ]);
    serde_json::from_str(&out).unwrap()
}

pub fn s(d: &Dirs) -> String {
    d.store().display().to_string()
}

/// SIGTERM the daemon and wait for its exit code.
pub fn stop(mut daemon: Daemon) -> i32 {
    daemon.signal("TERM");
    wait_child(&mut daemon.child, Duration::from_secs(60)).expect("exits")
}

/// Copy the directory tree `from` into `to` (created), leaving out a daemon's socket
/// (`novad.sock`), which cannot be copied as a file.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else if p.file_name().is_some_and(|n| n != "novad.sock") {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

/// utime + stime of `pid` (all its threads), in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // fields after the command name, which is in parentheses and may hold spaces
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    // SAFETY: sysconf has no preconditions
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks / hz
}
