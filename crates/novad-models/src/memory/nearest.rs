//! Exact nearest-neighbour search of a [`DocMemory`]: term-at-a-time accumulation with
//! MaxScore pruning, finished by exact dot products.
//!
//! Query terms are processed by decreasing upper bound (query weight × largest weight in the
//! term's posting list). What the remaining terms can add to any document is bounded by the
//! smaller of the sum of their bounds and, by Cauchy-Schwarz, the ℓ2 norm of the query's
//! remaining weights (stored vectors are unit). Once that bound cannot lift a document that has
//! not been seen yet to the best exact cosine found so far, the remaining (long, common-term)
//! posting lists are skipped and only the seen documents whose partial score plus the
//! remaining bound can still reach the best are scored exactly.
//!
//! Exactness: every reported cosine comes from [`exact_dot`], which adds the products in the
//! query's key order starting from 0.0, the order of a plain term-at-a-time accumulation over
//! all of the query's terms; pruning only discards documents whose score is provably (with a
//! margin far above the floating-point error) strictly below the best, so the winner, its
//! cosine bit for bit, and the tie rule (the most recently offered wins) are those of the
//! exhaustive search.

use std::cell::RefCell;

use rayon::prelude::*;

use super::search::{DocMemory, Neighbour, Postings};
use super::TermVector;

/// Relative margin on every upper bound: covers the rounding of sums of at most a few hundred
/// non-negative f64 products (≤ 1e-13 relative) many times over.
const MARGIN: f64 = 1.0 + 1e-9;

/// Bound on the ℓ2 norm of a stored vector, with margin: vectors are unit up to f32 rounding,
/// and loaded ones are checked to ‖v‖² ≤ 1.001 (memory/parts.rs).
const NORM: f64 = 1.001;

/// When to try stopping early (none of these changes a result, only the work done). A try
/// counts the candidates that can still win; it is made when the remaining postings have
/// shrunk by 1/[`CHECK_SHRINK`] since the last one and the candidates are at most
/// 1/[`CHECK_GATE`] of them, so all tries together cost at most `CHECK_SHRINK / CHECK_GATE`
/// times the query's postings. The search stops when scoring the candidates exactly,
/// [`CANDIDATE_COST`] × (query terms + 128) postings' worth each, costs less than the
/// remaining postings. Chosen by measurement on 20 Newsgroups posts (docs/RESULTS.md, "Search
/// pruning").
const CHECK_SHRINK: usize = 8;
const CHECK_GATE: usize = 2;
const CANDIDATE_COST: usize = 2;

/// Per-thread scratch of the search, sized to the memory's slots. `acc` is all zeros and
/// `seen` all false between searches.
#[derive(Default)]
struct Scratch {
    acc: Vec<f64>,
    seen: Vec<bool>,
    touched: Vec<u32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// The dot product of `q` and `d` (both with strictly increasing keys), summed in `q`'s key
/// order from 0.0, each product taken in f64.
pub(crate) fn exact_dot(q: &TermVector, d: &TermVector) -> f64 {
    let (mut i, mut j) = (0, 0);
    let mut s = 0.0f64;
    while i < q.keys.len() && j < d.keys.len() {
        let (a, b) = (q.keys[i], d.keys[j]);
        if a == b {
            s += q.weights[i] as f64 * d.weights[j] as f64;
            i += 1;
            j += 1;
        } else if a < b {
            i += 1;
        } else {
            j += 1;
        }
    }
    s
}

/// The best (cosine, offered number, slot) so far; ties go to the larger offered number.
type Best = Option<(f64, u64, u32)>;

/// The slot of a floor's match (none: slots are fewer than `max_docs` ≤ 10 000 000).
const NO_SLOT: u32 = u32::MAX;

/// A match to beat: the exact dot product and the offered number of a document found
/// elsewhere (in another share of the memory).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Floor {
    pub dot: f64,
    pub no: u64,
}

impl Neighbour {
    /// This match as a floor for the search of another share.
    pub fn floor(&self) -> Floor {
        Floor {
            dot: self.dot,
            no: self.no,
        }
    }
}

fn better(best: Best, c: f64, no: u64) -> bool {
    best.is_none_or(|(bc, bno, _)| c > bc || (c == bc && no > bno))
}

impl DocMemory {
    /// The nearest stored document of `q` by cosine (ties: the most recently offered), or
    /// `None` when no stored document shares a term with it. Cost: at most the postings of q's
    /// terms, usually far less (see the module documentation).
    pub fn nearest(&self, q: &TermVector) -> Option<Neighbour> {
        SCRATCH.with(|s| self.nearest_with(q, None, &mut s.borrow_mut()))
    }

    /// [`Self::nearest`] when it beats `floor` ([`Floor`]: a larger dot product, or the same
    /// and a larger offered number), else `None`. Documents that cannot beat it are pruned
    /// from the start, so a high floor (the best match found elsewhere) makes the search
    /// cheaper.
    pub fn nearest_above(&self, q: &TermVector, floor: Floor) -> Option<Neighbour> {
        SCRATCH.with(|s| self.nearest_with(q, Some(floor), &mut s.borrow_mut()))
    }

    /// [`Self::nearest`] for every query, in parallel; each result depends only on its query
    /// and the memory.
    pub fn nearest_batch(&self, qs: &[&TermVector]) -> Vec<Option<Neighbour>> {
        qs.par_iter().map(|q| self.nearest(q)).collect()
    }

    /// [`Self::nearest_above`] (or [`Self::nearest`] without a floor) for every query, in
    /// parallel.
    pub fn nearest_batch_above(
        &self,
        qs: &[(&TermVector, Option<Floor>)],
    ) -> Vec<Option<Neighbour>> {
        qs.par_iter()
            .map(|&(q, floor)| match floor {
                Some(f) => self.nearest_above(q, f),
                None => self.nearest(q),
            })
            .collect()
    }

    /// Exact score of the stored document in slot `s` and its offered number.
    fn score(&self, q: &TermVector, s: u32) -> (f64, u64) {
        match &self.slots[s as usize] {
            Some(d) => (exact_dot(q, &d.vector), d.no),
            None => (0.0, 0),
        }
    }

    fn nearest_with(
        &self,
        q: &TermVector,
        floor: Option<Floor>,
        sc: &mut Scratch,
    ) -> Option<Neighbour> {
        let n = self.slots.len();
        if sc.acc.len() < n {
            sc.acc.resize(n, 0.0);
            sc.seen.resize(n, false);
        }
        // (upper bound, query weight, postings), by decreasing bound
        let mut terms: Vec<(f64, f32, &Postings)> = q
            .keys
            .iter()
            .zip(&q.weights)
            .filter_map(|(k, &w)| {
                let p = self.postings.get(k)?;
                Some((w as f64 * p.max as f64, w, p))
            })
            .collect();
        terms.sort_unstable_by(|a, b| b.0.total_cmp(&a.0));
        // rest[j]: bound on what terms j.. add to any document: the sum of their bounds, and
        // (Cauchy-Schwarz, stored vectors having ‖d‖ ≤ NORM) ‖q restricted to them‖ · NORM
        let mut rest = vec![0.0f64; terms.len() + 1];
        let (mut sum, mut sq) = (0.0f64, 0.0f64);
        for j in (0..terms.len()).rev() {
            sum += terms[j].0;
            sq += terms[j].1 as f64 * terms[j].1 as f64;
            rest[j] = (sum * MARGIN).min(sq.sqrt() * NORM);
        }
        // work[j]: postings of terms j..
        let mut work = vec![0usize; terms.len() + 1];
        for j in (0..terms.len()).rev() {
            work[j] = work[j + 1] + terms[j].2.entries.len();
        }
        let cost = CANDIDATE_COST * (q.len() + 128);
        let Scratch { acc, seen, touched } = sc;
        // a floor is a best match without a slot here
        let mut best: Best = floor.map(|f| (f.dot, f.no, NO_SLOT));
        let mut top = (0.0f64, u32::MAX);
        let mut scored_top = u32::MAX;
        let mut stop = terms.len();
        let mut next_check = usize::MAX;
        for (j, &(_, w, p)) in terms.iter().enumerate() {
            let bound = rest[j];
            // the best partial score is scored exactly once the remaining bound falls below
            // it: its exact cosine is the threshold the remaining bounds are compared against
            if top.1 != u32::MAX && top.1 != scored_top && bound < top.0 {
                scored_top = top.1;
                let (c, no) = self.score(q, top.1);
                if better(best, c, no) {
                    best = Some((c, no, top.1));
                }
            }
            // stop when no unseen document can win and finishing the candidates exactly
            // costs less than the remaining postings (tried at geometrically spaced points)
            if let Some(b) = best.filter(|b| bound < b.0) {
                if work[j] <= next_check && touched.len() <= work[j] / CHECK_GATE {
                    next_check = work[j] - work[j] / CHECK_SHRINK;
                    let need = touched
                        .iter()
                        .filter(|&&s| acc[s as usize] * MARGIN + bound >= b.0)
                        .count();
                    if need * cost <= work[j] {
                        stop = j;
                        break;
                    }
                }
            }
            let w = w as f64;
            for &(slot, v) in &p.entries {
                let i = slot as usize;
                if !seen[i] {
                    seen[i] = true;
                    touched.push(slot);
                }
                let a = acc[i] + w * v as f64;
                acc[i] = a;
                if a > top.0 {
                    top = (a, slot);
                }
            }
        }
        let remaining = rest[stop];
        for &s in touched.iter() {
            let i = s as usize;
            let partial = acc[i];
            acc[i] = 0.0;
            seen[i] = false;
            if best.is_some_and(|b| (partial * MARGIN + remaining) < b.0) {
                continue;
            }
            let (c, no) = self.score(q, s);
            if better(best, c, no) {
                best = Some((c, no, s));
            }
        }
        touched.clear();
        best.and_then(|(c, _, s)| {
            let d = self.slots.get(s as usize)?.as_ref()?;
            Some(Neighbour {
                reference: d.reference,
                dot: c,
                no: d.no,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::testing::{batch, tied_vectors as vectors};
    use crate::memory::{DocRef, Eviction, MemoryParams};

    /// The exhaustive term-at-a-time search (every posting of every query term, accumulated
    /// in the query's key order): the oracle the pruned search must reproduce bit for bit.
    fn exhaustive(m: &DocMemory, q: &TermVector) -> Option<Neighbour> {
        let mut acc = vec![0.0f64; m.slots.len()];
        let mut seen = vec![false; m.slots.len()];
        for (k, &w) in q.keys.iter().zip(&q.weights) {
            if let Some(p) = m.postings.get(k) {
                for &(s, v) in &p.entries {
                    acc[s as usize] += w as f64 * v as f64;
                    seen[s as usize] = true;
                }
            }
        }
        let mut best: Best = None;
        for (s, d) in m.docs() {
            if seen[s as usize] && better(best, acc[s as usize], d.no) {
                best = Some((acc[s as usize], d.no, s));
            }
        }
        best.map(|(c, no, s)| Neighbour {
            reference: m.slots[s as usize].as_ref().unwrap().reference,
            dot: c,
            no,
        })
    }

    #[test]
    fn pruned_search_equals_exhaustive_search_bit_for_bit_with_ties() {
        let mut ties = 0;
        for ev in [Eviction::Oldest, Eviction::Reservoir] {
            let p = MemoryParams {
                max_docs: 300,
                eviction: ev,
                ..Default::default()
            };
            let mut m = DocMemory::new(p).unwrap();
            let docs = vectors(1200, 11);
            for (b, chunk) in docs.chunks(50).enumerate() {
                let batch: Vec<(DocRef, &TermVector)> = chunk
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        let r = DocRef {
                            timestep: b as u64,
                            seq: i as u32,
                            time: (b * 50 + i) as i64,
                        };
                        (r, v)
                    })
                    .collect();
                m.insert(&batch);
                // queries: fresh random vectors and copies of stored ones (exact ties)
                let mut qs = vectors(40, 1000 + b as u64);
                qs.extend(m.docs().step_by(7).map(|(_, d)| d.vector.clone()));
                let refs: Vec<&TermVector> = qs.iter().collect();
                for (q, got) in qs.iter().zip(m.nearest_batch(&refs)) {
                    let want = exhaustive(&m, q);
                    assert_eq!(
                        got.map(|g| g.reference),
                        want.map(|w| w.reference),
                        "{ev:?}"
                    );
                    assert_eq!(
                        got.map(|g| g.cosine().to_bits()),
                        want.map(|w| w.cosine().to_bits())
                    );
                    if let Some(w) = want {
                        let bits = w.cosine().to_bits();
                        let tied = m
                            .docs()
                            .filter(|(_, d)| {
                                exact_dot(q, &d.vector).clamp(0.0, 1.0).to_bits() == bits
                            })
                            .count();
                        ties += (tied > 1) as usize;
                    }
                }
            }
        }
        assert!(
            ties > 100,
            "the data must exercise the tie rule ({ties} tied queries)"
        );
    }

    #[test]
    fn a_search_above_a_floor_finds_the_nearest_exactly_when_it_beats_the_floor() {
        let mut m = DocMemory::new(MemoryParams::default()).unwrap();
        let docs = vectors(600, 5);
        m.insert(&batch(&docs));
        let mut qs = vectors(60, 77);
        qs.extend(m.docs().step_by(13).map(|(_, d)| d.vector.clone()));
        let (mut beaten, mut kept) = (0, 0);
        for q in &qs {
            let Some(best) = m.nearest(q) else {
                continue;
            };
            // floors just below, at and above the best, by dot product and by number
            let around = [
                (best.dot * 0.5, 0),
                (best.dot, best.no.saturating_sub(1)),
                (best.dot, best.no),
                (best.dot, best.no + 1),
                (best.dot * 1.5 + 1e-9, 0),
                (0.0, 0),
            ];
            for (dot, no) in around {
                let floor = Floor { dot, no };
                let got = m.nearest_above(q, floor);
                let beats = best.dot > dot || (best.dot == dot && best.no > no);
                assert_eq!(got, beats.then_some(best), "floor ({dot}, {no})");
                if beats {
                    beaten += 1;
                } else {
                    kept += 1;
                }
            }
            let both = m.nearest_batch_above(&[(q, Some(best.floor())), (q, None)]);
            assert_eq!(both, vec![None, Some(best)]);
        }
        assert!(beaten > 100 && kept > 100, "{beaten} {kept}");
    }

    #[test]
    fn exact_dot_sums_in_query_key_order() {
        let q = TermVector::from_pairs(vec![(1, 1.0), (2, 2.0), (5, 3.0)]);
        let d = TermVector::from_pairs(vec![(2, 1.0), (3, 1.0), (5, 1.0)]);
        let want = 0.0 + q.weights[1] as f64 * d.weights[0] as f64;
        let want = want + q.weights[2] as f64 * d.weights[2] as f64;
        assert_eq!(exact_dot(&q, &d).to_bits(), want.to_bits());
    }
}
