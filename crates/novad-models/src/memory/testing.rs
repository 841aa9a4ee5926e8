//! Test data shared by the memory's unit tests and, with the `testing` feature, by other
//! crates' tests.

use super::search::splitmix;
use super::{DocRef, TermVector};

/// The next value of a splitmix64 generator with state `st`.
pub fn next(st: &mut u64) -> u64 {
    splitmix(st)
}

/// Random vectors over few terms with few distinct weights, often repeated verbatim, so
/// exact ties between stored documents are common; a few heavy common terms and many
/// rare ones so that pruning actually happens.
pub fn tied_vectors(n: usize, seed: u64) -> Vec<TermVector> {
    let mut st = seed;
    let mut out: Vec<TermVector> = Vec::new();
    for _ in 0..n {
        if !out.is_empty() && next(&mut st) % 3 == 0 {
            let i = (next(&mut st) % out.len() as u64) as usize;
            out.push(out[i].clone());
            continue;
        }
        let len = 1 + (next(&mut st) % 20) as usize;
        let pairs = (0..len)
            .map(|_| {
                let common = next(&mut st) % 2 == 0;
                let k = if common {
                    next(&mut st) % 6
                } else {
                    6 + next(&mut st) % 300
                };
                (k, 1.0 + (next(&mut st) % 3) as f64)
            })
            .collect();
        out.push(TermVector::from_pairs(pairs));
    }
    out
}

/// `docs` as one batch: document i at timestep 0, position i, time i.
pub fn batch(docs: &[TermVector]) -> Vec<(DocRef, &TermVector)> {
    docs.iter()
        .enumerate()
        .map(|(i, v)| {
            let r = DocRef {
                timestep: 0,
                seq: i as u32,
                time: i as i64,
            };
            (r, v)
        })
        .collect()
}
