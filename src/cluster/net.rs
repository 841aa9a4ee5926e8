//! The connections between the processes of a cluster and the one collective the step needs:
//! an all-gather over timely-dataflow, one epoch per round.
//!
//! Connections are made here rather than by timely's own start-up (which retries forever,
//! prints to stdout and trusts whoever connects): process i connects to every process j < i
//! and accepts every j > i, each with a deadline, and each connection starts with the
//! handshake of [`super::auth`], in which both ends prove they hold the cluster key and state
//! their index and the cluster's shape. A process that cannot reach a peer fails with an error
//! naming the address; a connection that fails the handshake is dropped with a warning naming
//! it, and the process goes on waiting for the real peer. The connected sockets are then
//! handed to timely.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use timely::communication::allocator::zero_copy::initialize::{
    initialize_networking_from_sockets, CommsGuard,
};
use timely::communication::allocator::{AllocatorBuilder, ProcessBuilder};
use timely::communication::Hooks;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::operators::vec::Broadcast;
use timely::dataflow::operators::{Input, Inspect, Probe};
use timely::dataflow::{InputHandle, ProbeHandle};
use timely::worker::Worker;

use super::auth::{self, HandshakeError, Shape};
use super::{ClusterConfig, ClusterError};

/// Longest a connection may take over each read or write of its handshake: a peer that says
/// nothing for this long is dropped (and a dialled one tried again).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Most handshakes the listener runs at once; a connection beyond them is dropped at once.
const MAX_HANDSHAKES: usize = 64;

/// What the listening thread reports.
enum Joined {
    /// A peer proved the key and was accepted as this process.
    Peer(usize, TcpStream),
    /// A connection failed its handshake and was dropped.
    Failed(SocketAddr, HandshakeError),
    /// Listening failed.
    Listen(std::io::Error),
}

/// This process's place in the cluster, as the handshake states it.
fn shape(cfg: &ClusterConfig) -> Shape {
    Shape {
        process: cfg.process,
        processes: cfg.hosts.len(),
        workers: cfg.workers,
    }
}

/// The read and write timeout of a handshake.
fn handshake_timeout(cfg: &ClusterConfig) -> Duration {
    HANDSHAKE_TIMEOUT.min(cfg.connect_timeout.max(Duration::from_millis(100)))
}

/// Set `s`'s handshake timeouts (`Some`) or clear them for timely (`None`).
fn timeouts(s: &TcpStream, t: Option<Duration>) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(t)?;
    s.set_write_timeout(t)?;
    s.set_nodelay(true)
}

/// Connect to every other process of the cluster, within `cfg.connect_timeout`: dial every
/// process with a lower index and take a connection from every process with a higher one.
///
/// A socket is returned only once both ends proved they hold the cluster key
/// ([`auth`]). A connection that fails its handshake — a stranger, garbage, a different
/// key, silence past the handshake timeout, an early close — is dropped with a warning
/// naming its address and why, and this process goes on listening for, or dialling, the
/// real peer until the deadline. Only a peer that proved the key but is set up differently
/// (another cluster shape, a process index taken twice) stops the start at once. Incoming
/// handshakes run on threads of their own, so a silent connection holds up no other.
pub fn connect(cfg: &ClusterConfig) -> Result<Vec<Option<TcpStream>>, ClusterError> {
    let me = cfg.process;
    let deadline = Instant::now() + cfg.connect_timeout;
    let listen_err = |e| ClusterError::Listen {
        addr: cfg.hosts[me].clone(),
        source: e,
    };
    let listener = TcpListener::bind(&cfg.hosts[me]).map_err(listen_err)?;
    listener.set_nonblocking(true).map_err(listen_err)?;
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let listening = {
        let (cfg, stop) = (cfg.clone(), Arc::clone(&stop));
        std::thread::Builder::new()
            .name("novad:cluster-listen".into())
            .spawn(move || listen(listener, &cfg, &stop, &tx))
            .map_err(listen_err)?
    };
    let r = join(cfg, deadline, &rx);
    stop.store(true, Ordering::SeqCst);
    let _ = listening.join();
    r
}

/// Dial the lower processes, then collect the higher ones from the listening thread.
fn join(
    cfg: &ClusterConfig,
    deadline: Instant,
    rx: &mpsc::Receiver<Joined>,
) -> Result<Vec<Option<TcpStream>>, ClusterError> {
    let me = cfg.process;
    let mut sockets: Vec<Option<TcpStream>> = (0..cfg.hosts.len()).map(|_| None).collect();
    for (j, addr) in cfg.hosts.iter().enumerate().take(me) {
        sockets[j] = Some(dial(cfg, j, addr, deadline)?);
    }
    while sockets
        .iter()
        .enumerate()
        .any(|(j, s)| j > me && s.is_none())
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Joined::Peer(j, s)) => sockets[j] = Some(s),
            Ok(Joined::Failed(peer, e)) if e.is_fatal() => {
                return Err(ClusterError::Handshake {
                    addr: peer.to_string(),
                    why: e.to_string(),
                })
            }
            Ok(Joined::Failed(peer, e)) => tracing::warn!(
                "dropped a connection from {peer} to the cluster port {}: {e}",
                cfg.hosts[me]
            ),
            Ok(Joined::Listen(e)) => {
                return Err(ClusterError::Listen {
                    addr: cfg.hosts[me].clone(),
                    source: e,
                })
            }
            Err(_) => {
                let missing: Vec<String> = sockets
                    .iter()
                    .enumerate()
                    .filter(|&(j, s)| j > me && s.is_none())
                    .map(|(j, _)| format!("process {j} at {}", cfg.hosts[j]))
                    .collect();
                return Err(ClusterError::NotJoined {
                    listen: cfg.hosts[me].clone(),
                    secs: cfg.connect_timeout.as_secs(),
                    missing: missing.join(", "),
                });
            }
        }
    }
    Ok(sockets)
}

/// Dial process `j` at `addr` until it answers and passes the handshake, or the deadline.
fn dial(
    cfg: &ClusterConfig,
    j: usize,
    addr: &str,
    deadline: Instant,
) -> Result<TcpStream, ClusterError> {
    loop {
        let last = match TcpStream::connect(addr) {
            Ok(mut s) => {
                let r = timeouts(&s, Some(handshake_timeout(cfg)))
                    .map_err(|e| HandshakeError::Io {
                        stage: "connecting",
                        why: e.to_string(),
                    })
                    .and_then(|()| auth::initiate(&mut s, &cfg.key, shape(cfg), j))
                    .and_then(|()| {
                        timeouts(&s, None).map_err(|e| HandshakeError::Io {
                            stage: "connecting",
                            why: e.to_string(),
                        })
                    });
                match r {
                    Ok(()) => return Ok(s),
                    Err(e) if e.is_fatal() => {
                        return Err(ClusterError::Handshake {
                            addr: addr.to_string(),
                            why: e.to_string(),
                        })
                    }
                    Err(e) => {
                        tracing::warn!(
                            "dropped the connection to process {j} at {addr}: the peer there {e}; \
                             trying again"
                        );
                        format!("the peer there {e}")
                    }
                }
            }
            Err(e) => e.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(ClusterError::Unreachable {
                process: j,
                addr: addr.to_string(),
                secs: cfg.connect_timeout.as_secs(),
                last,
            });
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Take connections at `listener` until `stop`: each runs its handshake on a thread of its
/// own (at most [`MAX_HANDSHAKES`] at once) and reports to `tx`. A process index is
/// accepted once; the peer is told so only after it is claimed here.
fn listen(
    listener: TcpListener,
    cfg: &ClusterConfig,
    stop: &AtomicBool,
    tx: &mpsc::Sender<Joined>,
) {
    let claimed = Arc::new(Mutex::new(vec![false; cfg.hosts.len()]));
    let running = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((s, peer)) => {
                if running.load(Ordering::SeqCst) >= MAX_HANDSHAKES {
                    let e = HandshakeError::Io {
                        stage: "connecting",
                        why: format!("{MAX_HANDSHAKES} handshakes are under way already"),
                    };
                    let _ = tx.send(Joined::Failed(peer, e));
                    continue;
                }
                running.fetch_add(1, Ordering::SeqCst);
                let (cfg, tx) = (cfg.clone(), tx.clone());
                let (claimed, counter) = (Arc::clone(&claimed), Arc::clone(&running));
                let spawned = std::thread::Builder::new()
                    .name("novad:cluster-handshake".into())
                    .spawn(move || {
                        let r = take(s, &cfg, &claimed);
                        counter.fetch_sub(1, Ordering::SeqCst);
                        let _ = tx.send(match r {
                            Ok((j, s)) => Joined::Peer(j, s),
                            Err(e) => Joined::Failed(peer, e),
                        });
                    });
                if spawned.is_err() {
                    // the connection went with the closure; it is dropped
                    running.fetch_sub(1, Ordering::SeqCst);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => {}
            Err(e) => {
                let _ = tx.send(Joined::Listen(e));
                return;
            }
        }
    }
}

/// The listening side of one connection: its handshake, then its claim on the process index
/// it proved (a second claim is a misconfiguration), then the word that it is accepted.
fn take(
    mut s: TcpStream,
    cfg: &ClusterConfig,
    claimed: &Mutex<Vec<bool>>,
) -> Result<(usize, TcpStream), HandshakeError> {
    let setup = |e: std::io::Error| HandshakeError::Io {
        stage: "connecting",
        why: e.to_string(),
    };
    timeouts(&s, Some(handshake_timeout(cfg))).map_err(setup)?;
    let j = auth::answer(&mut s, &cfg.key, shape(cfg))?;
    {
        let mut claimed = claimed.lock().unwrap_or_else(|p| p.into_inner());
        if claimed[j] {
            return Err(HandshakeError::Misconfigured(format!(
                "a second process {j} (a process of this cluster is connected as {j} already)"
            )));
        }
        claimed[j] = true;
    }
    auth::accept(&mut s)?;
    timeouts(&s, None).map_err(setup)?;
    Ok((j, s))
}

/// Timely's allocators over the connected sockets (`workers` threads in this process).
pub fn allocators(
    sockets: Vec<Option<TcpStream>>,
    process: usize,
    workers: usize,
) -> Result<(Vec<AllocatorBuilder>, CommsGuard), ClusterError> {
    let hooks = Hooks::default();
    let local = ProcessBuilder::new_typed_vector(workers, hooks.refill.clone(), None);
    let (tcp, guard) = initialize_networking_from_sockets(local, sockets, process, workers, hooks)
        .map_err(|e| ClusterError::Handshake {
            addr: "the connected peers".into(),
            why: e.to_string(),
        })?;
    Ok((tcp.into_iter().map(AllocatorBuilder::Tcp).collect(), guard))
}

/// A payload as it crosses timely's channels: serialised as one run of bytes (a plain
/// `Vec<u8>` would be sized, written and read by bincode one element at a time).
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Payload(#[serde(with = "serde_bytes")] Vec<u8>);

/// One record: (round, sending worker, a notice rather than the round's payload, payload).
type Record = (u64, u32, bool, Payload);

/// Payloads received, by round: (sending worker, payload).
type Received = Rc<RefCell<BTreeMap<u64, Vec<(u32, Vec<u8>)>>>>;

/// Notices received from other workers, in arrival order: (sending worker, notice).
type Notices = Rc<RefCell<Vec<(u32, Vec<u8>)>>>;

/// An all-gather: in each round every worker contributes one payload and receives every
/// worker's payload of that round. Round r is timely epoch r; it is complete on a worker
/// once every worker's payload of it has arrived there (each worker sends exactly one), or
/// when the probe passes r + 1, whichever comes first: a worker that sent its payload and
/// computes on without stepping does not hold the round up with its late progress.
///
/// Besides the payloads, a worker may send notices ([`Self::notify`]) at any time: they reach
/// every other worker in the order sent, are no part of any round, and are taken by
/// [`Self::notices`] whenever the receiver looks.
pub struct Gather {
    worker: Worker,
    input: InputHandle<u64, CapacityContainerBuilder<Vec<Record>>>,
    probe: ProbeHandle<u64>,
    got: Received,
    heard: Notices,
    /// The next round to finish.
    round: u64,
    /// The next round to contribute to (rounds `round..sent` are open).
    sent: u64,
    /// Workers in this process.
    local: usize,
    /// Payload bytes this worker sent to other processes' workers, over all rounds.
    pub bytes_sent: u64,
    /// Payload bytes this worker received from other processes' workers, over all rounds.
    pub bytes_received: u64,
    /// Seconds this worker spent in [`Self::finish`] waiting for other workers' payloads,
    /// over all rounds.
    pub waited: f64,
}

impl Gather {
    /// Build the gather's dataflow on `worker` (every worker of the cluster must, in the same
    /// order); `local` workers run in this process.
    pub fn new(worker: &mut Worker, local: usize) -> Gather {
        let mut input = InputHandle::new();
        let probe = ProbeHandle::new();
        let got: Received = Rc::default();
        let heard: Notices = Rc::default();
        let (sink, ears) = (Rc::clone(&got), Rc::clone(&heard));
        let me = worker.index() as u32;
        worker.dataflow::<u64, _, _>(|scope| {
            scope
                .input_from(&mut input)
                .broadcast()
                .inspect(move |(round, from, notice, bytes): &Record| {
                    if !notice {
                        sink.borrow_mut()
                            .entry(*round)
                            .or_default()
                            .push((*from, bytes.0.clone()));
                    } else if *from != me {
                        ears.borrow_mut().push((*from, bytes.0.clone()));
                    }
                })
                .probe_with(&probe);
        });
        Gather {
            worker: worker.clone(),
            input,
            probe,
            got,
            heard,
            round: 0,
            sent: 0,
            local,
            bytes_sent: 0,
            bytes_received: 0,
            waited: 0.0,
        }
    }

    /// This worker's index among all workers of the cluster (0 leads).
    pub fn index(&self) -> usize {
        self.worker.index()
    }

    /// All workers of the cluster.
    pub fn peers(&self) -> usize {
        self.worker.peers()
    }

    /// Payload bytes sent and received over the network so far.
    pub fn traffic(&self) -> u64 {
        self.bytes_sent + self.bytes_received
    }

    /// Contribute `mine` to the next round and wait for it to complete: every worker's
    /// payload, by worker index. Rounds still open are finished first (their payloads
    /// dropped).
    pub fn round(&mut self, mine: Vec<u8>) -> Vec<Vec<u8>> {
        while self.open() > 0 {
            self.finish();
        }
        self.begin(mine);
        self.finish()
    }

    /// Contribute `mine` to the next round not yet contributed to, and send it on its way
    /// without waiting: the caller works on, then collects the round with [`Self::finish`].
    /// Several rounds may be open; they finish in order.
    ///
    /// A round completes on a worker once every worker's payload has arrived, so a worker
    /// that knows its next contribution early (a replica, whose next one after a step is
    /// always [`super::protocol::Reply::Idle`]) begins that round early, so that the
    /// leader's next command reaches it at once.
    pub fn begin(&mut self, mine: Vec<u8>) {
        self.bytes_sent += (mine.len() * (self.peers() - self.local)) as u64;
        self.input
            .send((self.sent, self.index() as u32, false, Payload(mine)));
        self.sent += 1;
        self.input.advance_to(self.sent);
        self.push();
    }

    /// A few steps, which move what was sent through the dataflow's operators to the network
    /// threads (the caller may not step the worker for a while).
    fn push(&mut self) {
        for _ in 0..4 {
            self.worker.step();
        }
    }

    /// Send `notice` to every other worker now, outside the rounds. One step hands it to the
    /// dataflow; the next step of this worker (any call here) takes it on to the network.
    pub fn notify(&mut self, notice: Vec<u8>) {
        self.bytes_sent += (notice.len() * (self.peers() - self.local)) as u64;
        self.input
            .send((self.sent, self.index() as u32, true, Payload(notice)));
        self.input.flush();
        self.worker.step();
    }

    /// The notices received from other workers since the last call (taking in what has
    /// arrived, without waiting), in the order each worker sent them.
    pub fn notices(&mut self) -> Vec<(u32, Vec<u8>)> {
        self.worker.step();
        let heard = std::mem::take(&mut *self.heard.borrow_mut());
        self.count_received(&heard);
        heard
    }

    /// True when the oldest open round is complete here (taking in what has arrived, without
    /// waiting): [`Self::finish`] then returns at once.
    pub fn ready(&mut self) -> bool {
        self.worker.step();
        self.open() > 0 && self.complete()
    }

    /// The oldest open round is complete here: every worker's payload is in, or the probe
    /// passed it.
    fn complete(&self) -> bool {
        // every worker sends one payload per round: once all are in, the round is complete
        // here, whether or not the senders' progress has arrived (a worker that computes
        // without stepping sends its progress late)
        !self.probe.less_than(&(self.round + 1))
            || self
                .got
                .borrow()
                .get(&self.round)
                .is_some_and(|g| g.len() == self.peers())
    }

    /// The next round this worker contributes to (rounds are numbered from 0, alike on every
    /// worker).
    pub fn next_round(&self) -> u64 {
        self.sent
    }

    /// Rounds begun and not yet finished.
    pub fn open(&self) -> u64 {
        self.sent - self.round
    }

    /// Wait for the oldest open round to complete: every worker's payload, by worker index
    /// (empty when no round is open).
    pub fn finish(&mut self) -> Vec<Vec<u8>> {
        if self.open() == 0 {
            return Vec::new();
        }
        let t0 = Instant::now();
        while !self.complete() {
            // parks until a message or progress arrives: an idle replica uses no CPU
            self.worker.step_or_park(None);
        }
        self.waited += t0.elapsed().as_secs_f64();
        let mut got = self
            .got
            .borrow_mut()
            .remove(&self.round)
            .unwrap_or_default();
        self.round += 1;
        got.sort_by_key(|g| g.0);
        self.count_received(&got);
        got.into_iter().map(|g| g.1).collect()
    }

    /// Count the bytes of `got` (sending worker, bytes) that came from other processes.
    fn count_received(&mut self, got: &[(u32, Vec<u8>)]) {
        let me = self.index() / self.local;
        self.bytes_received += got
            .iter()
            .filter(|g| g.0 as usize / self.local != me)
            .map(|g| g.1.len() as u64)
            .sum::<u64>();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_begun_ahead_finish_in_order_with_every_workers_payload() {
        // two workers in one process, each begins two rounds before finishing either
        let guards = timely::execute(timely::Config::process(2), |worker| {
            let mut g = Gather::new(worker, 2);
            let me = g.index() as u8;
            g.begin(vec![me, 1]);
            g.begin(vec![me, 2]);
            assert_eq!(g.open(), 2);
            let first = g.finish();
            let second = g.finish();
            assert_eq!(g.open(), 0);
            let none = g.finish();
            // a round still open when the next one is taken whole is finished and dropped
            g.begin(vec![me, 3]);
            let fourth = g.round(vec![me, 4]);
            (first, second, none, fourth)
        })
        .unwrap();
        for r in guards.join() {
            let (first, second, none, fourth) = r.unwrap();
            assert_eq!(first, vec![vec![0, 1], vec![1, 1]]);
            assert_eq!(second, vec![vec![0, 2], vec![1, 2]]);
            assert!(none.is_empty());
            assert_eq!(fourth, vec![vec![0, 4], vec![1, 4]]);
        }
    }

    /// Notices reach every other worker in the order sent, not the sender, and are no part
    /// of any round.
    #[test]
    fn notices_reach_the_other_workers_in_order_outside_the_rounds() {
        let guards = timely::execute(timely::Config::process(2), |worker| {
            let mut g = Gather::new(worker, 2);
            let me = g.index() as u8;
            if me == 0 {
                for n in 1..=3u8 {
                    g.notify(vec![n]);
                }
            }
            let round = g.round(vec![me]);
            let mut heard = Vec::new();
            let t0 = Instant::now();
            while heard.len() < 3 && t0.elapsed() < Duration::from_secs(10) {
                heard.extend(g.notices());
                if me == 0 {
                    break;
                }
            }
            (round, heard)
        })
        .unwrap();
        let r: Vec<_> = guards.join().into_iter().map(Result::unwrap).collect();
        assert_eq!(r[0].0, vec![vec![0], vec![1]]);
        assert_eq!(r[1].0, vec![vec![0], vec![1]]);
        assert!(r[0].1.is_empty(), "the sender heard itself: {:?}", r[0].1);
        assert_eq!(r[1].1, vec![(0, vec![1]), (0, vec![2]), (0, vec![3])]);
    }

    /// The time a worker spends waiting for the others' payloads is counted: a worker whose
    /// peer contributes 0.3 s late waits at least most of that, the late one hardly at all.
    #[test]
    fn the_wait_for_a_late_payload_is_counted() {
        let guards = timely::execute(timely::Config::process(2), |worker| {
            let mut g = Gather::new(worker, 2);
            if g.index() == 1 {
                std::thread::sleep(Duration::from_millis(300));
            }
            g.round(vec![g.index() as u8]);
            g.waited
        })
        .unwrap();
        let waited: Vec<f64> = guards.join().into_iter().map(Result::unwrap).collect();
        assert!(waited[0] >= 0.15, "the early worker waited {} s", waited[0]);
        assert!(
            waited[1] < waited[0],
            "the late worker waited {} s",
            waited[1]
        );
    }

    /// A round is complete on a worker once every worker's payload is in, although a worker
    /// that contributed goes on without stepping (so without taking in the others' payloads,
    /// which its progress would count): two processes over TCP on 127.0.0.1; process 0 begins
    /// a large round and a small one, then does not step again until process 1, which joins
    /// them only then, has both.
    #[test]
    fn a_round_completes_once_every_payload_is_in() {
        let hosts: Vec<String> = (0..2)
            .map(|_| {
                let l = TcpListener::bind("127.0.0.1:0").unwrap();
                l.local_addr().unwrap().to_string()
            })
            .collect();
        // process 0 → 1: "I am busy"; process 1 → 0: "I have the rounds"
        let (busy_tx, busy_rx) = std::sync::mpsc::channel::<()>();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        use std::sync::Mutex;
        let chans = std::sync::Arc::new((
            Mutex::new(busy_tx),
            Mutex::new(busy_rx),
            Mutex::new(done_tx),
            Mutex::new(done_rx),
        ));
        let procs: Vec<_> = (0..2)
            .map(|process| {
                let cfg = ClusterConfig {
                    hostfile: "hosts".into(),
                    hosts: hosts.clone(),
                    process,
                    workers: 1,
                    connect_timeout: Duration::from_secs(30),
                    key: auth::ClusterKey::from_secret(b"the key of this test's cluster.."),
                };
                let chans = std::sync::Arc::clone(&chans);
                std::thread::spawn(move || {
                    let sockets = connect(&cfg).unwrap();
                    let (builders, guard) = allocators(sockets, process, 1).unwrap();
                    let guards = timely::execute::execute_from(
                        builders,
                        Box::new(guard),
                        timely::WorkerConfig::default(),
                        move |worker| {
                            let mut g = Gather::new(worker, 1);
                            let wait = |rx: &std::sync::mpsc::Receiver<()>| {
                                rx.recv_timeout(Duration::from_secs(20)).is_ok()
                            };
                            if process == 0 {
                                g.begin(vec![0; 1 << 20]);
                                g.begin(vec![0, 7]);
                                chans.0.lock().unwrap().send(()).unwrap();
                                let heard = wait(&chans.3.lock().unwrap());
                                assert!(heard, "process 1 waited for process 0's steps");
                            } else {
                                assert!(wait(&chans.1.lock().unwrap()));
                                g.begin(vec![1; 1 << 20]);
                                g.begin(vec![1, 7]);
                            }
                            let large = g.finish();
                            let small = g.finish();
                            if process == 1 {
                                chans.2.lock().unwrap().send(()).unwrap();
                            }
                            assert!(large.iter().map(Vec::len).eq([1 << 20; 2]));
                            small
                        },
                    )
                    .unwrap();
                    guards
                        .join()
                        .into_iter()
                        .map(Result::unwrap)
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for p in procs {
            assert_eq!(p.join().unwrap(), vec![vec![vec![0, 7], vec![1, 7]]]);
        }
    }
}
