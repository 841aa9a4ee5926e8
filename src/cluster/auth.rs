//! Proof of membership between the processes of a cluster: a shared key file and a mutual
//! challenge–response over each new connection, before anything else crosses it.
//!
//! Every process of a cluster is started with the same key file (`--cluster-key FILE`,
//! written by `novad cluster-key FILE`: 32 bytes from the operating system's random number
//! generator, mode 0600). The handshake key is `blake3::derive_key("novad cluster v1", file)`.
//! Each connection runs, the dialling process (the *initiator*, the higher process index)
//! first:
//!
//! 1. initiator → listener: its hello — magic, the version of the cluster's messages
//!    ([`PROTOCOL`]), its process index, the number of processes, the workers per process, a
//!    fresh 32-byte nonce;
//! 2. listener → initiator: its own hello (with its own fresh nonce) and its proof, the keyed
//!    hash of "listener proves to initiator" followed by both hellos;
//! 3. initiator → listener, once the listener's proof checks out: its proof, the keyed hash
//!    of "initiator proves to listener" followed by both hellos;
//! 4. listener → initiator, once that proof checks out and the process is one it still waits
//!    for: one byte, accepted.
//!
//! A proof binds both nonces, both process indices, the direction, both protocol versions and
//! the cluster's shape (processes × workers), so a recorded transcript cannot be replayed
//! (the other side's nonce is new every time) and a proof cannot be reflected back to the
//! process that made it (the direction differs). Proofs are compared as [`blake3::Hash`]es, whose `==` takes constant
//! time. Only after both proofs are checked is the socket handed to timely.
//!
//! Why a keyed hash rather than an encrypted transport (Noise with a pre-shared key, `snow`):
//! timely's `initialize_networking_from_sockets` takes plain `TcpStream`s and reads and writes
//! them on its own threads, so an encrypting transport would need a proxy layer (a thread pair
//! per peer, copying every byte) in front of it. The threat here is a stranger being taken
//! for a peer — being sent the model, or feeding timely bytes it trusts — and authentication
//! is what answers it. It does not hide the traffic, nor guard a connection against someone
//! on the network path who takes it over after the handshake: on a network that is not
//! trusted, run the cluster inside a tunnel (WireGuard, ssh) — docs/OPERATIONS.md.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use rand::TryRngCore;
use thiserror::Error;

use crate::secret::{read_private, SecretError};

/// Fewest bytes a key file may hold (and what `novad cluster-key` writes).
pub const MIN_KEY_BYTES: usize = 32;

/// Most bytes of a key file that are read (a larger file is refused as not a key).
const MAX_KEY_BYTES: u64 = 64 * 1024;

/// The context string of the handshake key's derivation (a new key derivation gets a new one;
/// the messages' version is not in it: the hellos carry it and the proofs bind it).
const KEY_CONTEXT: &str = "novad cluster v1";

/// First bytes of every connection between two processes of a cluster: the handshake with
/// proofs and the messages' version.
const MAGIC: &[u8; 8] = b"novadcl3";

/// The magics of earlier handshakes (`novadcl1` without proofs, `novadcl2` without the
/// messages' version): a peer that dials in with one runs an earlier build (a listener of an
/// earlier build hangs up on this build's hello without a word, as on a stranger's).
const EARLIER: [&[u8; 8]; 2] = [b"novadcl1", b"novadcl2"];

/// The version of what the processes of a cluster say to each other after the handshake: the
/// rounds of a step, their messages and the deal of the work among the workers (every worker
/// works out every worker's hand, so two builds that deal differently cannot share a step).
/// Raised with any change to them; processes of different versions refuse each other at
/// connect, after both proved the key.
pub const PROTOCOL: u64 = 3;

/// Bytes of a hello: magic, protocol, index, processes, workers, nonce.
const HELLO_LEN: usize = 8 + 4 * 8 + 32;

/// Bytes of a proof.
const PROOF_LEN: usize = blake3::OUT_LEN;

/// What the listener sends last when it takes the connection.
const ACCEPTED: u8 = 1;

/// The key the processes of a cluster prove they hold, derived from the key file. Its
/// `Debug` form does not show it.
#[derive(Clone)]
pub struct ClusterKey([u8; 32]);

impl std::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterKey(..)")
    }
}

/// Why a key file cannot be used or written.
#[derive(Debug, Error)]
pub enum KeyError {
    #[error(transparent)]
    File(#[from] SecretError),
    #[error("cluster key {path} exists already; novad never overwrites a key (remove it first to replace it)")]
    Exists { path: String },
    #[error("cannot write cluster key {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no random bytes from the operating system: {0}")]
    Random(String),
}

impl ClusterKey {
    /// The key of the key file at `path`. Refused unless the file is readable by its owner
    /// alone (no group or other permission bits) and holds at least [`MIN_KEY_BYTES`] bytes;
    /// the mode is checked on the opened file, so it is the file read.
    pub fn load(path: &Path) -> Result<ClusterKey, KeyError> {
        let secret = read_private(
            path,
            "cluster key",
            MIN_KEY_BYTES,
            MAX_KEY_BYTES,
            "`novad cluster-key FILE` writes one",
        )?;
        Ok(ClusterKey::from_secret(&secret))
    }

    /// The key derived from the bytes of a key file (any length; [`Self::load`] enforces the
    /// minimum).
    pub fn from_secret(secret: &[u8]) -> ClusterKey {
        ClusterKey(blake3::derive_key(KEY_CONTEXT, secret))
    }

    /// The proof of `direction` over the two hellos.
    fn proof(
        &self,
        direction: Direction,
        initiator: &[u8; HELLO_LEN],
        listener: &[u8; HELLO_LEN],
    ) -> blake3::Hash {
        let mut t = Vec::with_capacity(32 + 2 * HELLO_LEN);
        t.extend_from_slice(direction.label());
        t.extend_from_slice(initiator);
        t.extend_from_slice(listener);
        blake3::keyed_hash(&self.0, &t)
    }
}

/// Write a fresh key file at `path`: [`MIN_KEY_BYTES`] bytes from the operating system's
/// random number generator, created with mode 0600 (never wider; the umask may only narrow
/// it). An existing file is never overwritten; a file left half-written is removed.
pub fn write_new_key(path: &Path) -> Result<(), KeyError> {
    let name = path.display().to_string();
    let mut secret = [0u8; MIN_KEY_BYTES];
    rand::rngs::OsRng
        .try_fill_bytes(&mut secret)
        .map_err(|e| KeyError::Random(e.to_string()))?;
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => KeyError::Exists { path: name.clone() },
            _ => KeyError::Write {
                path: name.clone(),
                source: e,
            },
        })?;
    if let Err(e) = file.write_all(&secret).and_then(|()| file.sync_all()) {
        drop(file);
        let _ = std::fs::remove_file(path);
        return Err(KeyError::Write {
            path: name,
            source: e,
        });
    }
    Ok(())
}

/// Who proves to whom.
#[derive(Debug, Clone, Copy)]
enum Direction {
    ListenerToInitiator,
    InitiatorToListener,
}

impl Direction {
    /// The label a proof starts with (both the same length, so no transcript is a prefix of
    /// another direction's).
    fn label(self) -> &'static [u8; 32] {
        match self {
            Direction::ListenerToInitiator => b"novad cluster v1: listener proof",
            Direction::InitiatorToListener => b"novad cluster v1: dialler proof.",
        }
    }
}

/// What this process is in its cluster, as its hellos say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// This process's index (0 leads).
    pub process: usize,
    /// Processes in the cluster.
    pub processes: usize,
    /// Worker threads in every process.
    pub workers: usize,
}

/// Why a connection failed the handshake. Only [`HandshakeError::Misconfigured`] comes from a
/// peer that proved the key; every other failure may be a stranger's doing.
#[derive(Debug, Error)]
pub enum HandshakeError {
    #[error("sent nothing for too long while {0} (timed out)")]
    TimedOut(&'static str),
    #[error("closed the connection while {0}")]
    Closed(&'static str),
    #[error("failed while {stage}: {why}")]
    Io { stage: &'static str, why: String },
    #[error("not a novad cluster process (wrong magic)")]
    NotNovad,
    #[error("sent the hello of an earlier build of novad (cluster handshake {0}): every process of a cluster must run the same build")]
    Earlier(String),
    #[error("did not prove the cluster key (a different key, or a replayed handshake)")]
    BadProof,
    #[error("did not accept this process")]
    Refused,
    #[error("{0}")]
    Misconfigured(String),
    #[error("no random bytes from the operating system: {0}")]
    Random(String),
}

impl HandshakeError {
    /// Whether the failure is a peer that proved the key but is not set up as this process
    /// expects (another version of the messages, a different shape, a process index taken
    /// twice): waiting longer cannot help.
    pub fn is_fatal(&self) -> bool {
        matches!(self, HandshakeError::Misconfigured(_))
    }
}

/// The io error of handshake stage `stage` as a [`HandshakeError`].
fn io(stage: &'static str) -> impl Fn(std::io::Error) -> HandshakeError {
    use std::io::ErrorKind as K;
    move |e| match e.kind() {
        K::WouldBlock | K::TimedOut => HandshakeError::TimedOut(stage),
        K::UnexpectedEof | K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => {
            HandshakeError::Closed(stage)
        }
        _ => HandshakeError::Io {
            stage,
            why: e.to_string(),
        },
    }
}

/// A hello: what a process says about itself, with a fresh nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hello {
    protocol: u64,
    index: usize,
    processes: usize,
    workers: usize,
}

impl Hello {
    /// This process's hello as bytes, with a fresh nonce from the operating system.
    fn fresh(me: Shape) -> Result<[u8; HELLO_LEN], HandshakeError> {
        let mut b = [0u8; HELLO_LEN];
        b[..8].copy_from_slice(MAGIC);
        let fields = [
            PROTOCOL,
            me.process as u64,
            me.processes as u64,
            me.workers as u64,
        ];
        for (i, v) in fields.into_iter().enumerate() {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_be_bytes());
        }
        rand::rngs::OsRng
            .try_fill_bytes(&mut b[40..])
            .map_err(|e| HandshakeError::Random(e.to_string()))?;
        Ok(b)
    }

    /// A peer's hello read from `s`: its magic first, so that a stranger or an earlier build
    /// is told apart before more is read (an earlier hello is shorter; reading a whole one
    /// would wait for bytes that never come).
    fn read(s: &mut TcpStream) -> Result<[u8; HELLO_LEN], HandshakeError> {
        let mut b = [0u8; HELLO_LEN];
        s.read_exact(&mut b[..8])
            .map_err(io("waiting for the hello"))?;
        if &b[..8] != MAGIC {
            return Err(match EARLIER.iter().find(|m| b[..8] == m[..]) {
                Some(m) => HandshakeError::Earlier(String::from_utf8_lossy(&m[..]).into_owned()),
                None => HandshakeError::NotNovad,
            });
        }
        s.read_exact(&mut b[8..])
            .map_err(io("waiting for the hello"))?;
        Ok(b)
    }

    /// The hello in `b` (read by [`Self::read`], so it starts with the magic).
    fn parse(b: &[u8; HELLO_LEN]) -> Hello {
        let field =
            |i: usize| u64::from_be_bytes(b[8 + 8 * i..16 + 8 * i].try_into().expect("8 bytes"));
        let size = |i: usize| usize::try_from(field(i)).unwrap_or(usize::MAX);
        Hello {
            protocol: field(0),
            index: size(1),
            processes: size(2),
            workers: size(3),
        }
    }

    /// Unless the peer speaks this build's [`PROTOCOL`] and runs the same shape as `me`: why
    /// not.
    fn same_shape(&self, me: Shape) -> Result<(), HandshakeError> {
        if self.protocol != PROTOCOL {
            return Err(HandshakeError::Misconfigured(format!(
                "it speaks version {} of the cluster's messages, this one version {PROTOCOL}: every process of a cluster must run the same build",
                self.protocol
            )));
        }
        if self.processes != me.processes || self.workers != me.workers {
            return Err(HandshakeError::Misconfigured(format!(
                "it runs {} processes × {} workers, this one {} × {}",
                self.processes, self.workers, me.processes, me.workers
            )));
        }
        Ok(())
    }
}

/// The proof in `b`, checked against `expected` in constant time.
fn check(b: &[u8; PROOF_LEN], expected: blake3::Hash) -> Result<(), HandshakeError> {
    if blake3::Hash::from_bytes(*b) == expected {
        Ok(())
    } else {
        Err(HandshakeError::BadProof)
    }
}

/// The dialling side of the handshake on the fresh connection `s` to process `expect`:
/// returns once the peer proved the key and said it is process `expect` of a cluster of
/// `me`'s shape, this process proved the key to it and it accepted the connection. Nothing
/// but the handshake is written before the peer's proof checks out. The caller sets the
/// socket's timeouts.
pub fn initiate(
    s: &mut TcpStream,
    key: &ClusterKey,
    me: Shape,
    expect: usize,
) -> Result<(), HandshakeError> {
    let mine = Hello::fresh(me)?;
    s.write_all(&mine).map_err(io("sending the hello"))?;
    let theirs = Hello::read(s)?;
    let hello = Hello::parse(&theirs);
    let mut proof = [0u8; PROOF_LEN];
    s.read_exact(&mut proof)
        .map_err(io("waiting for the proof"))?;
    check(
        &proof,
        key.proof(Direction::ListenerToInitiator, &mine, &theirs),
    )?;
    if hello.index != expect {
        return Err(HandshakeError::Misconfigured(format!(
            "it says it is process {}, not {expect}",
            hello.index
        )));
    }
    hello.same_shape(me)?;
    let proof = key.proof(Direction::InitiatorToListener, &mine, &theirs);
    s.write_all(proof.as_bytes())
        .map_err(io("sending the proof"))?;
    let mut verdict = [0u8; 1];
    s.read_exact(&mut verdict)
        .map_err(io("waiting to be accepted"))?;
    if verdict[0] != ACCEPTED {
        return Err(HandshakeError::Refused);
    }
    Ok(())
}

/// The listening side of the handshake on the fresh connection `s`: returns the index the
/// peer proved it is — a process of `me`'s shape with a higher index than `me`'s — once its
/// proof checked out. The peer is not yet told it is accepted: the caller calls [`accept`]
/// (or drops the connection). The caller sets the socket's timeouts.
pub fn answer(s: &mut TcpStream, key: &ClusterKey, me: Shape) -> Result<usize, HandshakeError> {
    let theirs = Hello::read(s)?;
    let hello = Hello::parse(&theirs);
    let mine = Hello::fresh(me)?;
    let proof = key.proof(Direction::ListenerToInitiator, &theirs, &mine);
    let mut out = mine.to_vec();
    out.extend_from_slice(proof.as_bytes());
    s.write_all(&out).map_err(io("sending the hello"))?;
    let mut proof = [0u8; PROOF_LEN];
    s.read_exact(&mut proof)
        .map_err(io("waiting for the proof"))?;
    check(
        &proof,
        key.proof(Direction::InitiatorToListener, &theirs, &mine),
    )?;
    hello.same_shape(me)?;
    if hello.index <= me.process || hello.index >= me.processes {
        return Err(HandshakeError::Misconfigured(format!(
            "it says it is process {}; process {} takes connections from processes {}..{} only",
            hello.index,
            me.process,
            me.process + 1,
            me.processes
        )));
    }
    Ok(hello.index)
}

/// Tell a peer that passed [`answer`] that it is accepted: the last byte of the handshake.
pub fn accept(s: &mut TcpStream) -> Result<(), HandshakeError> {
    s.write_all(&[ACCEPTED]).map_err(io("accepting"))
}

#[cfg(test)]
mod tests;
