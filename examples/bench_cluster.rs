//! Scale-out benchmark of `novad run --cluster` on 20 Newsgroups: per-timestep time and bytes
//! exchanged for 1 and 2 processes, where the time goes (coding, exchange, update, commit), and
//! a cost model fitted to these figures and extrapolated to 8–64 workers.
//!
//!     cargo build --release && cargo run --release --example bench_cluster -- [batches] [k] [detector] [cores]
//!
//! Defaults: 5 measured batches of 1,000 posts, k = 200, `--detector model` (the model's own
//! score: the coding-dominated detector; `hybrid` for the default detector), `cores` = 1.
//! Every process gets `cores` rayon threads and is pinned (taskset) to its own cores, so
//! P processes stand for P machines of `cores` cores each (on a 2-core machine: 1 core each).
//! Each run bootstraps on 2,000 posts (not measured), then drops the batches one at a time
//! and times each from the rename into the inbox to its move to processed/. Then as many
//! batches again (the stream's next posts) are renamed into the inbox at once, a backlog as a
//! firehose leaves it, and timed together from the first rename to the last move (`sustained`:
//! later posts against a larger memory, so more seconds per timestep than the batches before;
//! compare its ratio, not its seconds). The figures per
//! timestep come from the leader's log (`timestep committed`, `cluster step`; with the
//! backlog also each process's wait in the rounds for the others, `wait_seconds`), and each
//! process's CPU seconds per timestep from /proc (on a shared machine the wall times suffer
//! from other work; the leader's CPU seconds are what a dedicated 1-core machine would take),
//! and each process's resident memory after the last timestep. Last, the ceiling of any
//! scale-out on the machine: two independent single-process daemons, one per core, each given
//! the whole stream, so that they share nothing but the machine (caches, memory bandwidth);
//! the cluster's backlog ratio is also given as a share of theirs. With `NOVAD_BENCH_LOGS=DIR` the
//! daemon log of each run is kept as `DIR/1.log` and `DIR/2.log` (every step's figures, the
//! replicas' included).
#[path = "../tests/common/daemon.rs"]
#[allow(dead_code)]
mod harness;

use harness::*;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The value of a `key=value` field (value possibly quoted) of a log line.
fn field(line: &str, key: &str) -> f64 {
    line.split(&format!(" {key}="))
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.trim_matches('"').parse().ok())
        .unwrap_or(f64::NAN)
}

/// CPU seconds (user + system, all threads) a process has used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // the fields after the command name, which is in parentheses
    let rest = stat.rsplit_once(')').map_or("", |r| r.1);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0)) / ticks
}

/// Resident memory of a process now (VmRSS), MiB.
fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let l = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            l.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// The log lines of `what` of the measured batches: the log must hold one per batch dropped
/// (the bootstrap, the measured batches, the backlog); the bootstrap's is skipped.
fn measured<'a>(log: &'a str, what: &str, batches: usize) -> Vec<&'a str> {
    let all: Vec<&str> = log.lines().filter(|l| l.contains(what)).collect();
    assert_eq!(all.len(), 1 + 2 * batches, "one {what} per batch");
    all[1..=batches].to_vec()
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// Per-timestep means of one run.
#[derive(Debug, Default, Clone)]
struct Run {
    processes: usize,
    end_to_end: f64,
    /// Seconds per timestep with a backlog of batch files in the inbox.
    sustained: f64,
    /// CPU seconds per timestep of each process (the leader first) with that backlog.
    sustained_cpu: Vec<f64>,
    /// Seconds per backlog timestep the leader, and each other process on average, waited in
    /// the all-gather rounds for the other workers' payloads (`wait_seconds` of the logs).
    sustained_wait: (f64, f64),
    /// CPU seconds per timestep of the leader process and of each other process.
    leader_cpu: f64,
    replica_cpu: f64,
    /// Resident memory after the last timestep, MiB: the leader and each other process.
    leader_rss: f64,
    replica_rss: Vec<f64>,
    step: f64,
    coding: f64,
    local_code: f64,
    /// The hybrid detector's search round as the leader sees it (its own search and the
    /// exchange; with one process, the whole search).
    search: f64,
    /// The leader's own search of its share of the memory.
    search_own: f64,
    exchange: f64,
    docs_round: f64,
    update: f64,
    topics: f64,
    hybrid: f64,
    commit: f64,
    docs_bytes: f64,
    outputs_bytes: f64,
    codes_bytes: f64,
    /// The hybrid detector's search round and the found round (topics, refresh plan), bytes
    /// over the network.
    search_bytes: f64,
    topics_bytes: f64,
}

/// The bootstrap batch every run starts with (not measured).
fn bootstrap_batch() -> (String, String) {
    let body = jsonl_batch(0, 2000, "2026-01-01", "boot");
    ("0000.jsonl".into(), body)
}

/// The `batches` batches dropped one at a time after the bootstrap.
fn single_batches(batches: usize) -> Vec<(String, String)> {
    (0..batches)
        .map(|b| {
            let day = format!("2026-01-{:02}", 2 + b % 27);
            let body = jsonl_batch(2000 + b * 1000, 1000, &day, &format!("b{b}"));
            (format!("{:04}.jsonl", b + 1), body)
        })
        .collect()
}

/// The stream's next `batches` batches, renamed into the inbox at once (a backlog).
fn backlog_batches(batches: usize) -> Vec<(String, String)> {
    (0..batches)
        .map(|b| {
            let day = format!("2026-02-{:02}", 1 + b % 27);
            let first = 2000 + (batches + b) * 1000;
            let body = jsonl_batch(first, 1000, &day, &format!("s{b}"));
            (format!("{:04}.jsonl", batches + b + 1), body)
        })
        .collect()
}

/// Write `files` into `d`'s inbox under names the daemon ignores.
fn stage(d: &Dirs, files: &[(String, String)]) {
    for (name, body) in files {
        std::fs::write(d.inbox().join(format!(".{name}.partial")), body).unwrap();
    }
}

/// Rename the staged `files` into `d`'s inbox.
fn release(d: &Dirs, files: &[(String, String)]) {
    for (name, _) in files {
        let tmp = d.inbox().join(format!(".{name}.partial"));
        std::fs::rename(tmp, d.inbox().join(name)).unwrap();
    }
}

/// Stop the daemons (SIGTERM) and wait for them.
fn stop(children: &mut [Child]) {
    for c in children {
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        let _ = wait_child(c, Duration::from_secs(60));
    }
}

/// Start process `i` of the cluster of `hosts`, pinned to `cores` cores from core
/// `slot × cores` on.
fn spawn(d: &Dirs, hosts: &Path, i: usize, slot: usize, cores: usize, args: &[&str]) -> Child {
    let (inbox, store) = if i == 0 {
        (d.inbox(), d.store())
    } else {
        let r = d.tmp.path().join(format!("replica{i}"));
        (r.join("inbox"), r.join("store"))
    };
    let total = std::thread::available_parallelism().map_or(1, |n| n.get());
    let first = (slot * cores) % total;
    let list: Vec<String> = (first..first + cores)
        .map(|c| (c % total).to_string())
        .collect();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(d.log())
        .unwrap();
    Command::new("taskset")
        .args(["-c", &list.join(",")])
        .arg(bin())
        .args(["run", "--settle-ms", "50", "--poll-ms", "20", "--inbox"])
        .arg(inbox)
        .arg("--store")
        .arg(store)
        .arg("--cluster")
        .arg(hosts)
        .arg("--cluster-key")
        .arg(hosts.with_file_name("cluster.key"))
        .args(["--process", &i.to_string()])
        .args(args)
        .env("RAYON_NUM_THREADS", cores.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("taskset and novad")
}

fn run(processes: usize, batches: usize, cores: usize, args: &[&str]) -> Run {
    let d = Dirs::new();
    let mut text = String::new();
    for _ in 0..processes {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        text.push_str(&format!("{}\n", l.local_addr().unwrap()));
    }
    let hosts = d.tmp.path().join("hosts");
    std::fs::write(&hosts, text).unwrap();
    // the cluster's key, beside the hosts file (`spawn` passes it)
    let key = hosts.with_file_name("cluster.key");
    novad_ok(&["cluster-key", key.to_str().expect("a UTF-8 path")]);
    let mut children: Vec<Child> = (0..processes)
        .map(|i| spawn(&d, &hosts, i, i, cores, args))
        .collect();
    let pids: Vec<u32> = children.iter().map(|c| c.id()).collect();
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); processes];
    let mut drop_and_wait = |name: &str, body: &str| -> f64 {
        let before: Vec<f64> = pids.iter().map(|&p| cpu_seconds(p)).collect();
        let t = Instant::now();
        d.drop_file(name, body.as_bytes());
        let target = d.processed().join(name);
        while !target.exists() {
            std::thread::sleep(Duration::from_millis(2));
            assert!(t.elapsed() < Duration::from_secs(900), "timeout on {name}");
        }
        let wall = t.elapsed().as_secs_f64();
        for (i, &p) in pids.iter().enumerate() {
            cpu[i].push(cpu_seconds(p) - before[i]);
        }
        wall
    };
    let (boot, body) = bootstrap_batch();
    drop_and_wait(&boot, &body);
    let lat: Vec<f64> = single_batches(batches)
        .iter()
        .map(|(name, body)| drop_and_wait(name, body))
        .collect();
    // the bootstrap batch is not measured
    let cpu: Vec<Vec<f64>> = cpu.into_iter().map(|v| v[1..].to_vec()).collect();
    // Sustained: as many batches again, all in the inbox at once (a backlog, as a firehose
    // leaves it), timed from the first rename to the last move to processed/.
    let backlog = backlog_batches(batches);
    stage(&d, &backlog);
    let before: Vec<f64> = pids.iter().map(|&p| cpu_seconds(p)).collect();
    let t = Instant::now();
    release(&d, &backlog);
    for (name, _) in &backlog {
        while !d.processed().join(name).exists() {
            std::thread::sleep(Duration::from_millis(2));
            assert!(t.elapsed() < Duration::from_secs(900), "timeout on {name}");
        }
    }
    let sustained = t.elapsed().as_secs_f64() / batches as f64;
    let sustained_cpu: Vec<f64> = pids
        .iter()
        .zip(&before)
        .map(|(&p, b)| (cpu_seconds(p) - b) / batches as f64)
        .collect();
    let rss: Vec<f64> = pids.iter().map(|&p| rss_mib(p)).collect();
    stop(&mut children);
    let log = std::fs::read_to_string(d.log()).unwrap();
    if let Ok(dir) = std::env::var("NOVAD_BENCH_LOGS") {
        let _ = std::fs::write(Path::new(&dir).join(format!("{processes}.log")), &log);
    }
    let committed = measured(&log, "timestep committed", batches);
    let steps = measured(&log, "cluster step", batches);
    let m =
        |lines: &[&str], key: &str| mean(&lines.iter().map(|l| field(l, key)).collect::<Vec<_>>());
    // the backlog's steps are the last ones logged, one per process and timestep
    let last = |what: &str, n: usize| -> Vec<&str> {
        let all: Vec<&str> = log.lines().filter(|l| l.contains(what)).collect();
        all[all.len().saturating_sub(n)..].to_vec()
    };
    let sustained_wait = (
        m(&last("cluster step", batches), "wait_seconds"),
        m(
            &last("replica step", batches * (processes - 1)),
            "wait_seconds",
        ),
    );
    let store_s = m(&committed, "store_seconds");
    println!("\n{processes} process(es), {cores} core(s) each:");
    println!(
        "batch end_to_end  step coding (own exch) update topics hybrid commit+flush  docs_KiB outputs_KiB codes_KiB"
    );
    for b in 0..batches {
        let (c, s) = (committed[b], steps[b]);
        println!(
            "{:>5} {:>10.3} {:>5.3} {:>6.3} ({:.3} {:.3}) {:>6.3} {:>6.3} {:>6.3} {:>11.3} {:>9.0} {:>11.0} {:>9.0}",
            b + 1,
            lat[b],
            field(c, "step_seconds"),
            field(c, "coding_seconds"),
            field(s, "code_seconds"),
            field(s, "exchange_seconds"),
            field(c, "update_seconds"),
            field(c, "topics_seconds"),
            field(c, "hybrid_seconds"),
            field(c, "store_seconds"),
            field(s, "docs_bytes") / 1024.0,
            field(s, "outputs_bytes") / 1024.0,
            field(s, "codes_bytes") / 1024.0,
        );
    }
    let others: Vec<f64> = cpu[1..].iter().map(|v| mean(v)).collect();
    Run {
        processes,
        end_to_end: mean(&lat),
        sustained,
        sustained_cpu,
        sustained_wait,
        leader_cpu: mean(&cpu[0]),
        replica_cpu: mean(&others),
        leader_rss: rss[0],
        replica_rss: rss[1..].to_vec(),
        step: m(&committed, "step_seconds"),
        coding: m(&committed, "coding_seconds"),
        local_code: m(&steps, "code_seconds"),
        search: m(&steps, "search_seconds"),
        search_own: m(&steps, "search_own_seconds"),
        exchange: m(&steps, "exchange_seconds"),
        docs_round: m(&steps, "docs_seconds"),
        update: m(&committed, "update_seconds"),
        topics: m(&committed, "topics_seconds"),
        hybrid: m(&committed, "hybrid_seconds"),
        commit: store_s,
        docs_bytes: m(&steps, "docs_bytes"),
        outputs_bytes: m(&steps, "outputs_bytes"),
        codes_bytes: m(&steps, "codes_bytes"),
        search_bytes: m(&steps, "search_bytes"),
        topics_bytes: m(&steps, "topics_bytes"),
    }
}

/// The ceiling of any scale-out on this machine: `pair` independent single-process daemons,
/// each pinned to its own cores and given the whole stream (the bootstrap, the batches one at
/// a time, then the backlog), so they share nothing but the machine (caches, memory
/// bandwidth). Returns the seconds per timestep of the backlog, from the first rename to the
/// last move of every daemon's files: the pair steps `pair` timesteps in that time.
fn ceiling(pair: usize, batches: usize, cores: usize, args: &[&str]) -> f64 {
    let dirs: Vec<Dirs> = (0..pair).map(|_| Dirs::new()).collect();
    let mut children: Vec<Child> = dirs
        .iter()
        .enumerate()
        .map(|(j, d)| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let hosts = d.tmp.path().join("hosts");
            std::fs::write(&hosts, format!("{}\n", l.local_addr().unwrap())).unwrap();
            spawn(d, &hosts, 0, j, cores, args)
        })
        .collect();
    let wait_all = |names: &[String], t: Instant| {
        for d in &dirs {
            for name in names {
                while !d.processed().join(name).exists() {
                    std::thread::sleep(Duration::from_millis(2));
                    assert!(t.elapsed() < Duration::from_secs(900), "timeout on {name}");
                }
            }
        }
    };
    let stream = |name: &str, body: &str| {
        for d in &dirs {
            d.drop_file(name, body.as_bytes());
        }
        wait_all(&[name.to_string()], Instant::now());
    };
    let (boot, body) = bootstrap_batch();
    stream(&boot, &body);
    for (name, body) in single_batches(batches) {
        stream(&name, &body);
    }
    let backlog = backlog_batches(batches);
    let names: Vec<String> = backlog.iter().map(|(n, _)| n.clone()).collect();
    for d in &dirs {
        stage(d, &backlog);
    }
    let t = Instant::now();
    for d in &dirs {
        release(d, &backlog);
    }
    wait_all(&names, t);
    let sustained = t.elapsed().as_secs_f64() / batches as f64;
    stop(&mut children);
    sustained
}

fn main() {
    let mut a = std::env::args().skip(1);
    let batches: usize = a.next().map_or(5, |s| s.parse().unwrap());
    let k: String = a.next().unwrap_or_else(|| "200".into());
    let detector: String = a.next().unwrap_or_else(|| "model".into());
    let cores: usize = a.next().map_or(1, |s| s.parse().unwrap());
    let args = ["--k", &k, "--detector", &detector];
    println!(
        "20NG, k = {k}, detector {detector}, 1,000-document batches ({batches} measured after a 2,000-document bootstrap)"
    );
    let runs: Vec<Run> = [1, 2]
        .iter()
        .map(|&p| run(p, batches, cores, &args))
        .collect();
    println!("\nper-timestep means:");
    println!(
        "processes end_to_end docs/s  step coding(own+exchange) docs_round update topics hybrid(search: own) commit+flush  network_KiB(docs+codes+search+topics)  all-gathered codes KiB"
    );
    for r in &runs {
        println!(
            "{:>9} {:>10.3} {:>6.0} {:>5.3} {:>6.3}({:.3}+{:.3}) {:>10.4} {:>6.3} {:>6.3} {:>6.3}({:.3}: {:.3}) {:>11.3}  {:>10.0}+{:.0}+{:.0}+{:<10.0}  {:.0}",
            r.processes,
            r.end_to_end,
            1000.0 / r.end_to_end,
            r.step,
            r.coding,
            r.local_code,
            r.exchange,
            r.docs_round,
            r.update,
            r.topics,
            r.hybrid,
            r.search,
            r.search_own,
            r.commit,
            r.docs_bytes / 1024.0,
            r.outputs_bytes / 1024.0,
            r.search_bytes / 1024.0,
            r.topics_bytes / 1024.0,
            r.codes_bytes / 1024.0,
        );
    }
    println!("\nCPU seconds per timestep (all threads; a 1-core machine's time for it):");
    for r in &runs {
        println!(
            "{} process(es): leader {:.3}s{}",
            r.processes,
            r.leader_cpu,
            if r.processes > 1 {
                format!(", each other process {:.3}s", r.replica_cpu)
            } else {
                String::new()
            }
        );
    }
    println!("\nresident memory after the last timestep (VmRSS):");
    for r in &runs {
        let others: Vec<String> = r.replica_rss.iter().map(|m| format!("{m:.0}")).collect();
        println!(
            "{} process(es): leader {:.0} MiB{}",
            r.processes,
            r.leader_rss,
            if others.is_empty() {
                String::new()
            } else {
                format!(", other processes {} MiB", others.join(", "))
            }
        );
    }
    let (r1, r2) = (&runs[0], &runs[1]);
    println!(
        "leader CPU per timestep, 1 process / 2 processes: {:.2}× (the throughput ratio on dedicated 1-core machines, network wait aside)",
        r1.leader_cpu / r2.leader_cpu
    );
    println!(
        "\nthroughput, 2 processes / 1 process: {:.2}× (end to end per timestep {:.3}s → {:.3}s)",
        r1.end_to_end / r2.end_to_end,
        r1.end_to_end,
        r2.end_to_end
    );
    println!(
        "sustained, a backlog of batch files: {:.2}× ({:.3}s → {:.3}s per timestep, {:.0} → {:.0} posts/s)",
        r1.sustained / r2.sustained,
        r1.sustained,
        r2.sustained,
        1000.0 / r1.sustained,
        1000.0 / r2.sustained
    );
    for r in &runs {
        let cpu: Vec<String> = r.sustained_cpu.iter().map(|c| format!("{c:.3}")).collect();
        println!(
            "  {} process(es): CPU seconds per timestep of the backlog {} (the leader first; busy {:.0}% of the time)",
            r.processes,
            cpu.join(", "),
            100.0 * r.sustained_cpu[0] / r.sustained
        );
        if r.processes > 1 {
            println!(
                "  {} process(es): seconds per timestep of the backlog waiting in the rounds for the others: leader {:.3}, other processes {:.3}",
                r.processes, r.sustained_wait.0, r.sustained_wait.1
            );
        }
    }
    // What two processes can reach at best on this machine: two independent daemons, one
    // per core, each with the whole stream.
    let pair = ceiling(2, batches, cores, &args);
    let best = 2.0 * r1.sustained / pair;
    println!(
        "ceiling: 2 independent single-process daemons, one per core, with the same backlog each: {pair:.3}s per timestep each, {:.0} posts/s together, {best:.2}× one process; the cluster of 2 reaches {:.0}% of it",
        2000.0 / pair,
        100.0 * (r1.sustained / r2.sustained) / best
    );
    // Cost model: T(P) = S + C / min(P, L) + X(P). C: the work shared out by logical shard
    // that one worker does alone (the coding and the hybrid detector's search, measured with 1
    // process); S: everything else of the timestep (measured with 1 process, end to end minus
    // C); X(P): the exchange, fitted on 2 processes as a fixed per-step cost plus bytes /
    // bandwidth, where a worker receives the documents and (P − 1)/P of every shard's outputs.
    let l = novad_models::l1::dictionary::LOGICAL_SHARDS as f64;
    let c = r1.local_code + r1.search;
    let s = r1.end_to_end - c;
    let bytes2 = r2.docs_bytes + r2.outputs_bytes;
    let x2 = (r2.end_to_end - s - c / 2.0).max(0.0);
    let bandwidth = 1.0e9 / 8.0 * 10.0; // a 10 Gb/s network, in bytes/s
    let volume = |p: f64| r2.docs_bytes + r1.codes_bytes * (p - 1.0) / p;
    println!(
        "\ncost model from these runs: S = {s:.3}s serial per timestep, C = {c:.3}s coding and search at one worker, exchange on 2 processes X(2) = {x2:.3}s for {:.0} KiB; extrapolated with {l} logical shards and a 10 Gb/s network:",
        bytes2 / 1024.0
    );
    println!("workers  T(P)_s  docs/s  speed-up");
    for p in [1.0f64, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0] {
        let x = if p > 1.0 {
            x2 + (volume(p) - volume(2.0)) / bandwidth
        } else {
            0.0
        };
        let t = s + c / p.min(l) + x;
        println!(
            "{:>7} {:>7.3} {:>7.0} {:>8.2}",
            p,
            t,
            1000.0 / t,
            r1.end_to_end / t
        );
    }
}
