//! `novad run --cluster`: real processes on 127.0.0.1 sharing the ℓ1 model's steps. The
//! committed model (`novad digest`) and every verdict equal a single-node `novad run` on the
//! same files; a killed process stops the cluster and a restart resumes without loss or
//! duplicate; an unreachable peer and a single-node model are refused clearly.
#[path = "common/daemon.rs"]
#[allow(dead_code)]
mod harness;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use harness::*;

/// Model flags of every run here: a small dictionary keeps the steps short; the defaults
/// otherwise (hybrid detector on, so the leader's judgement is shared too).
const MODEL: &[&str] = &["--k", "24", "--seed", "3"];

/// A hosts file for `n` processes on free 127.0.0.1 ports.
fn hosts_file(dir: &Path, n: usize) -> PathBuf {
    let mut text = String::from("# novad cluster: one host:port per process, process 0 first\n");
    for _ in 0..n {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        text.push_str(&format!("{}\n", l.local_addr().unwrap()));
    }
    let path = dir.join("hosts");
    std::fs::write(&path, text).unwrap();
    path
}

/// Process `i` of the cluster in `hosts`; process 0 runs the daemon on `d`, the others get
/// their own (unused) inbox and store; `extra` flags follow. Logs go to `d`'s log.
fn process(d: &Dirs, hosts: &Path, i: usize, extra: &[&str]) -> Daemon {
    let (inbox, store) = if i == 0 {
        (d.inbox(), d.store())
    } else {
        let r = d.tmp.path().join(format!("replica{i}"));
        (r.join("inbox"), r.join("store"))
    };
    let hosts = hosts.to_str().expect("a UTF-8 path");
    let i = i.to_string();
    let mut args = vec![
        "--settle-ms",
        "200",
        "--poll-ms",
        "100",
        "--cluster",
        hosts,
        "--process",
        &i,
        "--connect-timeout-secs",
        "60",
    ];
    args.extend_from_slice(extra);
    Daemon::start_on(d, &inbox, &store, &args)
}

/// The batch files of these tests: `files` files of `docs` 20NG posts each.
fn batches(files: usize, docs: usize) -> Vec<(String, String)> {
    (0..files)
        .map(|f| {
            let name = format!("b{f:02}.jsonl");
            let day = format!("2026-06-{:02}", f + 1);
            (name, jsonl_batch(f * docs, docs, &day, &format!("f{f}")))
        })
        .collect()
}

/// `files` batches of `docs` posts where two groups are held back until the second half of
/// the files, then fill 40 % of each batch: the bursts the event stage makes topics of (an
/// interleaved stream has none).
fn burst_batches(files: usize, docs: usize) -> Vec<(String, String)> {
    const NEW: [&str; 2] = ["sci.space", "rec.sport.hockey"];
    let all = posts();
    type Posts<'a> = Vec<&'a (String, String)>;
    let (mut new, mut old): (Posts, Posts) = all.iter().partition(|p| NEW.contains(&p.0.as_str()));
    (0..files)
        .map(|f| {
            let burst = if 2 * f >= files { docs * 2 / 5 } else { 0 };
            let mut texts: Vec<&str> = new.drain(..burst).map(|p| p.1.as_str()).collect();
            texts.extend(old.drain(..docs - burst).map(|p| p.1.as_str()));
            let day = format!("2026-06-{:02}", f + 1);
            let body: String = texts
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let v = serde_json::json!({
                        "id": format!("f{f}-{i}"),
                        "time": format!("{day}T{:02}:{:02}:00Z", (i / 60) % 24, i % 60),
                        "text": t,
                    });
                    format!("{v}\n")
                })
                .collect();
            (format!("b{f:02}.jsonl"), body)
        })
        .collect()
}

/// Drop the files one by one, each after the previous one is processed or rejected (one
/// timestep each, in order), then wait for the last.
fn feed(d: &Dirs, files: &[(String, String)]) {
    for (name, body) in files {
        d.drop_file(name, body.as_bytes());
        wait_for(120, &format!("{name} processed"), || done(d, name));
    }
}

/// Whether the file `name` was moved to processed/ or rejected/.
fn done(d: &Dirs, name: &String) -> bool {
    files_in(&d.processed()).contains(name) || files_in(&d.rejected()).contains(name)
}

/// One verdict as compared here: document id, timestep, the bits of its score and of the ℓ1
/// model's own score (the hybrid detector fuses them), novelty, explaining terms.
type Seen = (String, u64, u64, u64, bool, String);

/// Every verdict of the store, sorted.
fn verdicts(d: &Dirs) -> Vec<Seen> {
    let out = novad_ok(&["verdicts", "--store", &s(d), "--format", "jsonl"]);
    let mut v: Vec<Seen> = jsonl(&out)
        .into_iter()
        .map(|v| {
            (
                v["doc_id"].as_str().unwrap().to_string(),
                v["timestep"].as_u64().unwrap(),
                v["score"].as_f64().unwrap().to_bits(),
                v["hybrid"]["model_score"]
                    .as_f64()
                    .unwrap_or(-1.0)
                    .to_bits(),
                v["novel"].as_bool().unwrap(),
                v["terms"].to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Every stored topic (JSON lines as `novad topics` prints them, sorted).
fn topics(d: &Dirs) -> Vec<String> {
    let out = novad_ok(&["topics", "--store", &s(d), "--format", "jsonl"]);
    let mut t: Vec<String> = out.lines().map(str::to_string).collect();
    t.sort();
    t
}

fn digest(d: &Dirs) -> String {
    novad_ok(&["digest", "--store", &s(d)]).trim().to_string()
}

/// What a run committed: the model's digest, every verdict, every topic.
type Committed = (String, Vec<Seen>, Vec<String>);

/// The single-node reference: plain `novad run` on the same files.
fn single_node(files: &[(String, String)]) -> Committed {
    let d = Dirs::new();
    let daemon = Daemon::start(&d, MODEL);
    feed(&d, files);
    assert_eq!(stop(daemon), 0);
    (digest(&d), verdicts(&d), topics(&d))
}

/// Run `n` processes of `workers` workers each on the files; returns what the leader
/// committed.
fn cluster(n: usize, workers: usize, files: &[(String, String)]) -> Committed {
    let d = Dirs::new();
    let hosts = hosts_file(d.tmp.path(), n);
    let w = workers.to_string();
    let mut args = MODEL.to_vec();
    args.extend(["--workers-per-process", &w]);
    let mut procs: Vec<Daemon> = (0..n).map(|i| process(&d, &hosts, i, &args)).collect();
    feed(&d, files);
    let leader = procs.remove(0);
    assert_eq!(stop(leader), 0, "leader exits cleanly");
    for mut p in procs {
        let st = wait_child(&mut p.child, Duration::from_secs(60));
        assert_eq!(st, Some(0), "a replica exits cleanly when the leader stops");
    }
    let log = std::fs::read_to_string(d.log()).unwrap();
    assert!(log.contains("every peer connected"), "{log}");
    let loads = log.matches("model loaded").count();
    assert_eq!(
        loads,
        n * workers - 1,
        "each replica loaded the model once: {log}"
    );
    for i in 1..n * workers {
        memory_share_held(&log, i, n * workers);
    }
    (digest(&d), verdicts(&d), topics(&d))
}

/// The value of `field=` in a log line.
fn field(line: &str, field: &str) -> Option<usize> {
    let at = line.find(&format!(" {field}="))? + field.len() + 2;
    line[at..].split(' ').next()?.parse().ok()
}

/// Check that replica `i` of `peers` holds, after its last step, the vectors of the
/// remembered documents of its logical shards only: document number `no` (0, 1, …; nothing
/// is evicted here) belongs to shard `no % 64`, and shard s to worker `s % peers`.
fn memory_share_held(log: &str, i: usize, peers: usize) {
    let last = log
        .lines()
        .rev()
        .find(|l| l.contains("replica step") && field(l, "worker") == Some(i))
        .unwrap_or_else(|| panic!("worker {i} logged no step: {log}"));
    let docs = field(last, "memory_docs").expect("memory_docs");
    let kept = field(last, "memory_vectors").expect("memory_vectors");
    let mine = (0..docs).filter(|no| no % 64 % peers == i).count();
    assert!(docs > 0 && mine < docs, "{last}");
    assert_eq!(kept, mine, "worker {i} of {peers}: {last}");
}

#[test]
fn one_two_and_three_processes_commit_exactly_what_one_node_commits() {
    let files = burst_batches(4, 250);
    let (digest1, verdicts1, topics1) = single_node(&files);
    assert_eq!(verdicts1.len(), 4 * 250);
    assert!(verdicts1.iter().any(|v| v.4), "some verdicts are novel");
    // the bursts are events, found by the leader after the shared step
    assert!(!topics1.is_empty(), "some topics are found");
    for (n, workers) in [(1, 1), (2, 1), (3, 1), (2, 2)] {
        let (dn, vn, tn) = cluster(n, workers, &files);
        assert_eq!(vn, verdicts1, "{n} processes × {workers}: verdict scores");
        assert_eq!(dn, digest1, "{n} processes × {workers}: digest");
        assert_eq!(tn, topics1, "{n} processes × {workers}: topics");
    }
}

/// A backlog: the leader reads each next file while the replicas start on the current one,
/// and sends its batch out at the end of the step. A file read ahead that is not stepped (a
/// duplicate of a committed one, rejected at its turn) has its step abandoned by every
/// replica; what is committed is still exactly what one node commits.
#[test]
fn a_backlog_read_ahead_commits_what_one_node_commits_even_past_a_duplicate() {
    let mut files = batches(6, 150);
    // a copy of b01 after b02: read ahead during b02's step, then rejected at its turn
    let copy = ("b02x.jsonl".to_string(), files[1].1.clone());
    files.insert(3, copy);
    let (digest1, verdicts1, topics1) = single_node(&files);
    assert_eq!(verdicts1.len(), 6 * 150);
    let d = Dirs::new();
    let hosts = hosts_file(d.tmp.path(), 2);
    let procs: Vec<Daemon> = (0..2).map(|i| process(&d, &hosts, i, MODEL)).collect();
    feed(&d, &files[..1]);
    for (name, body) in &files[1..] {
        d.drop_file(name, body.as_bytes());
    }
    wait_for(180, "every file processed or rejected", || {
        files.iter().all(|(n, _)| done(&d, n))
    });
    drop(procs);
    let rejected = files_in(&d.rejected());
    assert_eq!(rejected, ["b02x.jsonl", "b02x.jsonl.error"], "{rejected:?}");
    let log = std::fs::read_to_string(d.log()).unwrap();
    assert!(
        log.contains("sent_ahead=true"),
        "no step went out ahead: {log}"
    );
    assert!(
        log.contains("the leader abandoned the step"),
        "the step of the duplicate was not abandoned: {log}"
    );
    assert_eq!(verdicts(&d), verdicts1, "verdicts");
    assert_eq!(digest(&d), digest1, "digest");
    assert_eq!(topics(&d), topics1, "topics");
}

fn wait_exit(child: &mut Child, secs: u64) -> Option<i32> {
    wait_child(child, Duration::from_secs(secs))
}

#[test]
fn killing_a_replica_stops_the_cluster_and_a_restart_resumes_without_loss() {
    let files = batches(10, 120);
    let (digest1, verdicts1, topics1) = single_node(&files);
    let d = Dirs::new();
    let hosts = hosts_file(d.tmp.path(), 2);
    let leader = process(&d, &hosts, 0, MODEL);
    let replica = process(&d, &hosts, 1, MODEL);
    feed(&d, &files[..2]);
    // four more at once; the kill lands as soon as the first of them is in, while the others
    // are being ingested
    for (name, body) in &files[2..6] {
        d.drop_file(name, body.as_bytes());
    }
    wait_for(120, "a third file processed", || {
        files_in(&d.processed()).len() >= 3
    });
    replica.kill9();
    for (name, body) in &files[6..] {
        d.drop_file(name, body.as_bytes());
    }
    let mut leader = leader;
    assert_eq!(
        wait_exit(&mut leader.child, 60),
        Some(3),
        "the leader stops when a peer is lost"
    );
    let log = std::fs::read_to_string(d.log()).unwrap();
    assert!(log.contains("lost the connection"), "{log}");
    // restart both: the rest is ingested once, from the last committed timestep
    let _leader = process(&d, &hosts, 0, MODEL);
    let _replica = process(&d, &hosts, 1, MODEL);
    wait_for(180, "every file processed", || {
        files
            .iter()
            .all(|(n, _)| files_in(&d.processed()).contains(n))
    });
    drop(_leader);
    drop(_replica);
    assert_eq!(verdicts(&d), verdicts1, "no verdict lost or duplicated");
    assert_eq!(digest(&d), digest1, "same model as one node");
    assert_eq!(topics(&d), topics1, "no topic lost or duplicated");
}

#[test]
fn killing_the_leader_stops_the_replicas_and_a_restart_resumes_without_loss() {
    let files = batches(8, 120);
    let (digest1, verdicts1, topics1) = single_node(&files);
    let d = Dirs::new();
    let hosts = hosts_file(d.tmp.path(), 3);
    let leader = process(&d, &hosts, 0, MODEL);
    let mut replicas = vec![process(&d, &hosts, 1, MODEL), process(&d, &hosts, 2, MODEL)];
    feed(&d, &files[..1]);
    for (name, body) in &files[1..5] {
        d.drop_file(name, body.as_bytes());
    }
    wait_for(120, "a second file processed", || {
        files_in(&d.processed()).len() >= 2
    });
    leader.kill9();
    for r in &mut replicas {
        assert_eq!(
            wait_exit(&mut r.child, 60),
            Some(3),
            "a replica stops when the leader is lost"
        );
    }
    // The leader commits in the background while it steps the next file: whatever it had
    // moved to processed/ when it died is durable, whole; nothing else is there in part.
    let stored = verdicts(&d);
    let processed = files_in(&d.processed());
    for (f, (name, _)) in files[..5].iter().enumerate() {
        let tag = format!("f{f}-");
        let n = stored.iter().filter(|v| v.0.starts_with(&tag)).count();
        if processed.contains(name) {
            assert_eq!(
                n, 120,
                "{name} was moved to processed/ with {n} of its verdicts"
            );
        } else {
            assert!(n == 0 || n == 120, "{name}: {n} of 120 verdicts stored");
        }
    }
    for (name, body) in &files[5..] {
        d.drop_file(name, body.as_bytes());
    }
    let procs: Vec<Daemon> = (0..3).map(|i| process(&d, &hosts, i, MODEL)).collect();
    wait_for(180, "every file processed", || {
        files
            .iter()
            .all(|(n, _)| files_in(&d.processed()).contains(n))
    });
    drop(procs);
    assert_eq!(verdicts(&d), verdicts1, "no verdict lost or duplicated");
    assert_eq!(digest(&d), digest1, "same model as one node");
    assert_eq!(topics(&d), topics1, "no topic lost or duplicated");
}

#[test]
fn a_process_that_cannot_reach_its_peer_names_the_address() {
    let d = Dirs::new();
    let hosts = hosts_file(d.tmp.path(), 2);
    let text = std::fs::read_to_string(&hosts).unwrap();
    let leader_addr = text.lines().nth(1).unwrap().to_string();
    // process `i` alone: it fails, and its error output is returned
    let alone = |i: &str| {
        let out = Command::new(bin())
            .args(["run", "--inbox"])
            .arg(d.inbox())
            .arg("--store")
            .arg(d.store())
            .arg("--cluster")
            .arg(&hosts)
            .args(["--process", i, "--connect-timeout-secs", "2"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "process {i} alone must fail");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = alone("1");
    assert!(
        err.contains("cannot reach process 0") && err.contains(&leader_addr),
        "{err}"
    );
    // and the leader, waiting for a process that never comes, names it
    let err = alone("0");
    let replica_addr = text.lines().nth(2).unwrap();
    assert!(
        err.contains("process 1") && err.contains(replica_addr),
        "{err}"
    );
}

#[test]
fn dnmf_and_ostc_are_refused_in_cluster_mode() {
    for kind in ["dnmf", "ostc"] {
        let d = Dirs::new();
        let hosts = hosts_file(d.tmp.path(), 2);
        let out = Command::new(bin())
            .args(["run", "--inbox"])
            .arg(d.inbox())
            .arg("--store")
            .arg(d.store())
            .arg("--cluster")
            .arg(&hosts)
            .args(["--process", "0", "--model", kind])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{kind} refused");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(kind) && err.contains("one node only"),
            "{kind}: {err}"
        );
    }
    // a store created with dnmf is refused too, once the cluster is up
    let d = Dirs::new();
    let first = d.tmp.path().join("first.jsonl");
    std::fs::write(&first, jsonl_batch(0, 30, "2026-06-01", "d")).unwrap();
    novad_ok(&[
        "ingest",
        "--store",
        &s(&d),
        "--model",
        "dnmf",
        first.to_str().unwrap(),
    ]);
    let hosts = hosts_file(d.tmp.path(), 2);
    let mut leader = process(&d, &hosts, 0, &[]);
    let mut replica = process(&d, &hosts, 1, &[]);
    assert_ne!(wait_exit(&mut leader.child, 60), Some(0));
    assert_ne!(wait_exit(&mut replica.child, 60), Some(0));
    let log = std::fs::read_to_string(d.log()).unwrap();
    assert!(log.contains("one node only"), "{log}");
}
