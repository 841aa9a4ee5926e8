//! The handshake over loopback sockets: the right key passes both ways; a wrong key, a
//! replayed transcript and a reflected proof fail; key files are checked and written safely.

use super::*;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::thread;
use std::time::Duration;

const TWO: Shape = Shape {
    process: 0,
    processes: 2,
    workers: 1,
};

fn key(b: u8) -> ClusterKey {
    ClusterKey::from_secret(&[b; 32])
}

/// A connected pair over 127.0.0.1: (dialling end, accepted end), with read timeouts so a
/// broken test fails instead of hanging.
fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    for s in [&a, &b] {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    }
    (a, b)
}

/// Process 0 answers on its end of a fresh pair (accepting what passes); the caller gets the
/// dialling end and the listener's outcome.
fn listener(
    k: ClusterKey,
    me: Shape,
) -> (TcpStream, thread::JoinHandle<Result<usize, HandshakeError>>) {
    let (a, mut b) = pair();
    let t = thread::spawn(move || {
        let j = answer(&mut b, &k, me)?;
        accept(&mut b)?;
        Ok(j)
    });
    (a, t)
}

fn shape(process: usize) -> Shape {
    Shape { process, ..TWO }
}

#[test]
fn the_right_key_passes_both_ways_and_the_socket_is_clean_after() {
    let (mut a, t) = listener(key(7), TWO);
    initiate(&mut a, &key(7), shape(1), 0).unwrap();
    assert_eq!(t.join().unwrap().unwrap(), 1);
    // nothing of the handshake is left unread on the dialling end
    a.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut b = [0u8; 1];
    assert!(
        !matches!(a.read(&mut b), Ok(n) if n > 0),
        "stray byte after the handshake"
    );
}

#[test]
fn a_wrong_key_fails_on_the_dialling_side() {
    let (mut a, t) = listener(key(7), TWO);
    let e = initiate(&mut a, &key(8), shape(1), 0).unwrap_err();
    assert!(matches!(e, HandshakeError::BadProof), "{e}");
    assert!(!e.is_fatal());
    drop(a);
    // the listener never got a proof: the dialler hung up
    let e = t.join().unwrap().unwrap_err();
    assert!(matches!(e, HandshakeError::Closed(_)), "{e}");
}

/// A dialler that does not check the listener's proof and sends `proof(mine, theirs)` as its
/// own: returns the listener's outcome.
fn forge(
    k: ClusterKey,
    proof: impl FnOnce(&[u8; HELLO_LEN], &[u8; HELLO_LEN], &[u8; PROOF_LEN]) -> [u8; PROOF_LEN],
    hello: Option<[u8; HELLO_LEN]>,
) -> Result<usize, HandshakeError> {
    let (mut a, t) = listener(k, TWO);
    let mine = hello.unwrap_or_else(|| Hello::fresh(shape(1)).unwrap());
    a.write_all(&mine).unwrap();
    let mut theirs = [0u8; HELLO_LEN];
    a.read_exact(&mut theirs).unwrap();
    let mut their_proof = [0u8; PROOF_LEN];
    a.read_exact(&mut their_proof).unwrap();
    a.write_all(&proof(&mine, &theirs, &their_proof)).unwrap();
    let r = t.join().unwrap();
    if r.is_err() {
        // a refused dialler is never told it is accepted
        let mut b = [0u8; 1];
        assert!(!matches!(a.read(&mut b), Ok(1)), "accepted after a failure");
    }
    r
}

#[test]
fn a_wrong_key_fails_on_the_listening_side() {
    let e = forge(
        key(7),
        |mine, theirs, _| {
            *key(8)
                .proof(Direction::InitiatorToListener, mine, theirs)
                .as_bytes()
        },
        None,
    )
    .unwrap_err();
    assert!(matches!(e, HandshakeError::BadProof), "{e}");
    // the same forger with the right key is taken: the test can tell them apart
    let ok = forge(
        key(7),
        |mine, theirs, _| {
            *key(7)
                .proof(Direction::InitiatorToListener, mine, theirs)
                .as_bytes()
        },
        None,
    );
    assert_eq!(ok.unwrap(), 1);
}

/// A listener's answer to the dialler's hello `theirs`: its own hello `mine` and its proof
/// with key 7.
fn listeners_answer(theirs: &[u8; HELLO_LEN], mine: &[u8; HELLO_LEN]) -> Vec<u8> {
    let mut out = mine.to_vec();
    out.extend_from_slice(
        key(7)
            .proof(Direction::ListenerToInitiator, theirs, mine)
            .as_bytes(),
    );
    out
}

#[test]
fn a_replayed_transcript_fails() {
    // record a genuine dialler's hello and proof
    let (mut a, mut b) = pair();
    let rec = thread::spawn(move || {
        let mut hello = [0u8; HELLO_LEN];
        b.read_exact(&mut hello).unwrap();
        let mine = Hello::fresh(TWO).unwrap();
        b.write_all(&listeners_answer(&hello, &mine)).unwrap();
        let mut proof = [0u8; PROOF_LEN];
        b.read_exact(&mut proof).unwrap();
        b.write_all(&[ACCEPTED]).unwrap();
        (hello, proof)
    });
    initiate(&mut a, &key(7), shape(1), 0).unwrap();
    let (hello, proof) = rec.join().unwrap();
    // replayed to a listener: its nonce is new, so the old proof does not fit
    let e = forge(key(7), |_, _, _| proof, Some(hello)).unwrap_err();
    assert!(matches!(e, HandshakeError::BadProof), "{e}");
}

#[test]
fn a_reflected_proof_fails() {
    // the listener's own proof, sent back to it as the dialler's
    let e = forge(key(7), |_, _, theirs| *theirs, None).unwrap_err();
    assert!(matches!(e, HandshakeError::BadProof), "{e}");
    // a fake listener that mirrors the dialler's hello and proves with the dialler's
    // direction cannot pass either
    let (mut a, mut b) = pair();
    let mirror = thread::spawn(move || {
        let mut hello = [0u8; HELLO_LEN];
        b.read_exact(&mut hello).unwrap();
        let mut out = hello.to_vec();
        out.extend_from_slice(
            key(7)
                .proof(Direction::InitiatorToListener, &hello, &hello)
                .as_bytes(),
        );
        b.write_all(&out).unwrap();
    });
    let e = initiate(&mut a, &key(7), shape(1), 0).unwrap_err();
    mirror.join().unwrap();
    assert!(matches!(e, HandshakeError::BadProof), "{e}");
}

#[test]
fn strangers_fail_without_blocking_past_the_timeout() {
    // garbage: not the magic
    let (mut a, t) = listener(key(7), TWO);
    a.write_all(&[0u8; 128]).unwrap();
    let e = t.join().unwrap().unwrap_err();
    assert!(matches!(e, HandshakeError::NotNovad), "{e}");
    // silence: the read timeout ends the handshake
    let (a, mut b) = pair();
    b.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let e = answer(&mut b, &key(7), TWO).unwrap_err();
    assert!(matches!(e, HandshakeError::TimedOut(_)), "{e}");
    drop(a);
    // a listener that hangs up at once
    let (mut a, b) = pair();
    drop(b);
    let e = initiate(&mut a, &key(7), shape(1), 0).unwrap_err();
    assert!(
        matches!(e, HandshakeError::Closed(_) | HandshakeError::Io { .. }),
        "{e}"
    );
}

#[test]
fn a_peer_with_the_key_but_another_shape_or_index_is_a_fatal_misconfiguration() {
    let other = Shape {
        process: 1,
        processes: 3,
        workers: 1,
    };
    let (mut a, t) = listener(key(7), TWO);
    let e = initiate(&mut a, &key(7), other, 0).unwrap_err();
    assert!(e.is_fatal() && e.to_string().contains("2 processes"), "{e}");
    drop(a);
    assert!(!t.join().unwrap().unwrap_err().is_fatal());
    // a dialler that says it is process 0 to process 0
    let (mut a, t) = listener(key(7), TWO);
    let e = initiate(&mut a, &key(7), shape(0), 0);
    let l = t.join().unwrap().unwrap_err();
    assert!(l.is_fatal() && l.to_string().contains("process 0"), "{l}");
    assert!(e.is_err());
}

#[test]
fn a_peer_with_the_key_but_another_protocol_version_is_refused_by_both_sides() {
    // a dialler of another build: the same key and shape, the next version of the messages
    let mut hello = Hello::fresh(shape(1)).unwrap();
    hello[8..16].copy_from_slice(&(PROTOCOL + 1).to_be_bytes());
    let e = forge(
        key(7),
        |mine, theirs, _| {
            *key(7)
                .proof(Direction::InitiatorToListener, mine, theirs)
                .as_bytes()
        },
        Some(hello),
    )
    .unwrap_err();
    let said = e.to_string();
    assert!(e.is_fatal(), "{e}");
    assert!(
        said.contains(&format!("version {}", PROTOCOL + 1))
            && said.contains(&format!("version {PROTOCOL}")),
        "{said}"
    );
    // a listener of another build: the dialler refuses it once its proof checked out
    let (mut a, mut b) = pair();
    let other = thread::spawn(move || {
        let theirs = Hello::read(&mut b).unwrap();
        let mut mine = Hello::fresh(TWO).unwrap();
        mine[8..16].copy_from_slice(&(PROTOCOL + 1).to_be_bytes());
        b.write_all(&listeners_answer(&theirs, &mine)).unwrap();
        // the dialler sends no proof of its own: it hangs up
        let mut rest = [0u8; 1];
        b.read(&mut rest).unwrap()
    });
    let e = initiate(&mut a, &key(7), shape(1), 0).unwrap_err();
    assert!(e.is_fatal() && e.to_string().contains("version"), "{e}");
    drop(a);
    assert_eq!(
        other.join().unwrap(),
        0,
        "the dialler proved itself to another build"
    );
}

#[test]
fn an_earlier_builds_hello_is_named_at_once() {
    // an earlier hello is shorter than this build's (64 bytes; 32 for novadcl1): the
    // listener must not wait for the rest of a hello of its own length
    for (magic, len) in EARLIER.into_iter().zip([32, 64]) {
        let (mut a, t) = listener(key(7), TWO);
        let mut hello = vec![0u8; len];
        hello[..8].copy_from_slice(magic);
        a.write_all(&hello).unwrap();
        let e = t.join().unwrap().unwrap_err();
        let earlier = String::from_utf8_lossy(magic).into_owned();
        assert!(
            matches!(&e, HandshakeError::Earlier(m) if *m == earlier),
            "{e}"
        );
        assert!(!e.is_fatal() && e.to_string().contains("same build"), "{e}");
    }
}

#[test]
fn key_files_are_written_once_with_mode_0600_and_checked_when_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cluster.key");
    write_new_key(&path).unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.len(), MIN_KEY_BYTES as u64);
    let first = std::fs::read(&path).unwrap();
    assert!(matches!(write_new_key(&path), Err(KeyError::Exists { .. })));
    assert_eq!(
        std::fs::read(&path).unwrap(),
        first,
        "the key was overwritten"
    );
    let other = dir.path().join("other.key");
    write_new_key(&other).unwrap();
    assert_ne!(std::fs::read(&other).unwrap(), first, "two keys alike");
    ClusterKey::load(&path).unwrap();

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let e = ClusterKey::load(&path).unwrap_err();
    assert!(
        matches!(e, KeyError::File(SecretError::Exposed { mode: 0o640, .. })),
        "{e}"
    );
    assert!(e.to_string().contains("0640") && e.to_string().contains("cluster.key"));

    let short = dir.path().join("short.key");
    std::fs::write(&short, [1u8; 16]).unwrap();
    std::fs::set_permissions(&short, std::fs::Permissions::from_mode(0o600)).unwrap();
    let e = ClusterKey::load(&short).unwrap_err();
    assert!(
        matches!(e, KeyError::File(SecretError::Short { len: 16, .. })),
        "{e}"
    );
}
