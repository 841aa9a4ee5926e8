//! A damaged, truncated, full or busy store, driven through the real binary: damage is
//! detected (never a panic, a hang or a silently emptier store), `novad rebuild` restores an
//! equal model from the processed files, and a full disk loses nothing.
#[path = "common/daemon.rs"]
#[allow(dead_code)]
mod harness;

use harness::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A JSONL batch of `n` synthetic documents (seeded by `offset`): each mixes two of twelve
/// topics of 40 words with some shared words, dated `day`, with ids `<tag>-<i>`.
fn batch(offset: usize, n: usize, day: &str, tag: &str) -> String {
    use rand::{Rng, SeedableRng};
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(offset as u64);
    let word = |t: usize, j: usize| format!("w{t}x{j}");
    let mut s = String::new();
    for i in 0..n {
        let (t1, t2) = (r.random_range(0..12), r.random_range(0..12));
        let len = r.random_range(20..60);
        let words: Vec<String> = (0..len)
            .map(|_| match r.random_range(0..10) {
                0..=4 => word(t1, r.random_range(0..40)),
                5..=7 => word(t2, r.random_range(0..40)),
                _ => word(99, r.random_range(0..200)),
            })
            .collect();
        let v = serde_json::json!({
            "id": format!("{tag}-{i}"),
            "time": format!("{day}T{:02}:{:02}:00Z", (i / 60) % 24, i % 60),
            "text": words.join(" "),
        });
        s.push_str(&v.to_string());
        s.push('\n');
    }
    s
}

/// Seconds a stalled store read may take before the guard declares the store damaged.
const STALL_SECS: &str = "5";

/// The attack's store: a daemon ingests two files (20 + 21 documents) and stops cleanly.
/// Returns the dirs, the model digest and the verdicts (JSON lines) of the healthy store.
fn small_store() -> (Dirs, String, String) {
    let d = Dirs::new();
    let daemon = Daemon::start(&d, &["--k", "10"]);
    d.drop_file("a.jsonl", batch(0, 20, "2026-05-01", "a").as_bytes());
    wait_for(60, "a processed", || files_in(&d.processed()).len() == 1);
    d.drop_file("b.jsonl", batch(20, 21, "2026-05-02", "b").as_bytes());
    wait_for(60, "b processed", || files_in(&d.processed()).len() == 2);
    assert_eq!(stop(daemon), 0);
    let digest = novad_ok(&["digest", "--store", &s(&d)]);
    let verdicts = novad_ok(&["verdicts", "--store", &s(&d), "--format", "jsonl"]);
    assert_eq!(jsonl(&verdicts).len(), 41);
    (d, digest, verdicts)
}

/// `novad ARGS` with a bounded stall time, killed after `limit` (a test failure).
/// Returns (exit code, stdout, stderr).
fn run_bounded(args: &[&str], limit: Duration) -> (i32, String, String) {
    let tmp = tempfile::tempdir().unwrap();
    let out = std::fs::File::create(tmp.path().join("out")).unwrap();
    let err = std::fs::File::create(tmp.path().join("err")).unwrap();
    let mut child = Command::new(bin())
        .args(args)
        .env("NOVAD_STALL_SECS", STALL_SECS)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap();
    let t = Instant::now();
    let code = wait_child(&mut child, limit);
    if code.is_none() {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "novad {args:?} still running after {:.0} s",
            t.elapsed().as_secs_f64()
        );
    }
    let read = |n: &str| std::fs::read_to_string(tmp.path().join(n)).unwrap_or_default();
    (code.unwrap(), read("out"), read("err"))
}

/// Damage `db/db` of a copy of the store.
#[derive(Debug, Clone, Copy)]
enum Damage {
    /// Truncate to this fraction of its size.
    Truncate(f64),
    /// Invert 4 KiB at this fraction of the size.
    Flip(f64),
    /// Zero 4 KiB at this fraction of the size.
    Zero(f64),
}

fn damage(db: &Path, how: Damage) {
    use std::io::{Read, Seek, SeekFrom, Write};
    let len = std::fs::metadata(db).unwrap().len();
    let at = |f: f64| ((len as f64 * f) as u64).min(len.saturating_sub(4096));
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(db)
        .unwrap();
    match how {
        Damage::Truncate(frac) => f.set_len((len as f64 * frac) as u64).unwrap(),
        Damage::Flip(frac) | Damage::Zero(frac) => {
            let off = at(frac);
            let mut buf = vec![0u8; 4096.min(len as usize)];
            f.seek(SeekFrom::Start(off)).unwrap();
            f.read_exact(&mut buf).unwrap();
            for b in buf.iter_mut() {
                *b = if matches!(how, Damage::Flip(_)) {
                    !*b
                } else {
                    0
                };
            }
            f.seek(SeekFrom::Start(off)).unwrap();
            f.write_all(&buf).unwrap();
        }
    }
    f.sync_all().unwrap();
}

/// The outcome of every command on a damaged store must be either the healthy answer (the
/// damage hit space sled no longer uses) or exit status 3 with a "damaged" message naming
/// `novad rebuild` — never a panic, another failure, a hang, or an answer with less data.
fn assert_detected_or_intact(case: &str, store: &str, digest: &str, verdicts: &str) -> bool {
    let mut detected = false;
    for cmd in ["status", "verdicts", "digest", "check"] {
        let mut args = vec![cmd, "--store", store];
        if cmd == "verdicts" {
            args.extend(["--format", "jsonl"]);
        }
        let (code, out, err) = run_bounded(&args, Duration::from_secs(90));
        assert!(!err.contains("panicked at"), "{case} {cmd}: a panic: {err}");
        match code {
            0 => {
                if cmd == "verdicts" {
                    assert_eq!(out, verdicts, "{case}: verdicts changed silently");
                }
                if cmd == "digest" {
                    assert_eq!(out, digest, "{case}: the model changed silently");
                }
                if cmd == "status" {
                    assert!(
                        out.lines()
                            .any(|l| l.starts_with("timesteps") && l.ends_with(" 2")),
                        "{case}: status lost timesteps: {out}"
                    );
                }
            }
            3 => {
                assert!(
                    err.contains("is damaged") && err.contains("novad rebuild"),
                    "{case} {cmd}: unclear message: {err}"
                );
                detected = true;
            }
            c => panic!("{case} {cmd}: exit {c}: {err}"),
        }
    }
    detected
}

/// Rebuild the damaged copy from the processed files; the model must equal the healthy one.
fn rebuild_equal(d: &Dirs, old: &Path, digest: &str) -> usize {
    let new = old.with_extension("rebuilt");
    let out = novad_ok(&[
        "rebuild",
        "--from",
        &d.processed().display().to_string(),
        "--old",
        &old.display().to_string(),
        "--store",
        &new.display().to_string(),
    ]);
    assert!(out.contains("rebuilt 2 timesteps (41 documents)"), "{out}");
    let new_s = new.display().to_string();
    assert_eq!(novad_ok(&["digest", "--store", &new_s]), digest);
    let vs = jsonl(&novad_ok(&[
        "verdicts", "--store", &new_s, "--format", "jsonl",
    ]));
    vs.len()
}

#[test]
fn damaged_db_files_are_detected_without_panic_or_hang_and_rebuilt_losing_nothing() {
    let (d, digest, verdicts) = small_store();
    let cases = [
        Damage::Truncate(0.5),
        Damage::Truncate(0.0),
        Damage::Truncate(0.1),
        Damage::Truncate(0.9),
        Damage::Flip(0.0),
        Damage::Flip(0.1),
        Damage::Flip(0.3),
        Damage::Flip(0.5),
        Damage::Flip(0.7),
        Damage::Flip(1.0),
        Damage::Zero(0.0),
        Damage::Zero(0.5),
    ];
    let mut table = Vec::new();
    for (i, how) in cases.iter().enumerate() {
        let copy = d.tmp.path().join(format!("damaged-{i}"));
        copy_dir(&d.store(), &copy);
        damage(&copy.join("db").join("db"), *how);
        let c = copy.display().to_string();
        let detected = assert_detected_or_intact(&format!("{how:?}"), &c, &digest, &verdicts);
        let rebuilt = rebuild_equal(&d, &copy, &digest);
        assert_eq!(rebuilt, 41, "{how:?}: documents lost in the rebuild");
        table.push(format!(
            "{how:?}: {} ; rebuilt, 0 of 41 documents lost",
            if detected {
                "detected (exit 3)"
            } else {
                "unused space, answers unchanged"
            }
        ));
    }
    println!("{}", table.join("\n"));
    // the attack's case: a cut log without a sled snapshot, which sled opens as an EMPTY
    // store (measured: `status` used to exit 0 with 0 timesteps), is refused
    let cut = d.tmp.path().join("cut");
    copy_dir(&d.store(), &cut);
    for e in std::fs::read_dir(cut.join("db")).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with("snap.") {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    damage(&cut.join("db").join("db"), Damage::Truncate(0.0));
    let c = cut.display().to_string();
    let (code, out, err) = run_bounded(&["status", "--store", &c], Duration::from_secs(60));
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        err.contains("holds 0 timesteps but 2 were committed"),
        "{err}"
    );
    assert_eq!(rebuild_equal(&d, &cut, &digest), 41);
}

#[test]
fn rebuild_uses_the_journal_when_the_database_is_gone() {
    let (d, digest, _) = small_store();
    std::fs::remove_dir_all(d.store().join("db")).unwrap();
    let new = d.tmp.path().join("new").display().to_string();
    let out = novad_ok(&[
        "rebuild",
        "--from",
        &d.processed().display().to_string(),
        "--old",
        &s(&d),
        "--store",
        &new,
    ]);
    assert!(out.contains("its journal.jsonl"), "{out}");
    assert!(out.contains("equal to the committed state"), "{out}");
    assert_eq!(novad_ok(&["digest", "--store", &new]), digest);
    // a processed file renamed by a name clash is found by its content
    std::fs::rename(
        d.processed().join("a.jsonl"),
        d.processed().join("a.jsonl.1"),
    )
    .unwrap();
    let new2 = d.tmp.path().join("new2").display().to_string();
    novad_ok(&[
        "rebuild",
        "--from",
        &d.processed().display().to_string(),
        "--old",
        &s(&d),
        "--store",
        &new2,
    ]);
    assert_eq!(novad_ok(&["digest", "--store", &new2]), digest);
    // a missing input is named
    std::fs::remove_file(d.processed().join("b.jsonl")).unwrap();
    let o = novad(&[
        "rebuild",
        "--from",
        &d.processed().display().to_string(),
        "--old",
        &s(&d),
        "--store",
        &d.tmp.path().join("new3").display().to_string(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("timestep 1 (b.jsonl"), "{err}");
}

#[test]
fn check_finds_a_missing_verdict_and_a_changed_state() {
    let (d, _, _) = small_store();
    let (code, out, _) = run_bounded(&["check", "--store", &s(&d)], Duration::from_secs(60));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("ok: every tree read and verified"), "{out}");
    // remove one verdict behind novad's back
    {
        let store = novad::store::Store::open(&d.store()).unwrap();
        let t = store.tree(novad::store::schema::VERDICTS);
        let (k, _) = t.iter().next().unwrap().unwrap();
        t.remove(k).unwrap();
        store.db().flush().unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    let (code, out, err) = run_bounded(&["check", "--store", &s(&d)], Duration::from_secs(60));
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains("20 verdicts stored for 21 documents")
            || out.contains("19 verdicts stored for 20 documents"),
        "{out}"
    );
    // a sidecar recording another state digest: the model load refuses the store
    let side = d.store().join("committed.json");
    let mut c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&side).unwrap()).unwrap();
    c["state_digest"] = serde_json::json!("00".repeat(32));
    std::fs::write(&side, c.to_string()).unwrap();
    let (code, _, err) = run_bounded(&["digest", "--store", &s(&d)], Duration::from_secs(60));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("differs from the one committed"), "{err}");
}

#[test]
fn a_sidecar_one_behind_is_brought_up_to_date_and_one_ahead_is_refused() {
    let d = Dirs::new();
    let dir = d.store();
    let a = d.tmp.path().join("a.jsonl");
    let b = d.tmp.path().join("b.jsonl");
    std::fs::write(&a, batch(0, 20, "2026-05-01", "a")).unwrap();
    std::fs::write(&b, batch(20, 21, "2026-05-02", "b")).unwrap();
    let st = s(&d);
    novad_ok(&[
        "ingest",
        "--store",
        &st,
        "--k",
        "10",
        &a.display().to_string(),
    ]);
    let after_one = std::fs::read_to_string(dir.join("committed.json")).unwrap();
    let snapshot = d.tmp.path().join("one-step");
    copy_dir(&dir, &snapshot);
    novad_ok(&["ingest", "--store", &st, &b.display().to_string()]);
    let after_two = std::fs::read_to_string(dir.join("committed.json")).unwrap();
    assert_ne!(after_one, after_two);
    // the crash window: sled flushed timestep 2, the sidecar still says 1
    std::fs::write(dir.join("committed.json"), &after_one).unwrap();
    let digest = novad_ok(&["digest", "--store", &st]);
    let healed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("committed.json")).unwrap())
            .unwrap();
    assert_eq!(healed["timesteps"], 2);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&after_two).unwrap()["state_digest"],
        healed["state_digest"]
    );
    novad_ok(&["check", "--store", &st]);
    // never ahead: a store holding one timestep under a sidecar that says two is refused
    std::fs::write(snapshot.join("committed.json"), &after_two).unwrap();
    let (code, _, err) = run_bounded(
        &["status", "--store", &snapshot.display().to_string()],
        Duration::from_secs(60),
    );
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("holds 1 timesteps but 2 were committed"),
        "{err}"
    );
    assert!(!digest.is_empty());
}

#[test]
fn a_half_written_sled_snapshot_no_longer_blocks_the_store() {
    let (d, digest, _) = small_store();
    let stale = d
        .store()
        .join("db")
        .join("snap.00000000FFFFFFFF.generating");
    std::fs::write(&stale, vec![7u8; 300]).unwrap();
    let (code, out, err) = run_bounded(&["digest", "--store", &s(&d)], Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, digest);
    assert!(!stale.exists(), "the stale snapshot was removed");
}

#[test]
fn run_waits_for_a_short_query_lock_and_names_a_long_one() {
    let (d, _, _) = small_store();
    let held = novad::store::Store::open(&d.store()).unwrap();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        drop(held);
    });
    let before = std::fs::read_to_string(d.log()).unwrap_or_default();
    let daemon = Daemon::start(&d, &[]);
    wait_for(60, "the daemon is up after the lock was released", || {
        std::fs::read_to_string(d.log())
            .unwrap_or_default()
            .matches("novad running")
            .count()
            > before.matches("novad running").count()
    });
    releaser.join().unwrap();
    assert_eq!(stop(daemon), 0);
    // a lock held longer than the wait: a clear error, not a hang
    let _held = novad::store::Store::open(&d.store()).unwrap();
    let t = Instant::now();
    let (code, _, err) = run_bounded(
        &[
            "ingest",
            "--store",
            &s(&d),
            &d.processed().join("a.jsonl").display().to_string(),
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("in use by another process"), "{err}");
    assert!(t.elapsed() >= Duration::from_secs(4), "it waited");
}

/// A tmpfs of `mib` MiB mounted for the test (unmounted on drop), or None with the reason.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(at: &Path, mib: u64) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(at).map_err(|e| e.to_string())?;
        let o = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(at)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !o.status.success() {
            return Err(String::from_utf8_lossy(&o.stderr).trim().to_string());
        }
        Ok(Tmpfs {
            dir: at.to_path_buf(),
        })
    }

    /// Write a filler file until the file system is full.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let p = self.dir.join("filler");
        let mut f = std::fs::File::create(&p).unwrap();
        let block = vec![0xA5u8; 1 << 16];
        while f.write_all(&block).is_ok() {}
        let _ = f.sync_all();
        p
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

fn log_count(d: &Dirs, what: &str) -> usize {
    std::fs::read_to_string(d.log())
        .unwrap_or_default()
        .matches(what)
        .count()
}

#[test]
fn a_full_disk_during_ingest_keeps_the_files_waits_and_loses_nothing() {
    let d = Dirs::new();
    let fs = match Tmpfs::mount(&d.tmp.path().join("small-disk"), 48) {
        Ok(fs) => fs,
        Err(why) => {
            println!("SKIPPED: cannot mount a tmpfs to fill ({why}); run as root to exercise a full disk");
            return;
        }
    };
    let store = fs.dir.join("store");
    let st = store.display().to_string();
    let names: Vec<String> = (0..6).map(|i| format!("{i:02}.jsonl")).collect();
    let contents: Vec<String> = (0..6)
        .map(|i| {
            batch(
                i * 150,
                150,
                &format!("2026-06-{:02}", i + 1),
                &format!("f{i}"),
            )
        })
        .collect();
    let start = |d: &Dirs| {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(d.log())
            .unwrap();
        Daemon {
            child: Command::new(bin())
                .args(["run", "--inbox"])
                .arg(d.inbox())
                .args([
                    "--store",
                    &st,
                    "--k",
                    "20",
                    "--settle-ms",
                    "200",
                    "--poll-ms",
                    "100",
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap(),
        }
    };
    let mut daemon = start(&d);
    d.drop_file(&names[0], contents[0].as_bytes());
    wait_for(60, "the first file", || files_in(&d.processed()).len() == 1);
    // 1. the disk fills up; the next files stay in the inbox; the daemon waits
    let filler = fs.fill();
    d.drop_file(&names[1], contents[1].as_bytes());
    d.drop_file(&names[2], contents[2].as_bytes());
    wait_for(60, "the full disk is logged", || {
        log_count(&d, "disk is full") >= 1
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        daemon.is_running(),
        "the daemon keeps running on a full disk"
    );
    assert_eq!(files_in(&d.processed()).len(), 1);
    assert_eq!(files_in(&d.inbox()).len(), 2, "the files stay in the inbox");
    // 2. killed while waiting, restarted on the still-full disk: it waits at the open
    daemon.kill9();
    let mut daemon = start(&d);
    std::thread::sleep(Duration::from_secs(3));
    assert!(daemon.is_running(), "a restart on a full disk waits");
    // 3. space comes back: everything goes through
    std::fs::remove_file(&filler).unwrap();
    wait_for(120, "the waiting files", || {
        files_in(&d.processed()).len() == 3
    });
    // 4. full again while running: the daemon restarts itself in place once space is back
    let filler = fs.fill();
    for i in 3..6 {
        d.drop_file(&names[i], contents[i].as_bytes());
    }
    let full_before = log_count(&d, "disk is full");
    wait_for(60, "the second full disk", || {
        log_count(&d, "disk is full") > full_before
    });
    std::fs::remove_file(&filler).unwrap();
    wait_for(180, "all files", || files_in(&d.processed()).len() == 6);
    let restarts = log_count(&d, "restarting novad in place");
    assert!(restarts >= 1, "the daemon restarted itself in place");
    assert!(daemon.is_running());
    assert_eq!(stop(daemon), 0);
    // nothing lost, nothing twice, the same model as an uninterrupted run
    let vs = jsonl(&novad_ok(&[
        "verdicts", "--store", &st, "--format", "jsonl",
    ]));
    assert_eq!(vs.len(), 6 * 150, "every document exactly one verdict");
    let reference = d.tmp.path().join("ref");
    let mut args: Vec<String> = vec![
        "ingest".into(),
        "--store".into(),
        reference.display().to_string(),
        "--k".into(),
        "20".into(),
    ];
    let st_json: serde_json::Value = serde_json::from_str(&novad_ok(&[
        "status", "--store", &st, "--format", "json", "--recent", "6",
    ]))
    .unwrap();
    let mut order: Vec<(u64, String)> = st_json["recent"]
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
    order.sort();
    for (_, f) in &order {
        args.push(d.processed().join(f).display().to_string());
    }
    let a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    novad_ok(&a);
    assert_eq!(
        novad_ok(&["digest", "--store", &st]),
        novad_ok(&["digest", "--store", &reference.display().to_string()])
    );
    novad_ok(&["check", "--store", &st]);
    let leftovers: Vec<String> = std::fs::read_dir(store.join("db"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".generating"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    println!(
        "full disk: {} disk-full events, {restarts} in-place restarts, 1 kill -9, 900 of 900 documents kept",
        log_count(&d, "disk is full")
    );
}
