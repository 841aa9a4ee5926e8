//! Scale-out benchmark of `novad run --cluster` on 20 Newsgroups: per-timestep time, CPU and
//! bytes exchanged for 1, 2, 4, … processes, where the time goes (coding, exchange, update,
//! commit), and a cost model fitted to the busiest process's CPU and extrapolated to 64 workers.
//!
//!     cargo build --release && cargo run --release --example bench_cluster -- [batches] [k] [detector] [cores] [processes] [runs]
//!
//! Defaults: 5 measured batches of 1,000 posts, k = 200, `--detector model` (the model's own
//! score: the coding-dominated detector; `hybrid` for the default detector), `cores` = 1,
//! `processes` = 2 (runs 1, 2, 4, … processes up to it; a list with commas, `4,` or `1,4`, runs
//! exactly those counts, and compares them with one process only when the list starts with
//! 1), `runs` = 1 (each process count is run this many times, the counts in turn — 1, 2, 4,
//! then 1, 2, 4 again — so that the machine's drift over a set does not skew their ratios; the
//! backlog figures are their means). More processes than cores share the cores: their CPU seconds from /proc stand
//! for what dedicated machines would take.
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
//! from other work), and each process's resident memory after the last timestep. CPU seconds
//! are not free of the sharing either: a process whose core and caches other processes share
//! may take more of them for the same work. So each run of P > 1 processes is followed by P
//! independent single-process daemons, pinned as the P processes are and each given the
//! whole stream: their CPU seconds per backlog timestep are one process's cost on the machine
//! shared alike, and the busiest process's CPU is also given against that. The run of 2 is
//! the ceiling of any scale-out on the machine (two daemons, one per core, sharing nothing but
//! the machine: caches, memory bandwidth); the cluster's backlog ratio is also given as a
//! share of theirs. With `NOVAD_BENCH_LOGS=DIR` the
//! daemon log of each run is kept as `DIR/P.log` for P processes (every step's figures, the
//! replicas' included; the last run's when there are several).
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

/// Whether process `pid` runs (it exists and is not a zombie).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|r| r.1.trim_start().starts_with('Z'))
        })
        == Some(false)
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
    /// Bytes every process together sent to the others per backlog timestep (`sent_bytes`).
    sustained_sent: f64,
    /// Run right after, with as many independent single-process daemons as processes
    /// ([`ceiling`], none for one process): their seconds per backlog timestep and each
    /// one's CPU seconds.
    alone: Option<(f64, f64)>,
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

impl Run {
    /// The CPU seconds per backlog timestep of its busiest process.
    fn busiest_cpu(&self) -> f64 {
        self.sustained_cpu.iter().copied().fold(0.0, f64::max)
    }
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

fn run(processes: usize, batches: usize, cores: usize, args: &[&str], verbose: bool) -> Run {
    let d = Dirs::new();
    let mut text = String::new();
    for port in free_ports(processes) {
        text.push_str(&format!("127.0.0.1:{port}\n"));
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
            assert!(
                pids.iter().all(|&p| running(p)),
                "a daemon ended before {name} was processed"
            );
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
            assert!(
                pids.iter().all(|&p| running(p)),
                "a daemon ended before {name} was processed"
            );
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
    let replica_steps = last("replica step", batches * (processes - 1));
    let sustained_wait = (
        m(&last("cluster step", batches), "wait_seconds"),
        m(&replica_steps, "wait_seconds"),
    );
    let sustained_sent = m(&last("cluster step", batches), "sent_bytes")
        + if processes > 1 {
            (processes - 1) as f64 * m(&replica_steps, "sent_bytes")
        } else {
            0.0
        };
    let store_s = m(&committed, "store_seconds");
    if verbose {
        println!("\n{processes} process(es), {cores} core(s) each:");
        println!(
            "batch end_to_end  step coding (own exch) update topics hybrid commit+flush  docs_KiB outputs_KiB codes_KiB"
        );
    }
    for b in (0..batches).filter(|_| verbose) {
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
        sustained_sent,
        alone: None,
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

/// What one process costs on this machine when it is shared as a cluster of `pair` processes
/// shares it, and the ceiling of any scale-out: `pair` independent single-process daemons,
/// pinned as the cluster's processes are (`spawn`: process j from core j × `cores` on, so
/// more processes than cores share cores) and each given the whole stream (the bootstrap, the
/// batches one at a time, then the backlog), so they share nothing but the machine (cores,
/// caches, memory bandwidth). Returns the seconds per timestep of the backlog, from the first
/// rename to the last move of every daemon's files (the daemons step `pair` timesteps in
/// that time), and the mean over the daemons of their CPU seconds per backlog timestep.
fn ceiling(pair: usize, batches: usize, cores: usize, args: &[&str]) -> (f64, f64) {
    let dirs: Vec<Dirs> = (0..pair).map(|_| Dirs::new()).collect();
    let ports = free_ports(pair);
    let mut children: Vec<Child> = dirs
        .iter()
        .enumerate()
        .map(|(j, d)| {
            let hosts = d.tmp.path().join("hosts");
            std::fs::write(&hosts, format!("127.0.0.1:{}\n", ports[j])).unwrap();
            let key = hosts.with_file_name("cluster.key");
            novad_ok(&["cluster-key", key.to_str().expect("a UTF-8 path")]);
            spawn(d, &hosts, 0, j, cores, args)
        })
        .collect();
    let pids: Vec<u32> = children.iter().map(|c| c.id()).collect();
    let wait_all = |names: &[String], t: Instant| {
        for (d, &pid) in dirs.iter().zip(&pids) {
            for name in names {
                while !d.processed().join(name).exists() {
                    std::thread::sleep(Duration::from_millis(2));
                    assert!(
                        running(pid),
                        "daemon {pid} ended before {name} was processed"
                    );
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
    let before: Vec<f64> = pids.iter().map(|&p| cpu_seconds(p)).collect();
    let t = Instant::now();
    for d in &dirs {
        release(d, &backlog);
    }
    wait_all(&names, t);
    let sustained = t.elapsed().as_secs_f64() / batches as f64;
    let cpu: Vec<f64> = pids
        .iter()
        .zip(&before)
        .map(|(&p, b)| (cpu_seconds(p) - b) / batches as f64)
        .collect();
    stop(&mut children);
    (sustained, mean(&cpu))
}

/// `n` distinct free ports on 127.0.0.1 (all bound at once, then released for the daemons,
/// so that no two daemons are given the same port).
fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// The process counts to run: for `N`, 1, 2, 4, … below N, then N; for a list with commas
/// (`4,` or `1,4`), exactly those, in order.
fn process_counts(arg: &str) -> Vec<usize> {
    let parse = |v: &str| -> usize { v.trim().parse().expect("a number of processes") };
    if arg.contains(',') {
        let list: Vec<usize> = arg
            .split(',')
            .filter(|v| !v.trim().is_empty())
            .map(parse)
            .collect();
        assert!(list.iter().all(|&p| p > 0), "at least one process");
        return list;
    }
    let max = parse(arg).max(1);
    let mut counts: Vec<usize> = std::iter::successors(Some(1usize), |p| Some(p * 2))
        .take_while(|&p| p < max)
        .collect();
    counts.push(max);
    counts.dedup();
    counts
}

/// The least-squares fit of y = s + w / p over the points (p, y): (s, w).
fn fit_serial(points: &[(f64, f64)]) -> (f64, f64) {
    let n = points.len() as f64;
    let (mx, my) = (
        points.iter().map(|p| 1.0 / p.0).sum::<f64>() / n,
        points.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxx: f64 = points.iter().map(|p| (1.0 / p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (1.0 / p.0 - mx) * (p.1 - my)).sum();
    let w = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (my - w * mx, w)
}

/// The backlog figures of several runs of one process count, averaged.
struct Backlog {
    processes: usize,
    seconds: Vec<f64>,
    busiest_cpu: f64,
    leader_cpu: f64,
    leader_wait: f64,
    sent: f64,
    /// One process's CPU seconds per backlog timestep on the machine shared as these
    /// processes share it, and the seconds per timestep of as many independent daemons
    /// ([`Run::alone`]; NaN for one process).
    alone_cpu: f64,
    alone_seconds: f64,
}

impl Backlog {
    fn of(runs: &[Run]) -> Backlog {
        let each = |f: &dyn Fn(&Run) -> f64| mean(&runs.iter().map(f).collect::<Vec<_>>());
        Backlog {
            processes: runs[0].processes,
            seconds: runs.iter().map(|r| r.sustained).collect(),
            busiest_cpu: each(&Run::busiest_cpu),
            leader_cpu: each(&|r| r.sustained_cpu[0]),
            leader_wait: each(&|r| r.sustained_wait.0),
            sent: each(&|r| r.sustained_sent),
            alone_cpu: each(&|r| r.alone.map_or(f64::NAN, |a| a.1)),
            alone_seconds: each(&|r| r.alone.map_or(f64::NAN, |a| a.0)),
        }
    }
    fn mean_seconds(&self) -> f64 {
        mean(&self.seconds)
    }
}

fn main() {
    let mut a = std::env::args().skip(1);
    let batches: usize = a.next().map_or(5, |s| s.parse().unwrap());
    let k: String = a.next().unwrap_or_else(|| "200".into());
    let detector: String = a.next().unwrap_or_else(|| "model".into());
    let cores: usize = a.next().map_or(1, |s| s.parse().unwrap());
    let counts = process_counts(&a.next().unwrap_or_else(|| "2".into()));
    let repeats: usize = a.next().map_or(1, |s| s.parse::<usize>().unwrap().max(1));
    let args = ["--k", &k, "--detector", &detector];
    println!(
        "20NG, k = {k}, detector {detector}, 1,000-document batches ({batches} measured after a 2,000-document bootstrap), {repeats} run(s) per process count"
    );
    // round by round (1, 2, 4, then 1, 2, 4 again, …): the machine's speed drifts over a set,
    // and a ratio of runs taken in the same minutes is not skewed by it
    let mut all: Vec<Vec<Run>> = vec![Vec::new(); counts.len()];
    for i in 0..repeats {
        for (c, &p) in counts.iter().enumerate() {
            let mut r = run(p, batches, cores, &args, i == 0);
            r.alone = (p > 1).then(|| ceiling(p, batches, cores, &args));
            all[c].push(r);
        }
    }
    let runs: Vec<&Run> = all.iter().map(|r| &r[0]).collect();
    println!("\nper-timestep means (the first run of each process count):");
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
    println!("\nCPU seconds per timestep of the batches dropped one at a time (all threads):");
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
    for r in &runs {
        let cpu: Vec<String> = r.sustained_cpu.iter().map(|c| format!("{c:.3}")).collect();
        println!(
            "{} process(es), backlog: CPU seconds per timestep {} (the leader first); waiting in the rounds: leader {:.3}s, other processes {:.3}s",
            r.processes,
            cpu.join(", "),
            r.sustained_wait.0,
            r.sustained_wait.1
        );
    }
    let backlogs: Vec<Backlog> = all.iter().map(|r| Backlog::of(r)).collect();
    let one = &backlogs[0];
    if one.processes != 1 {
        // no one-process run to compare with: each count's own figures only
        for b in &backlogs {
            let cpu: Vec<String> = all
                .iter()
                .flatten()
                .filter(|r| r.processes == b.processes)
                .map(|r| format!("{:.3}", r.busiest_cpu()))
                .collect();
            println!(
                "{} processes, backlog: {:.3} s per timestep, busiest process CPU per timestep {:.3} s (runs: {}); one process on the machine shared alike: {:.3} CPU s per timestep",
                b.processes,
                b.mean_seconds(),
                b.busiest_cpu,
                cpu.join(" "),
                b.alone_cpu
            );
        }
        return;
    }
    println!(
        "\nbacklog of batch files ({repeats} run(s) each; seconds per timestep of every run):"
    );
    println!("processes  s/timestep  throughput  busiest_CPU_s  CPU_ratio  leader_CPU_s  leader_wait_s  sent_KiB/timestep  runs");
    for b in &backlogs {
        let each: Vec<String> = b.seconds.iter().map(|s| format!("{s:.3}")).collect();
        println!(
            "{:>9} {:>11.3} {:>10.2}× {:>13.3} {:>9.2}× {:>13.3} {:>14.3} {:>18.0}  {}",
            b.processes,
            b.mean_seconds(),
            one.mean_seconds() / b.mean_seconds(),
            b.busiest_cpu,
            one.busiest_cpu / b.busiest_cpu,
            b.leader_cpu,
            b.leader_wait,
            b.sent / 1024.0,
            each.join(" ")
        );
    }
    for b in &backlogs[1..] {
        println!(
            "busiest process CPU per timestep, 1 process / {} processes: {:.2}×",
            b.processes,
            one.busiest_cpu / b.busiest_cpu
        );
        println!(
            "sustained throughput, {} processes / 1 process: {:.2}× (mean of {repeats} run(s))",
            b.processes,
            one.mean_seconds() / b.mean_seconds()
        );
        println!(
            "bytes exchanged per timestep, {} processes: {:.0} KiB (sent by all processes together)",
            b.processes,
            b.sent / 1024.0
        );
        println!(
            "one process on the machine shared as {p} processes share it ({p} independent daemons, pinned alike): {:.3} CPU s per timestep ({:.2}× alone); busiest process CPU per timestep against it: {:.2}×",
            b.alone_cpu,
            b.alone_cpu / one.busiest_cpu,
            b.alone_cpu / b.busiest_cpu,
            p = b.processes,
        );
    }
    // Cost model: the busiest process's CPU per timestep T(P) = S + W / P, fitted by least
    // squares to the process counts run; S is the part no added process takes off it.
    let points: Vec<(f64, f64)> = backlogs
        .iter()
        .map(|b| (b.processes as f64, b.busiest_cpu))
        .collect();
    if points.len() > 1 {
        let (serial, shared) = fit_serial(&points);
        println!(
            "\ncost model fitted to the busiest process's CPU per timestep, T(P) = S + W/P: S = {serial:.3}s serial ({:.0}% of the one-process {:.3}s), W = {shared:.3}s shared out; extrapolated (network time aside):",
            100.0 * serial / one.busiest_cpu,
            one.busiest_cpu
        );
        println!("workers  T(P)_s  speed-up");
        for p in [1.0f64, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0] {
            let t = serial + shared / p;
            println!("{:>7} {:>7.3} {:>8.2}", p, t, one.busiest_cpu / t);
        }
    }
    // What two processes can reach at best on this machine: two independent daemons, one
    // per core, each with the whole stream (run after each run of the cluster of two).
    if let Some(two) = backlogs.iter().find(|b| b.processes == 2) {
        let pair = two.alone_seconds;
        let best = 2.0 * one.mean_seconds() / pair;
        println!(
            "ceiling: 2 independent single-process daemons, one per core, with the same backlog each: {pair:.3}s per timestep each, {:.0} posts/s together, {best:.2}× one process; the cluster of 2 reaches {:.0}% of it",
            2000.0 / pair,
            100.0 * (one.mean_seconds() / two.mean_seconds()) / best
        );
    }
}
