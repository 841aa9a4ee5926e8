//! Scale-out of the ℓ1 model across processes (`novad run --cluster HOSTFILE --process I
//! --cluster-key FILE`).
//!
//! Process 0 leads: it runs the daemon (inbox, store, commits) exactly as `novad run` does,
//! except that every step is shared with the other workers of the cluster. Every worker holds
//! a replica of the model (and of the hybrid detector's whole memory); a step sends the batch
//! to all of them, the documents are tokenised and resolved against the vocabulary by logical
//! shard, the terms are all-gathered and every worker updates its vocabulary with them in
//! batch order; each worker codes a hand of the logical shards (dealt by predicted cost,
//! evened out by work stealing, `pool.rs`), the codes are all-gathered, and every worker
//! finishes the step the same way ([`novad_models::l1::replicate`]). The hybrid detector's
//! search is shared too: each worker searches the whole memory for the documents of its
//! hand of the shards, the results are all-gathered, the leader fuses the scores and decides,
//! and every replica takes the batch into its memory as the leader does (once its step is
//! over). The dictionary update is shared by Â's rows: each worker computes the gradient
//! rows of its hand of the row shards, the projection's column thresholds come from rounds of
//! exact column sums, and the projected rows are all-gathered (`protocol.rs`). The plan of
//! the step's atom refresh is worked out by the last worker (the finder) before its rows, its
//! emerging topics after the update. A document's resolved terms, its code and
//! its nearest remembered document depend only on the document and the replicated state, and
//! the rest of the step is a deterministic function of all of them, so the committed model,
//! the topics and every verdict are bit-identical to a single-node run, whatever the number
//! of processes. Â and the memory are shipped whole only when a replica must be (re)loaded:
//! at the first step, and after a step the leader did not commit.
//!
//! The leader commits in the background ([`crate::ingest::Ingestor::defer`]) and reads
//! ahead: while the replicas tokenise a timestep's batch, the
//! leader writes the last timestep's records, hands its transaction to the store's committer
//! thread, which applies and flushes it while the leader waits for its peers, and, with a
//! backlog, reads and validates the next file ([`crate::ingest::Replicas::step`]). That
//! file's batch goes out with the step's dictionary update, so that the replicas tokenise it
//! while the leader finishes the step; the leader's part of that batch's terms round then
//! goes out empty before its other work, so the replicas tokenise all of it and go on to the
//! coding, taking the leader's hand there too until it joins. Where the work is dealt out
//! without stealing (the search's documents, the update's rows), the leader's hand, and the
//! finder's of the rows, are lighter by what their other work is worth. A batch sent ahead that the daemon does not step next
//! (the file is a duplicate, or changed) is abandoned: the leader's next round is an abort,
//! which ends that step on every replica. A batch file is moved to `processed/` only once
//! its last timestep is durable.
//!
//! Every connection between two processes starts with a mutual proof that both hold the
//! cluster's key ([`auth`], `--cluster-key FILE`); a stranger is dropped and named before it
//! is sent anything, and timely only ever gets sockets whose peer proved the key.
//!
//! Communication is timely-dataflow over TCP ([`net`]): one all-gather round per exchange,
//! one timely epoch per round, complete on a worker as soon as every worker's payload has
//! arrived; a round can be begun before its result is needed, so the batch travels while the
//! leader writes the last timestep, the topics and refresh plan while the leader updates, and
//! the update and the next batch while the leader goes on. When any process dies, its peers
//! lose their connection and stop (exit status 3); the leader's store holds the last durable
//! timestep, from which a restarted cluster resumes. dnmf and ostc run on one node only.

pub mod auth;
mod balance;
mod deal;
mod net;
mod pool;
mod protocol;
mod replica;
mod sides;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use thiserror::Error;

use crate::daemon::{DaemonError, RunConfig};
use novad_models::ModelKind;

/// Exit status of a process that stops because a peer of its cluster is gone.
pub const EXIT_PEER_LOST: i32 = 3;

/// Default time a process waits for its peers at start.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Where this process sits in a cluster.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// The hosts file the addresses come from.
    pub hostfile: PathBuf,
    /// `host:port` of every process, by process index.
    pub hosts: Vec<String>,
    /// This process's index (0 leads).
    pub process: usize,
    /// Worker threads in each process (every process runs the same number).
    pub workers: usize,
    /// How long to wait for the peers at start.
    pub connect_timeout: Duration,
    /// The key every process of the cluster proves it holds before it is connected.
    pub key: auth::ClusterKey,
}

#[derive(Debug, Error)]
pub enum ClusterError {
    #[error("hosts file {path}: {why}")]
    Hosts { path: String, why: String },
    #[error("cannot listen at {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "cannot reach process {process} of the cluster at {addr} (tried for {secs} s): {last}"
    )]
    Unreachable {
        process: usize,
        addr: String,
        secs: u64,
        last: String,
    },
    #[error("listening at {listen}, no word within {secs} s from {missing}")]
    NotJoined {
        listen: String,
        secs: u64,
        missing: String,
    },
    #[error("peer at {addr}: {why}")]
    Handshake { addr: String, why: String },
    #[error(
        "a cluster needs a shared key: create one with `novad cluster-key FILE`, copy it \
         (mode 0600) to every process of the cluster and start each with --cluster-key FILE"
    )]
    NoKey,
    #[error(transparent)]
    Key(#[from] auth::KeyError),
    #[error("the {0} model runs on one node only; the cluster mode is for the l1 model")]
    SingleNode(ModelKind),
    #[error("cluster protocol: {0}")]
    Protocol(String),
    #[error("the leader stopped the cluster: {0}")]
    LeaderStopped(String),
    #[error("timely: {0}")]
    Timely(String),
    #[error(transparent)]
    Daemon(#[from] DaemonError),
}

/// Read a hosts file: one `host:port` per line, process 0 first; blank lines and lines
/// starting with `#` are skipped.
pub fn read_hosts(path: &Path) -> Result<Vec<String>, ClusterError> {
    let err = |why: String| ClusterError::Hosts {
        path: path.display().to_string(),
        why,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let mut hosts = Vec::new();
    for (no, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line
            .rsplit_once(':')
            .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
        {
            return Err(err(format!("line {}: {line:?} is not host:port", no + 1)));
        }
        hosts.push(line.to_string());
    }
    if hosts.is_empty() {
        return Err(err("no address".into()));
    }
    Ok(hosts)
}

impl ClusterConfig {
    /// The configuration of process `process` from `hostfile`, with the key of the key file
    /// `key` (refused unless it is readable by its owner only and long enough:
    /// [`auth::ClusterKey::load`]; no key file at all is refused too).
    pub fn new(
        hostfile: &Path,
        process: usize,
        workers: usize,
        connect_timeout: Duration,
        key: Option<&Path>,
    ) -> Result<ClusterConfig, ClusterError> {
        let key = auth::ClusterKey::load(key.ok_or(ClusterError::NoKey)?)?;
        let hosts = read_hosts(hostfile)?;
        if process >= hosts.len() {
            return Err(ClusterError::Hosts {
                path: hostfile.display().to_string(),
                why: format!(
                    "process {process} has no line ({} processes listed)",
                    hosts.len()
                ),
            });
        }
        Ok(ClusterConfig {
            hostfile: hostfile.to_path_buf(),
            hosts,
            process,
            workers: workers.max(1),
            connect_timeout,
            key,
        })
    }
}

/// Whether a panic is timely's communication failing: a panic on one of its send or receive
/// threads (`timely:send-N`, `timely:recv-N`: a connection lost, reset, or carrying bytes
/// that are not timely's), or one of the panics that follow it on the other threads (a
/// worker finding its channel poisoned, the communication guard finding its threads gone).
fn is_lost_peer(thread: Option<&str>, msg: &str) -> bool {
    thread.is_some_and(|t| t.starts_with("timely:send-") || t.starts_with("timely:recv-"))
        || msg.starts_with("timely communication error")
        || msg.starts_with("MergeQueue poisoned")
        || msg.starts_with("MergeQueue mutex poisoned")
        || msg.starts_with("Send thread panic")
        || msg.starts_with("Recv thread panic")
}

/// A lost peer shows up as a panic of one of timely's communication threads, and then of
/// others: stop the whole process with status [`EXIT_PEER_LOST`] and one clear message
/// (the store, if this is the leader, holds the last committed timestep; nothing is
/// half-applied). The first such panic exits; a thread that panics for the same cause while
/// the process exits waits instead of unwinding, so no second panic can abort the process.
/// Any other panic goes to the previous hook.
fn stop_on_lost_peer() {
    static STOPPING: AtomicBool = AtomicBool::new(false);
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if is_lost_peer(std::thread::current().name(), msg) {
            if STOPPING.swap(true, Ordering::SeqCst) {
                loop {
                    std::thread::park();
                }
            }
            eprintln!(
                "novad: lost the connection to a process of the cluster ({msg}); stopping. \
                 Restart every process: the cluster resumes from the last committed timestep."
            );
            std::process::exit(EXIT_PEER_LOST);
        }
        default(info)
    }));
}

/// Run this process of the cluster until the leader stops (signal) or a peer is lost.
pub fn run(cfg: &RunConfig, cluster: &ClusterConfig) -> Result<(), ClusterError> {
    if let Some(p) = &cfg.params {
        if p.kind() != ModelKind::L1 && cluster.process == 0 {
            return Err(ClusterError::SingleNode(p.kind()));
        }
    }
    tracing::info!(
        process = cluster.process,
        processes = cluster.hosts.len(),
        listen = %cluster.hosts[cluster.process],
        hosts = %cluster.hostfile.display(),
        "joining the cluster"
    );
    let sockets = net::connect(cluster)?;
    tracing::info!(process = cluster.process, "every peer connected");
    stop_on_lost_peer();
    let (builders, guard) = net::allocators(sockets, cluster.process, cluster.workers)?;
    let cfg = cfg.clone();
    let local = cluster.workers;
    let guards = timely::execute::execute_from(
        builders,
        Box::new(guard),
        timely::WorkerConfig::default(),
        move |worker| -> Result<(), ClusterError> {
            let _pool = crate::daemon::stepping_pool(local)?;
            let gather = net::Gather::new(worker, local);
            if gather.index() == 0 {
                let leader = Rc::new(RefCell::new(sides::Leader::new(gather)));
                let r = crate::daemon::run_replicated(&cfg, Box::new(Rc::clone(&leader)));
                // the replicas stop when the leader is dropped, told why
                leader.borrow_mut().stop_reason = r.as_ref().err().map(|e| e.to_string());
                drop(leader);
                Ok(r?)
            } else {
                replica::replica(gather)
            }
        },
    )
    .map_err(ClusterError::Timely)?;
    for r in guards.join() {
        r.map_err(ClusterError::Timely)??;
    }
    Ok(())
}
