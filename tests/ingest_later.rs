//! Committing in the background (`Ingestor::defer`, a cluster leader's mode): each timestep
//! becomes durable one timestep later, in order, exactly once, and the store ends up holding
//! exactly what committing in line writes.
use novad::ingest::{Ingestor, Outcome};
use novad::store::schema::{TimestepRecord, ALL_TREES, TIMESTEPS};
use novad_models::{ModelParams, Params};
use rand::{Rng, SeedableRng};

/// `n` batches of 40 documents over a few word topics; a new topic from batch 3 on.
fn batches(n: usize) -> Vec<String> {
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    (0..n)
        .map(|t| {
            (0..40)
                .map(|i| {
                    let topic = if t >= 3 && i % 4 == 0 { 6 } else { i % 3 };
                    let words: Vec<String> = (0..20)
                        .map(|_| format!("w{}x{}", topic, r.random_range(0..12)))
                        .collect();
                    format!("{}\n", words.join(" "))
                })
                .collect()
        })
        .collect()
}

/// Every (tree, key, value) of the store, in order; a timestep record without the seconds its
/// stages took (wall-clock figures, which differ from run to run).
fn contents(ing: &Ingestor) -> Vec<(String, Vec<u8>, Vec<u8>)> {
    let mut all = Vec::new();
    for name in ALL_TREES {
        for kv in ing.store.tree(name).iter() {
            let (k, mut v) = kv.unwrap();
            if name == TIMESTEPS {
                let mut r: TimestepRecord = postcard::from_bytes(&v).unwrap();
                let s = &mut r.stats;
                (s.seconds_topics, s.seconds_vectorize) = (0.0, 0.0);
                (s.seconds_coding, s.seconds_update) = (0.0, 0.0);
                v = postcard::to_stdvec(&r).unwrap().into();
            }
            all.push((name.to_string(), k.to_vec(), v.to_vec()));
        }
    }
    all
}

#[test]
fn background_commits_settle_in_order_and_write_what_in_line_commits_write() {
    let params = ModelParams::L1(Params::default().with_k(10));
    let batches = batches(6);
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut inline = Ingestor::open(a_dir.path(), Some(&params)).unwrap();
    let mut later = Ingestor::open(b_dir.path(), Some(&params)).unwrap();
    later.defer = true;
    let mut settled: Vec<(String, u64)> = Vec::new();
    for (t, body) in batches.iter().enumerate() {
        let (name, now) = (format!("{t}.txt"), 1000 * t as i64);
        match inline.ingest_bytes(&name, body.as_bytes(), now).unwrap() {
            Outcome::Committed { timestep, .. } => assert_eq!(timestep, t as u64),
            o => panic!("{o:?}"),
        }
        match later.ingest_bytes(&name, body.as_bytes(), now).unwrap() {
            Outcome::Deferred { timestep, .. } => assert_eq!(timestep, t as u64),
            o => panic!("{o:?}"),
        }
        for s in later.take_settled() {
            match s.outcome {
                Outcome::Committed { timestep, .. } => settled.push((s.name, timestep)),
                o => panic!("{o:?}"),
            }
        }
        // two timesteps are not durable: the one stepped and the one before it, in flight
        assert_eq!(settled.len(), t.saturating_sub(1), "after batch {t}");
        // the oldest timestep not durable: every one before it has settled, so a file whose
        // last timestep is before it may be moved, and no other
        assert_eq!(
            later.in_flight(),
            Some(settled.len() as u64),
            "after batch {t}"
        );
    }
    // the same bytes again while their timestep may not be durable: recognised, not stepped
    match later
        .ingest_bytes("5.txt", batches[5].as_bytes(), 9000)
        .unwrap()
    {
        Outcome::AlreadyCommitted { timestep } => assert_eq!(timestep, 5),
        o => panic!("{o:?}"),
    }
    later.settle().unwrap();
    assert_eq!(later.in_flight(), None);
    for s in later.take_settled() {
        if let Outcome::Committed { timestep, .. } = s.outcome {
            settled.push((s.name, timestep));
        }
    }
    let want: Vec<(String, u64)> = (0..6).map(|t| (format!("{t}.txt"), t as u64)).collect();
    assert_eq!(settled, want, "every timestep settled once, in order");
    let (b, a) = (contents(&later), contents(&inline));
    assert_eq!(a.len(), b.len());
    if let Some((x, _)) = a.iter().zip(&b).find(|(x, y)| x != y) {
        panic!("{} {:?} differs", x.0, String::from_utf8_lossy(&x.1));
    }
    assert_eq!(later.store.state_digest(), inline.store.state_digest());
    // durable: a reopened store holds the engine in memory
    let image = later.engine.to_bytes();
    drop(later);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let back = Ingestor::open(b_dir.path(), None).unwrap();
    assert_eq!(back.engine.to_bytes(), image);
}
