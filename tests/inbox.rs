//! The inbox with the real binary: files dropped while the daemon runs, a file that appears
//! while the inbox is first listed, an inbox removed and made again, a read-only inbox.
#[path = "common/daemon.rs"]
#[allow(dead_code)]
mod harness;

use harness::*;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

const SMALL: &[&str] = &["--k", "5"];

fn log_of(d: &Dirs) -> String {
    std::fs::read_to_string(d.log()).unwrap_or_default()
}

fn wait_up(d: &Dirs) {
    wait_for(60, "the daemon is up", || {
        log_of(d).contains("novad running")
    });
}

/// The files of the timesteps, in timestep order.
fn taken_order(d: &Dirs) -> Vec<String> {
    let st = status_json(d, 10000);
    let mut v: Vec<(u64, String)> = st["recent"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let t = r["timestep"].as_u64().unwrap();
            (t, r["file"].as_str().unwrap().to_string())
        })
        .collect();
    v.sort();
    v.into_iter().map(|x| x.1).collect()
}

/// The names in `dir` sorted by (mtime, name): the order the daemon promises.
fn by_mtime_then_name(dir: &Path, names: &[String]) -> Vec<String> {
    let mut v: Vec<(SystemTime, String)> = names
        .iter()
        .map(|n| {
            let m = std::fs::metadata(dir.join(n)).unwrap().modified().unwrap();
            (m, n.clone())
        })
        .collect();
    v.sort();
    v.into_iter().map(|x| x.1).collect()
}

#[test]
fn files_dropped_while_the_daemon_runs_are_each_taken_once_oldest_first() {
    let d = Dirs::new();
    let daemon = Daemon::start(&d, SMALL);
    wait_up(&d);
    // never taken: temporary names; rejected: a folder
    for n in [".hidden.txt", "x.tmp", "y.part"] {
        std::fs::write(d.inbox().join(n), "not a batch\n").unwrap();
    }
    std::fs::create_dir(d.inbox().join("sub")).unwrap();
    let names: Vec<String> = (0..24).map(|i| format!("{i:02}.txt")).collect();
    for (i, n) in names.iter().enumerate() {
        let body = format!("document {i} about item{} and thing{}\n", i % 5, i % 3);
        if i % 3 == 0 {
            // written in place (settles), the others renamed in (complete at once)
            std::fs::write(d.inbox().join(n), body).unwrap();
        } else {
            d.drop_file(n, body.as_bytes());
        }
        if i % 8 == 7 {
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    wait_for(120, "all processed", || {
        files_in(&d.processed()).len() == names.len()
    });
    assert_eq!(stop(daemon), 0);
    let order = taken_order(&d);
    assert_eq!(
        order.len(),
        names.len(),
        "each file is one timestep: {order:?}"
    );
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(sorted, names, "each file taken once");
    // a file written in place is complete later than the renamed ones written after it: the
    // order is by mtime, then name, among the files complete at the time, so it holds within
    // each kind of file
    for kind in [0, 1] {
        let got: Vec<String> = order
            .iter()
            .filter(|n| (n[..2].parse::<usize>().unwrap() % 3 == 0) as usize == kind)
            .cloned()
            .collect();
        assert_eq!(got, by_mtime_then_name(&d.processed(), &got));
    }
    assert_eq!(files_in(&d.inbox()), vec![".hidden.txt", "x.tmp", "y.part"]);
    assert!(d.rejected().join("sub").is_dir());
}

#[test]
fn a_backlog_is_taken_in_mtime_then_name_order_with_files_that_appear_during_the_first_listing() {
    let d = Dirs::new();
    std::fs::create_dir_all(d.inbox()).unwrap();
    // a long first listing: many entries the daemon skips
    for i in 0..30_000 {
        std::fs::write(d.inbox().join(format!(".skip-{i}")), "").unwrap();
    }
    let backlog: Vec<String> = (0..6).map(|i| format!("b{i}.txt")).collect();
    for (i, n) in backlog.iter().enumerate().rev() {
        std::fs::write(d.inbox().join(n), format!("backlog {i} item{i}\n")).unwrap();
    }
    let daemon = Daemon::start(&d, SMALL);
    // files that appear while the daemon starts and lists the inbox
    let late: Vec<String> = (0..5).map(|i| format!("late{i}.txt")).collect();
    for (i, n) in late.iter().enumerate() {
        std::thread::sleep(Duration::from_millis(60));
        std::fs::write(d.inbox().join(n), format!("late {i} thing{i}\n")).unwrap();
    }
    wait_for(120, "all processed", || {
        files_in(&d.processed()).len() == backlog.len() + late.len()
    });
    assert_eq!(stop(daemon), 0);
    let order = taken_order(&d);
    assert_eq!(order.len(), backlog.len() + late.len(), "{order:?}");
    // the backlog is complete together at the first listing: oldest first (written last to
    // first)
    let got: Vec<String> = order
        .iter()
        .filter(|n| n.starts_with('b'))
        .cloned()
        .collect();
    assert_eq!(got, by_mtime_then_name(&d.processed(), &backlog));
}

#[test]
fn a_removed_inbox_is_waited_for_and_used_again_once_it_is_back() {
    let d = Dirs::new();
    let mut daemon = Daemon::start(&d, SMALL);
    wait_up(&d);
    d.drop_file("a.txt", b"first document\n");
    wait_for(60, "a processed", || files_in(&d.processed()).len() == 1);
    std::fs::remove_dir_all(d.inbox()).unwrap();
    std::thread::sleep(Duration::from_secs(4));
    assert!(daemon.is_running(), "the daemon exited: {}", log_of(&d));
    let gone = "the inbox cannot be listed";
    assert_eq!(log_of(&d).matches(gone).count(), 1, "{}", log_of(&d));
    std::fs::create_dir(d.inbox()).unwrap();
    d.drop_file("b.txt", b"second document\n");
    wait_for(60, "b processed", || d.processed().join("b.txt").is_file());
    assert!(daemon.is_running());
    assert!(log_of(&d).contains("the inbox is back"));
    // it is watched again: a file written in place is taken too
    std::fs::write(d.inbox().join("c.txt"), "third document\n").unwrap();
    wait_for(60, "c processed", || d.processed().join("c.txt").is_file());
    assert_eq!(stop(daemon), 0);
    assert!(
        !d.store().join("novad.sock").exists(),
        "the socket is removed"
    );
    assert_eq!(log_of(&d).matches(gone).count(), 1);
}

/// Make `dir` read-only for this process (as root, chmod is not enough: the immutable flag).
fn read_only(dir: &Path, on: bool) {
    let mode = if on { 0o555 } else { 0o755 };
    let chmod =
        || std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(mode));
    if on {
        chmod().unwrap();
    }
    // SAFETY: geteuid has no preconditions
    if unsafe { libc::geteuid() } == 0 {
        let flag = if on { "+i" } else { "-i" };
        let ok = Command::new("chattr").arg(flag).arg(dir).status();
        assert!(
            ok.is_ok_and(|s| s.success()),
            "chattr {flag} {}",
            dir.display()
        );
    }
    if !on {
        chmod().unwrap();
    }
}

#[test]
fn a_read_only_inbox_logs_a_bounded_number_of_lines_and_recovers() {
    let d = Dirs::new();
    let mut daemon = Daemon::start(&d, SMALL);
    wait_up(&d);
    d.drop_file("a.txt", b"first document\n");
    wait_for(60, "a processed", || files_in(&d.processed()).len() == 1);
    std::fs::write(d.inbox().join("b.txt"), "second document\n").unwrap();
    std::os::unix::fs::symlink("/etc/hostname", d.inbox().join("c.txt")).unwrap();
    read_only(&d.inbox(), true);
    let probe = std::fs::write(d.inbox().join("probe"), "x");
    if probe.is_ok() {
        read_only(&d.inbox(), false);
        panic!("the inbox could not be made read-only");
    }
    let before = log_of(&d).lines().count();
    std::thread::sleep(Duration::from_secs(8));
    let during = log_of(&d);
    let lines = during.lines().count() - before;
    read_only(&d.inbox(), false);
    assert!(daemon.is_running());
    // b is committed once, then cannot be moved; c cannot be rejected: one error for both,
    // not two lines every poll
    assert_eq!(
        during.matches("cannot move files out of the inbox").count(),
        1,
        "{during}"
    );
    assert!(lines <= 6, "{lines} log lines in 8 s:\n{during}");
    wait_for(60, "b processed", || {
        d.processed().join("b.txt").is_file() && d.rejected().join("c.txt.error").is_file()
    });
    assert!(log_of(&d).contains("files can be moved out of the inbox again"));
    assert_eq!(stop(daemon), 0);
    assert_eq!(taken_order(&d), vec!["a.txt", "b.txt"]);
}
