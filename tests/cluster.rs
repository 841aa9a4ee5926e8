//! `novad run --cluster`: real processes on 127.0.0.1 sharing the ℓ1 model's steps. The
//! committed model (`novad digest`) and every verdict equal a single-node `novad run` on the
//! same files; a killed process stops the cluster and a restart resumes without loss or
//! duplicate; an unreachable peer and a single-node model are refused clearly; peers prove
//! they hold the cluster key, strangers on either side are dropped and named while the real
//! peer still joins, and a cluster without a sound key file is refused at start.
#[path = "common/daemon.rs"]
#[allow(dead_code)]
mod harness;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use novad::cluster::auth::{self, ClusterKey, Shape};

use harness::*;

/// Model flags of every run here: a small dictionary keeps the steps short; the defaults
/// otherwise (hybrid detector on, so the leader's judgement is shared too).
const MODEL: &[&str] = &["--k", "24", "--seed", "3"];

/// The cluster key file of the cluster in `dir`, written by `novad cluster-key` the first
/// time.
fn key_file(dir: &Path) -> PathBuf {
    let path = dir.join("cluster.key");
    if !path.exists() {
        novad_ok(&["cluster-key", path.to_str().expect("a UTF-8 path")]);
    }
    path
}

/// A hosts file for `n` processes on free 127.0.0.1 ports (and the cluster's key file beside
/// it, [`key_file`]).
fn hosts_file(dir: &Path, n: usize) -> PathBuf {
    key_file(dir);
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
    let key = key_file(hosts.parent().expect("the hosts file's folder"));
    let key = key.to_str().expect("a UTF-8 path");
    let hosts = hosts.to_str().expect("a UTF-8 path");
    let i = i.to_string();
    let mut args = vec![
        "--cluster-key",
        key,
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
        whole_memory_held(&log, i);
    }
    (digest(&d), verdicts(&d), topics(&d))
}

/// The value of `field=` in a log line.
fn field(line: &str, field: &str) -> Option<usize> {
    let at = line.find(&format!(" {field}="))? + field.len() + 2;
    line[at..].split(' ').next()?.parse().ok()
}

/// Check that replica `i` holds, after its last step, the vector of every remembered
/// document (each worker searches the whole memory for its own documents).
fn whole_memory_held(log: &str, i: usize) {
    let last = log
        .lines()
        .rev()
        .find(|l| l.contains("replica step") && field(l, "worker") == Some(i))
        .unwrap_or_else(|| panic!("worker {i} logged no step: {log}"));
    let docs = field(last, "memory_docs").expect("memory_docs");
    let kept = field(last, "memory_vectors").expect("memory_vectors");
    assert!(docs > 0, "{last}");
    assert_eq!(kept, docs, "worker {i}: {last}");
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
/// replica; what is committed is still exactly what one node commits, the later steps dealt
/// by measured burdens.
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
        log.contains("terms_aside=true"),
        "the leader's part of no terms round went out before its other work: {log}"
    );
    assert!(
        log.contains("the leader abandoned the step"),
        "the step of the duplicate was not abandoned: {log}"
    );
    // later steps dealt the search and the rows by measured burdens, not the fixed parts
    assert!(
        log.lines().any(|l| l.contains("cluster step")
            && l.contains("burdens=\"")
            && !l.contains("burdens=\"fixed\"")),
        "no step was dealt by measured burdens: {log}"
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
            .arg("--cluster-key")
            .arg(key_file(d.tmp.path()))
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
            .arg("--cluster-key")
            .arg(key_file(d.tmp.path()))
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

/// The line of `hosts` for process `i`.
fn host(hosts: &Path, i: usize) -> String {
    let text = std::fs::read_to_string(hosts).unwrap();
    let mut lines = text.lines().filter(|l| !l.starts_with('#'));
    lines.nth(i).unwrap().to_string()
}

/// A connection to `addr`, retried until something listens there.
fn dial(addr: &str) -> TcpStream {
    let t0 = Instant::now();
    loop {
        match TcpStream::connect(addr) {
            Ok(s) => {
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                return s;
            }
            Err(e) if t0.elapsed() > Duration::from_secs(30) => panic!("{addr}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// A hello that looks like a novad process's: magic, protocol, index, processes, workers, nonce.
fn fake_hello(index: u64) -> Vec<u8> {
    let mut b = b"novadcl3".to_vec();
    for v in [novad::cluster::auth::PROTOCOL, index, 2, 1] {
        b.extend(v.to_be_bytes());
    }
    b.extend([0x5a; 32]);
    b
}

/// Whether the peer of `s` closed it without sending anything more.
fn closed_silently(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 64];
    matches!(s.read(&mut b), Ok(0) | Err(_))
}

/// Wait until the log of `d` holds `what`; returns the log.
fn log_holds(d: &Dirs, what: &str) -> String {
    wait_for(60, what, || {
        std::fs::read_to_string(d.log()).is_ok_and(|l| l.contains(what))
    });
    std::fs::read_to_string(d.log()).unwrap()
}

/// One batch, and the verdicts one node gives it.
fn one_batch() -> (Vec<(String, String)>, Vec<Seen>) {
    let files = batches(1, 80);
    let (_, verdicts1, _) = single_node(&files);
    assert_eq!(verdicts1.len(), 80);
    (files, verdicts1)
}

#[test]
fn strangers_at_the_leaders_port_are_dropped_and_named_and_the_real_replica_joins() {
    let (files, verdicts1) = one_batch();
    let d = Dirs::new();
    let hosts = hosts_file(d.tmp.path(), 2);
    let leader = process(&d, &hosts, 0, MODEL);
    let addr = host(&hosts, 0);
    // garbage
    let mut junk = dial(&addr);
    junk.write_all(&[0xab; 128]).unwrap();
    assert!(closed_silently(&mut junk), "the leader answered garbage");
    // a hello as process 1 with a proof made without the key
    let mut forger = dial(&addr);
    forger.write_all(&fake_hello(1)).unwrap();
    // the leader's hello (72 bytes) and proof (32)
    let mut answer = [0u8; 104];
    forger.read_exact(&mut answer).unwrap();
    forger.write_all(&[0x11; 32]).unwrap();
    assert!(
        closed_silently(&mut forger),
        "the leader took a forged proof"
    );
    // a silent stranger, connected while the real replica joins
    let silent = dial(&addr);
    let log = log_holds(&d, "did not prove the cluster key");
    for (s, why) in [
        (&junk, "not a novad cluster process"),
        (&forger, "did not prove the cluster key"),
    ] {
        let from = s.local_addr().unwrap().to_string();
        assert!(
            log.lines().any(
                |l| l.contains(&format!("dropped a connection from {from}")) && l.contains(why)
            ),
            "{from} ({why}) not named: {log}"
        );
    }
    let replica = process(&d, &hosts, 1, MODEL);
    feed(&d, &files);
    drop(silent);
    assert_eq!(verdicts(&d), verdicts1, "the cluster's verdicts");
    assert_eq!(stop(leader), 0, "leader exits cleanly");
    let mut replica = replica;
    assert_eq!(wait_exit(&mut replica.child, 60), Some(0));
}

#[test]
fn a_stranger_listening_where_the_leader_should_be_is_rejected_by_the_replica() {
    let (files, verdicts1) = one_batch();
    let d = Dirs::new();
    let hosts = hosts_file(d.tmp.path(), 2);
    let addr = host(&hosts, 0);
    let stranger = TcpListener::bind(&addr).unwrap();
    let replica = process(&d, &hosts, 1, MODEL);
    // first the replica's hello is answered with a hello as process 0 and a made-up proof:
    // the replica must hang up without proving anything itself
    let (mut s, _) = stranger.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut hello = [0u8; 72];
    s.read_exact(&mut hello).unwrap();
    assert_eq!(&hello[..8], b"novadcl3");
    let mut fake = fake_hello(0);
    fake.extend([0x22; 32]);
    s.write_all(&fake).unwrap();
    assert!(
        closed_silently(&mut s),
        "the replica went on with a stranger"
    );
    // then garbage, to its next try
    let (mut s, _) = stranger.accept().unwrap();
    s.write_all(&[0xcd; 128]).unwrap();
    drop(s);
    let log = log_holds(&d, "not a novad cluster process");
    let named = format!("dropped the connection to process 0 at {addr}");
    assert!(
        log.lines()
            .any(|l| l.contains(&named) && l.contains("did not prove the cluster key")),
        "{log}"
    );
    // the stranger goes, the real leader comes: the replica, still trying, joins it
    drop(stranger);
    let leader = process(&d, &hosts, 0, MODEL);
    feed(&d, &files);
    assert_eq!(verdicts(&d), verdicts1, "the cluster's verdicts");
    assert_eq!(stop(leader), 0, "leader exits cleanly");
    let mut replica = replica;
    assert_eq!(wait_exit(&mut replica.child, 60), Some(0));
}

#[test]
fn a_cluster_without_a_sound_key_file_is_refused_at_start() {
    let d = Dirs::new();
    let hosts = hosts_file(d.tmp.path(), 2);
    let start = |key: Option<&Path>| {
        let mut c = Command::new(bin());
        c.args(["run", "--inbox"])
            .arg(d.inbox())
            .arg("--store")
            .arg(d.store())
            .arg("--cluster")
            .arg(&hosts)
            .args(["--process", "0", "--connect-timeout-secs", "30"]);
        if let Some(k) = key {
            c.arg("--cluster-key").arg(k);
        }
        let t0 = Instant::now();
        let out = c.output().unwrap();
        assert!(!out.status.success(), "started with key {key:?}");
        assert!(t0.elapsed() < Duration::from_secs(20), "refused only late");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = start(None);
    assert!(
        err.contains("novad cluster-key FILE") && err.contains("--cluster-key"),
        "{err}"
    );
    let open = d.tmp.path().join("open.key");
    std::fs::write(&open, [7u8; 32]).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = start(Some(&open));
    assert!(
        err.contains(open.to_str().unwrap()) && err.contains("0644"),
        "{err}"
    );
    let short = d.tmp.path().join("short.key");
    std::fs::write(&short, [7u8; 16]).unwrap();
    std::fs::set_permissions(&short, std::fs::Permissions::from_mode(0o600)).unwrap();
    let err = start(Some(&short));
    assert!(
        err.contains(short.to_str().unwrap()) && err.contains("16 bytes"),
        "{err}"
    );
    // `novad cluster-key` wrote the cluster's key 0600, 32 bytes, and will not overwrite it
    let key = key_file(d.tmp.path());
    let meta = std::fs::metadata(&key).unwrap();
    assert_eq!((meta.permissions().mode() & 0o777, meta.len()), (0o600, 32));
    let before = std::fs::read(&key).unwrap();
    let out = novad(&["cluster-key", key.to_str().unwrap()]);
    assert!(!out.status.success(), "a key was overwritten");
    assert!(String::from_utf8_lossy(&out.stderr).contains("exists already"));
    assert_eq!(std::fs::read(&key).unwrap(), before);
}

/// After the handshake peers are trusted, but a peer that then sends bytes timely cannot
/// take, or goes away, stops the process with status 3 and a message, never an abort.
#[test]
fn a_peer_that_sends_junk_after_the_handshake_stops_the_leader_with_status_3() {
    let d = Dirs::new();
    let hosts = hosts_file(d.tmp.path(), 2);
    let mut leader = process(&d, &hosts, 0, MODEL);
    let key = ClusterKey::load(&key_file(d.tmp.path())).unwrap();
    let me = Shape {
        process: 1,
        processes: 2,
        workers: 1,
    };
    let mut s = dial(&host(&hosts, 0));
    auth::initiate(&mut s, &key, me, 0).unwrap();
    log_holds(&d, "every peer connected");
    s.write_all(&[0u8; 128]).unwrap();
    drop(s);
    assert_eq!(wait_exit(&mut leader.child, 60), Some(3), "exit status");
    let log = std::fs::read_to_string(d.log()).unwrap();
    assert!(log.contains("lost the connection"), "{log}");
}
