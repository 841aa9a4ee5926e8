//! A memory shared out among the workers of a cluster by logical shard.
//!
//! Remembered document number `no` (its place in the order documents were offered) belongs to
//! logical shard `no % LOGICAL_SHARDS`, whatever the number of workers. A [`DocMemory`] with a
//! [`Share`] indexes only the documents of its shards (only they are in its posting lists, so
//! its search sees only them) and, unless the share keeps every vector, holds the vectors of
//! only those documents. Every memory still keeps the catalog of all remembered documents
//! (slot, offered number, reference, term count): planning a batch — which slots it takes,
//! what it evicts under the caps — needs exactly that, so every share plans the same plan and
//! keeps the same [`DocMemory::mark`].
//!
//! The nearest remembered document of a query is then the best of the shares' nearest by
//! ([`Neighbour::dot`], [`Neighbour::no`]) — the full memory's tie rule — so combining the
//! searches of shares that cover every shard once gives the full memory's answer bit for bit
//! ([`better_neighbour`]).

use crate::shard::LOGICAL_SHARDS;

use super::search::{DocMemory, Neighbour};
use super::MemoryError;

const _: () = assert!(
    LOGICAL_SHARDS <= 64,
    "a share is a 64-bit mask of logical shards"
);

/// Every logical shard.
const ALL: u64 = if LOGICAL_SHARDS == 64 {
    u64::MAX
} else {
    (1u64 << LOGICAL_SHARDS) - 1
};

/// The logical shard of remembered document number `no`.
pub fn memory_shard(no: u64) -> usize {
    (no % LOGICAL_SHARDS as u64) as usize
}

/// Which remembered documents a [`DocMemory`] indexes and keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    /// Bit s set: the documents of logical shard s are indexed.
    shards: u64,
    /// The vectors of the documents of other shards are kept too (not indexed).
    all_vectors: bool,
}

impl Default for Share {
    fn default() -> Self {
        Share::all()
    }
}

impl Share {
    /// The whole memory: every shard indexed, every vector kept (a single node).
    pub fn all() -> Share {
        Share {
            shards: ALL,
            all_vectors: true,
        }
    }

    /// The documents of `shards` (each < [`LOGICAL_SHARDS`]; others are ignored) indexed;
    /// the other documents' vectors kept only when `all_vectors`.
    pub fn of(shards: &[usize], all_vectors: bool) -> Share {
        let shards = shards
            .iter()
            .filter(|&&s| s < LOGICAL_SHARDS)
            .fold(0u64, |m, &s| m | 1 << s);
        Share {
            shards,
            all_vectors,
        }
    }

    /// The indexed shards as a mask (bit s: logical shard s).
    pub fn mask(&self) -> u64 {
        self.shards
    }

    /// True when document number `no` is indexed.
    pub fn indexes(&self, no: u64) -> bool {
        self.shards >> memory_shard(no) & 1 == 1
    }

    /// True when document number `no`'s vector is kept.
    pub fn keeps(&self, no: u64) -> bool {
        self.all_vectors || self.indexes(no)
    }

    /// True when every vector is kept (the memory can give its state parts).
    pub fn keeps_all(&self) -> bool {
        self.all_vectors || self.shards == ALL
    }
}

impl DocMemory {
    /// Which documents this memory indexes and keeps.
    pub fn share(&self) -> Share {
        self.share
    }

    /// Index only the documents of `share`'s shards, and drop the vectors it does not keep.
    /// Cost O(stored terms). Fails, unchanged, when a document `share` indexes has already
    /// lost its vector (a share only narrows what it was loaded with).
    pub fn restrict(&mut self, share: Share) -> Result<(), MemoryError> {
        if let Some(d) = self
            .slots
            .iter()
            .flatten()
            .find(|d| share.keeps(d.no) && d.vector.is_empty())
        {
            return Err(MemoryError::Inconsistent(format!(
                "remembered document {} was dropped from this share of the memory",
                d.no
            )));
        }
        self.share = share;
        for d in self.slots.iter_mut().flatten() {
            if !share.keeps(d.no) {
                d.vector = Default::default();
            }
        }
        self.rebuild();
        Ok(())
    }
}

/// The better of two nearest documents found in disjoint shares: the larger exact dot
/// product, ties to the more recently offered — the full memory's rule.
pub fn better_neighbour(a: Option<Neighbour>, b: Option<Neighbour>) -> Option<Neighbour> {
    match (a, b) {
        (Some(x), Some(y)) => {
            if y.dot > x.dot || (y.dot == x.dot && y.no > x.no) {
                Some(y)
            } else {
                Some(x)
            }
        }
        (x, None) => x,
        (None, y) => y,
    }
}

impl DocMemory {
    /// Stored documents whose vector this memory keeps (all of them unless its share drops
    /// some).
    pub fn vectors_kept(&self) -> usize {
        self.slots
            .iter()
            .flatten()
            .filter(|d| !d.vector.is_empty())
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::testing::{batch as one_batch, tied_vectors as vectors};
    use crate::memory::{DocRef, Eviction, MemoryParams, TermVector};

    /// The nearest document of each query in the whole memory, from the searches (one result
    /// per query, in query order) of shares that together index every logical shard exactly
    /// once. The answer does not depend on the order of the shares.
    fn best_of(
        n: usize,
        shares: impl IntoIterator<Item = Vec<Option<Neighbour>>>,
    ) -> Vec<Option<Neighbour>> {
        let mut best = vec![None; n];
        for near in shares {
            for (b, x) in best.iter_mut().zip(near) {
                *b = better_neighbour(*b, x);
            }
        }
        best
    }

    fn reference(i: usize) -> DocRef {
        DocRef {
            timestep: i as u64 / 16,
            seq: (i % 16) as u32,
            time: i as i64,
        }
    }

    /// The shares of `peers` workers: worker i indexes the shards s with s % peers == i, and
    /// worker 0 keeps every vector.
    fn shares(peers: usize) -> Vec<Share> {
        (0..peers)
            .map(|i| {
                let mine: Vec<usize> = (0..LOGICAL_SHARDS).filter(|s| s % peers == i).collect();
                Share::of(&mine, i == 0)
            })
            .collect()
    }

    #[test]
    fn shares_that_cover_every_shard_once_search_like_the_whole_memory() {
        for eviction in [Eviction::Oldest, Eviction::Reservoir] {
            let params = MemoryParams {
                max_docs: 90,
                eviction,
                ..Default::default()
            };
            let whole = DocMemory::new(params).unwrap();
            let docs = vectors(400, 11);
            for peers in [1, 2, 3, 5] {
                let mut parts: Vec<DocMemory> = shares(peers)
                    .into_iter()
                    .map(|sh| {
                        let mut m = whole.clone();
                        m.restrict(sh).unwrap();
                        m
                    })
                    .collect();
                let mut w = whole.clone();
                for (b, chunk) in docs.chunks(16).enumerate() {
                    let batch: Vec<(DocRef, &TermVector)> = chunk
                        .iter()
                        .enumerate()
                        .map(|(i, v)| (reference(b * 16 + i), v))
                        .collect();
                    // every share plans the whole memory's plan (same mark after applying it)
                    w.insert(&batch);
                    for p in &mut parts {
                        p.insert(&batch);
                        assert_eq!(p.mark(), w.mark(), "{eviction:?}, {peers} shares");
                    }
                    let qs = vectors(40, 1000 + b as u64);
                    let refs: Vec<&TermVector> = qs.iter().collect();
                    let want = w.nearest_batch(&refs);
                    // the shares cover every shard once; combined in any order
                    let masks = parts.iter().fold(0u64, |m, p| {
                        assert_eq!(m & p.share().mask(), 0);
                        m | p.share().mask()
                    });
                    assert_eq!(masks, Share::all().mask());
                    let got = best_of(qs.len(), parts.iter().rev().map(|p| p.nearest_batch(&refs)));
                    assert_eq!(got, want, "{eviction:?}, {peers} shares, batch {b}");
                    assert!(want.iter().any(Option::is_some));
                }
                // a replica keeps only its shards' vectors and indexes only them; the leader
                // keeps every vector
                for (i, p) in parts.iter().enumerate() {
                    let own = p.docs().filter(|(_, d)| p.share().indexes(d.no)).count();
                    let postings: usize = p.postings.values().map(|l| l.entries.len()).sum();
                    let own_terms: usize = p
                        .docs()
                        .filter(|(_, d)| p.share().indexes(d.no))
                        .map(|(_, d)| d.terms as usize)
                        .sum();
                    assert_eq!(postings, own_terms);
                    let kept = if i == 0 { p.len() } else { own };
                    assert_eq!(p.vectors_kept(), kept, "share {i} of {peers}");
                    if peers > 1 {
                        assert!(own < p.len(), "share {i} of {peers} holds only some");
                    }
                }
            }
        }
    }

    #[test]
    fn a_share_cannot_widen_and_shares_loaded_whole_combine_to_the_whole_search() {
        let mut m = DocMemory::new(MemoryParams::default()).unwrap();
        let docs = vectors(100, 5);
        m.insert(&one_batch(&docs));
        let mut part = m.clone();
        part.restrict(Share::of(&[1, 2], false)).unwrap();
        assert!(part.vectors_kept() < m.len());
        let e = part.restrict(Share::all()).unwrap_err().to_string();
        assert!(e.contains("was dropped from this share"), "{e}");
        assert_eq!(part.share(), Share::of(&[1, 2], false), "unchanged");
        // narrowing further works; the same share again too
        part.restrict(Share::of(&[2], false)).unwrap();
        part.restrict(Share::of(&[2], false)).unwrap();

        let q = vectors(3, 8);
        let refs: Vec<&TermVector> = q.iter().collect();
        let search = |shards: &[usize]| {
            let mut p = m.clone();
            p.restrict(Share::of(shards, false)).unwrap();
            p.nearest_batch(&refs)
        };
        let even: Vec<usize> = (0..LOGICAL_SHARDS).step_by(2).collect();
        let odd: Vec<usize> = (1..LOGICAL_SHARDS).step_by(2).collect();
        let want = m.nearest_batch(&refs);
        assert_eq!(best_of(3, [search(&even), search(&odd)]), want);
        assert_eq!(best_of(3, [search(&odd), search(&even)]), want);
    }
}
