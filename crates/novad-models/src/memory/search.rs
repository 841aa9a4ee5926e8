//! The document memory: bounded storage of unit-ℓ2 term vectors and exact nearest-neighbour
//! cosine search through an inverted index (term key → (slot, weight)).
//!
//! Changes go through a [`MemoryPlan`]: [`DocMemory::plan`] decides, without modifying the
//! memory, which slots the new documents take and which stored documents are evicted (cost
//! O(batch), independent of how much is stored); [`DocMemory::apply`] carries it out. A caller
//! can persist the plan's parts first and apply it only once they are committed.

use foldhash::{HashMap, HashMapExt};
use rayon::prelude::*;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::share::Share;
use super::{DocRef, Eviction, MemoryError, MemoryParams, TermVector};

/// A stored document. `no` numbers the documents offered to the memory (0, 1, 2, …).
/// `terms` is the length of its stored vector; `vector` is that vector, or empty when the
/// memory's [`Share`] does not keep it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredDoc {
    pub no: u64,
    pub reference: DocRef,
    pub terms: u32,
    pub vector: TermVector,
}

impl StoredDoc {
    /// A stored document holding `vector`.
    pub(crate) fn new(no: u64, reference: DocRef, vector: TermVector) -> StoredDoc {
        StoredDoc {
            no,
            reference,
            terms: vector.len() as u32,
            vector,
        }
    }

    /// Bytes the document accounts for: the vector (12 bytes per term), its postings (8 bytes
    /// per term) and a fixed overhead — whether or not this memory keeps them.
    pub(crate) fn bytes(&self) -> u64 {
        64 + 20 * self.terms as u64
    }
}

/// The nearest stored document of a query.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Neighbour {
    pub reference: DocRef,
    /// The exact dot product of the query and the stored (truncated) vector (what searches
    /// are ranked by): the cosine up to rounding, as both are unit ℓ2.
    pub dot: f64,
    /// The stored document's offered number (ties go to the larger).
    pub no: u64,
}

impl Neighbour {
    /// Cosine of the query and the stored (truncated) vector, in [0, 1].
    pub fn cosine(&self) -> f64 {
        self.dot.clamp(0.0, 1.0)
    }
}

/// Bounded memory of past documents with exact cosine search.
///
/// Invariants: at most `max_docs` documents and at most `max_bytes` bytes ([`Self::bytes`]);
/// every stored vector is non-empty, unit ℓ2 and at most `max_terms_per_doc` long; the
/// postings hold exactly the entries of the stored vectors of the documents the [`Share`]
/// indexes; with [`Eviction::Oldest`], `order` lists the occupied slots by increasing `no`.
#[derive(Debug, Clone)]
pub struct DocMemory {
    pub(crate) params: MemoryParams,
    pub(crate) share: Share,
    pub(crate) slots: Vec<Option<StoredDoc>>,
    pub(crate) order: VecDeque<u32>,
    pub(crate) free: BTreeSet<u32>,
    /// By term key. The keys are hashes already; every query looks up each of its terms, so
    /// the map hashes with foldhash (seeded per process) rather than SipHash. Nothing depends
    /// on the map's order.
    pub(crate) postings: HashMap<u64, Postings>,
    pub(crate) bytes: u64,
    pub(crate) live: usize,
    /// Documents offered so far (the next `no`).
    pub(crate) offered: u64,
    /// State of the reservoir's random generator.
    pub(crate) rng: u64,
}

/// The posting list of one term: (slot, weight) of every stored document holding the term,
/// and the largest of those weights.
#[derive(Debug, Clone, Default)]
pub(crate) struct Postings {
    pub(crate) entries: Vec<(u32, f32)>,
    pub(crate) max: f32,
}

impl Postings {
    fn push(&mut self, slot: u32, w: f32) {
        self.entries.push((slot, w));
        if w > self.max {
            self.max = w;
        }
    }

    /// Remove the entries of the slots marked in `gone`; `max` stays the largest weight left.
    fn remove_slots(&mut self, gone: &[bool]) {
        self.entries.retain(|e| !gone[e.0 as usize]);
        self.max = self.entries.iter().map(|e| e.1).fold(0.0, f32::max);
    }
}

/// What one batch does to a [`DocMemory`]; see [`DocMemory::plan`].
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryPlan {
    /// Final content of every slot the batch touches, by slot.
    pub(crate) slots: BTreeMap<u32, Option<StoredDoc>>,
    /// Slots whose currently stored document is removed (evicted or overwritten).
    pub(crate) removed: BTreeSet<u32>,
    /// Oldest policy: slots leaving the front of `order`, and the batch's surviving slots in
    /// insertion order.
    pub(crate) order_pop: usize,
    pub(crate) order_push: Vec<u32>,
    pub(crate) offered: u64,
    pub(crate) rng: u64,
    pub(crate) bytes: u64,
    pub(crate) live: usize,
    pub(crate) slots_len: usize,
}

impl MemoryPlan {
    /// Documents stored by this plan.
    pub fn inserted(&self) -> usize {
        self.slots.values().filter(|d| d.is_some()).count()
    }
    /// Stored documents removed by this plan.
    pub fn evicted(&self) -> usize {
        self.removed.len()
    }
}

/// The next value of a splitmix64 generator with state `state` (the eviction's seeded
/// choices; also the test data's generator).
pub(crate) fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl DocMemory {
    /// An empty memory. Fails when the parameters are out of range.
    pub fn new(params: MemoryParams) -> Result<DocMemory, MemoryError> {
        params.validate()?;
        Ok(DocMemory {
            rng: params.seed ^ 0x6d65_6d6f_7279_0000,
            params,
            share: Share::all(),
            slots: Vec::new(),
            order: VecDeque::new(),
            free: BTreeSet::new(),
            postings: HashMap::new(),
            bytes: 0,
            live: 0,
            offered: 0,
        })
    }

    pub fn params(&self) -> &MemoryParams {
        &self.params
    }
    /// Documents stored.
    pub fn len(&self) -> usize {
        self.live
    }
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }
    /// Documents offered so far (stored or not).
    pub fn offered(&self) -> u64 {
        self.offered
    }
    /// Where the memory stands: documents offered, stored, and accounted bytes. Two memories
    /// that took in the same batches from the same state have the same mark (a replica's is
    /// checked against the leader's before their searches are combined).
    pub fn mark(&self) -> [u64; 3] {
        [self.offered, self.live as u64, self.bytes]
    }
    /// Accounted bytes: 64 per document + 20 per stored term (vector + postings). The process
    /// uses somewhat more (hash-table and vector slack).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    /// The stored documents with their slots, by slot.
    pub fn docs(&self) -> impl Iterator<Item = (u32, &StoredDoc)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, d)| d.as_ref().map(|d| (i as u32, d)))
    }

    /// Decide where a batch goes (empty vectors are skipped and do not count as offered),
    /// without changing the memory. Cost O(batch · log), independent of the stored amount.
    pub fn plan(&self, docs: &[(DocRef, &TermVector)]) -> MemoryPlan {
        let mut st = Planner {
            mem: self,
            overlay: BTreeMap::new(),
            removed: BTreeSet::new(),
            new_docs: Vec::new(),
            order_cur: 0,
            new_order: VecDeque::new(),
            freed: BTreeSet::new(),
            free_iter_skip: 0,
            slots_len: self.slots.len(),
            bytes: self.bytes,
            live: self.live,
            offered: self.offered,
            rng: self.rng,
        };
        for (r, v) in docs {
            if v.is_empty() {
                continue;
            }
            st.offer(*r, v.truncated(self.params.max_terms_per_doc));
        }
        st.finish()
    }

    /// Carry out a plan made by [`Self::plan`] on this very state. Cost O(plan + length of the
    /// posting lists of the removed documents' terms): each such list is filtered once per
    /// plan, however many of its entries the plan removes.
    pub fn apply(&mut self, plan: MemoryPlan) {
        let mut gone = vec![false; self.slots.len()];
        let mut keys: Vec<u64> = Vec::new();
        for &s in &plan.removed {
            if let Some(old) = self.slots[s as usize].take() {
                gone[s as usize] = true;
                if self.share.indexes(old.no) {
                    keys.extend(&old.vector.keys);
                }
            }
        }
        keys.sort_unstable();
        keys.dedup();
        // the lists are filtered in parallel (each on its own: the same lists as one by one)
        let mut lists: Vec<(u64, &mut Postings)> = self
            .postings
            .iter_mut()
            .filter(|(k, _)| keys.binary_search(k).is_ok())
            .map(|(&k, p)| (k, p))
            .collect();
        lists
            .par_iter_mut()
            .for_each(|(_, p)| p.remove_slots(&gone));
        let emptied: Vec<u64> = lists
            .iter()
            .filter(|(_, p)| p.entries.is_empty())
            .map(|&(k, _)| k)
            .collect();
        for k in emptied {
            self.postings.remove(&k);
        }
        self.slots.resize(plan.slots_len, None);
        for (s, mut d) in plan.slots {
            if let Some(d) = &mut d {
                if self.share.indexes(d.no) {
                    for (k, &w) in d.vector.keys.iter().zip(&d.vector.weights) {
                        self.postings.entry(*k).or_default().push(s, w);
                    }
                }
                if !self.share.keeps(d.no) {
                    d.vector = TermVector::default();
                }
                self.free.remove(&s);
            } else {
                self.free.insert(s);
            }
            self.slots[s as usize] = d;
        }
        for s in self.slots.len() as u32..plan.slots_len as u32 {
            self.free.insert(s);
        }
        if self.params.eviction == Eviction::Oldest {
            self.order.drain(..plan.order_pop);
            self.order.extend(plan.order_push);
        }
        self.offered = plan.offered;
        self.rng = plan.rng;
        self.bytes = plan.bytes;
        self.live = plan.live;
    }

    /// `plan` then `apply`.
    pub fn insert(&mut self, docs: &[(DocRef, &TermVector)]) {
        let p = self.plan(docs);
        self.apply(p);
    }

    /// Rebuild the derived structures (postings, order, free list, bytes) from the slots.
    pub(crate) fn rebuild(&mut self) {
        self.postings.clear();
        self.free.clear();
        self.bytes = 0;
        self.live = 0;
        let mut order: Vec<(u64, u32)> = Vec::new();
        for (s, d) in self.slots.iter().enumerate() {
            match d {
                None => {
                    self.free.insert(s as u32);
                }
                Some(d) => {
                    if self.share.indexes(d.no) {
                        for (k, &w) in d.vector.keys.iter().zip(&d.vector.weights) {
                            self.postings.entry(*k).or_default().push(s as u32, w);
                        }
                    }
                    self.bytes += d.bytes();
                    self.live += 1;
                    order.push((d.no, s as u32));
                }
            }
        }
        order.sort_unstable();
        self.order = if self.params.eviction == Eviction::Oldest {
            order.into_iter().map(|o| o.1).collect()
        } else {
            VecDeque::new()
        };
    }
}

/// The simulation behind [`DocMemory::plan`]: an overlay of slot changes on the memory.
struct Planner<'a> {
    mem: &'a DocMemory,
    /// slot → index into `new_docs`, or None (emptied).
    overlay: BTreeMap<u32, Option<usize>>,
    removed: BTreeSet<u32>,
    new_docs: Vec<StoredDoc>,
    order_cur: usize,
    new_order: VecDeque<u32>,
    freed: BTreeSet<u32>,
    free_iter_skip: usize,
    slots_len: usize,
    bytes: u64,
    live: usize,
    offered: u64,
    rng: u64,
}

impl Planner<'_> {
    fn doc_at(&self, s: u32) -> Option<&StoredDoc> {
        match self.overlay.get(&s) {
            Some(Some(i)) => Some(&self.new_docs[*i]),
            Some(None) => None,
            None => self.mem.slots.get(s as usize).and_then(|d| d.as_ref()),
        }
    }

    fn evict(&mut self, s: u32) {
        let b = self.doc_at(s).map(StoredDoc::bytes);
        if let Some(b) = b {
            self.bytes -= b;
            self.live -= 1;
            if !matches!(self.overlay.get(&s), Some(Some(_))) {
                self.removed.insert(s);
            }
            self.overlay.insert(s, None);
            self.freed.insert(s);
        }
    }

    fn evict_one(&mut self) {
        match self.mem.params.eviction {
            Eviction::Oldest => {
                let s = if self.order_cur < self.mem.order.len() {
                    self.order_cur += 1;
                    self.mem.order[self.order_cur - 1]
                } else {
                    match self.new_order.pop_front() {
                        Some(s) => s,
                        None => return,
                    }
                };
                self.evict(s);
            }
            Eviction::Reservoir => {
                if self.live == 0 {
                    return;
                }
                loop {
                    let s = (splitmix(&mut self.rng) % self.slots_len as u64) as u32;
                    if self.doc_at(s).is_some() {
                        self.evict(s);
                        return;
                    }
                }
            }
        }
    }

    fn alloc(&mut self) -> u32 {
        // smallest free slot: freed in this batch, or free before it
        let old_free = self.mem.free.iter().nth(self.free_iter_skip).copied();
        let local = self.freed.first().copied();
        match (old_free, local) {
            (Some(a), Some(b)) if a < b => {
                self.free_iter_skip += 1;
                a
            }
            (_, Some(b)) => {
                self.freed.pop_first();
                b
            }
            (Some(a), None) => {
                self.free_iter_skip += 1;
                a
            }
            (None, None) => {
                self.slots_len += 1;
                (self.slots_len - 1) as u32
            }
        }
    }

    fn offer(&mut self, reference: DocRef, vector: TermVector) {
        let p = &self.mem.params;
        let no = self.offered;
        self.offered += 1;
        let doc = StoredDoc::new(no, reference, vector);
        let size = doc.bytes();
        if p.eviction == Eviction::Reservoir && self.live >= p.max_docs {
            // keep the n-th offered document with probability max_docs / n
            let r = splitmix(&mut self.rng) % self.offered;
            if r >= p.max_docs as u64 {
                return;
            }
        }
        while self.live > 0 && (self.live >= p.max_docs || self.bytes + size > p.max_bytes) {
            self.evict_one();
        }
        let s = self.alloc();
        if self.mem.slots.get(s as usize).is_some_and(|d| d.is_some())
            && !self.overlay.contains_key(&s)
        {
            self.removed.insert(s);
        }
        self.new_docs.push(doc);
        self.overlay.insert(s, Some(self.new_docs.len() - 1));
        self.new_order.push_back(s);
        self.bytes += size;
        self.live += 1;
    }

    fn finish(self) -> MemoryPlan {
        let slots = self
            .overlay
            .iter()
            .map(|(&s, d)| (s, d.map(|i| self.new_docs[i].clone())))
            .collect();
        MemoryPlan {
            slots,
            removed: self.removed,
            order_pop: self.order_cur,
            order_push: self.new_order.into_iter().collect(),
            offered: self.offered,
            rng: self.rng,
            bytes: self.bytes,
            live: self.live,
            slots_len: self.slots_len,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vecs(n: usize, seed: u64) -> Vec<TermVector> {
        let mut st = seed;
        (0..n)
            .map(|_| {
                let len = 1 + (splitmix(&mut st) % 12) as usize;
                TermVector::from_pairs(
                    (0..len)
                        .map(|_| (splitmix(&mut st) % 40, 1.0 + (splitmix(&mut st) % 5) as f64))
                        .collect(),
                )
            })
            .collect()
    }

    fn r(i: usize) -> DocRef {
        DocRef {
            timestep: i as u64 / 10,
            seq: i as u32,
            time: i as i64,
        }
    }

    fn dot(a: &TermVector, b: &TermVector) -> f64 {
        let mut s = 0.0;
        for (k, &w) in a.keys.iter().zip(&a.weights) {
            if let Ok(j) = b.keys.binary_search(k) {
                s += w as f64 * b.weights[j] as f64;
            }
        }
        s
    }

    /// Brute force over the stored documents (the oracle).
    fn brute(m: &DocMemory, q: &TermVector) -> Option<f64> {
        m.docs()
            .map(|(_, d)| dot(q, &d.vector))
            .filter(|&c| c > 0.0)
            .fold(None, |b: Option<f64>, c| Some(b.map_or(c, |b| b.max(c))))
    }

    fn params(max_docs: usize, eviction: Eviction) -> MemoryParams {
        MemoryParams {
            max_docs,
            eviction,
            ..Default::default()
        }
    }

    #[test]
    fn exact_search_matches_brute_force_under_both_policies() {
        for ev in [Eviction::Oldest, Eviction::Reservoir] {
            let mut m = DocMemory::new(params(25, ev)).unwrap();
            let docs = vecs(120, 7);
            for (b, chunk) in docs.chunks(13).enumerate() {
                let batch: Vec<(DocRef, &TermVector)> = chunk
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (r(b * 13 + i), v))
                    .collect();
                m.insert(&batch);
                assert!(m.len() <= 25);
                let qs = vecs(10, b as u64 + 100);
                let refs: Vec<&TermVector> = qs.iter().collect();
                for (q, got) in qs.iter().zip(m.nearest_batch(&refs)) {
                    let want = brute(&m, q);
                    match (got, want) {
                        (None, None) => {}
                        (Some(g), Some(w)) => assert!((g.cosine() - w).abs() < 1e-6, "{ev:?}"),
                        (g, w) => panic!("{ev:?}: {g:?} vs {w:?}"),
                    }
                }
            }
            assert_eq!(m.offered(), 120);
            // postings hold exactly the stored entries
            let entries: usize = m.postings.values().map(|p| p.entries.len()).sum();
            let stored: usize = m.docs().map(|(_, d)| d.vector.len()).sum();
            assert_eq!(entries, stored);
            for p in m.postings.values() {
                let max = p.entries.iter().map(|e| e.1).fold(0.0, f32::max);
                assert_eq!(p.max, max, "a list's bound is its largest weight");
                for &(s, w) in &p.entries {
                    let d = &m.slots[s as usize].as_ref().unwrap().vector;
                    assert!(d.weights.contains(&w));
                }
            }
        }
    }

    #[test]
    fn oldest_policy_keeps_the_most_recent_window() {
        let mut m = DocMemory::new(params(10, Eviction::Oldest)).unwrap();
        let docs = vecs(37, 3);
        for (b, chunk) in docs.chunks(4).enumerate() {
            let batch: Vec<_> = chunk
                .iter()
                .enumerate()
                .map(|(i, v)| (r(b * 4 + i), v))
                .collect();
            m.insert(&batch);
        }
        let mut kept: Vec<u64> = m.docs().map(|(_, d)| d.no).collect();
        kept.sort_unstable();
        assert_eq!(kept, (27..37).collect::<Vec<u64>>());
        // a batch larger than the cap keeps its own last documents
        let big = vecs(15, 4);
        let batch: Vec<_> = big
            .iter()
            .enumerate()
            .map(|(i, v)| (r(100 + i), v))
            .collect();
        m.insert(&batch);
        let mut kept: Vec<u64> = m.docs().map(|(_, d)| d.no).collect();
        kept.sort_unstable();
        assert_eq!(kept, (42..52).collect::<Vec<u64>>());
        assert_eq!(m.slots.len(), 10, "slots are reused");
    }

    #[test]
    fn byte_cap_is_respected() {
        let p = MemoryParams {
            max_docs: 1_000_000,
            max_bytes: 1 << 20,
            ..Default::default()
        };
        let mut m = DocMemory::new(p).unwrap();
        let v = TermVector::from_pairs((0..200).map(|k| (k, 1.0)).collect());
        let batch: Vec<_> = (0..400).map(|i| (r(i), &v)).collect();
        m.insert(&batch);
        assert!(m.bytes() <= 1 << 20);
        assert_eq!(
            m.len() as u64,
            (1u64 << 20) / StoredDoc::new(0, r(0), v).bytes()
        );
    }

    #[test]
    fn reservoir_keeps_a_roughly_uniform_sample() {
        let mut m = DocMemory::new(params(200, Eviction::Reservoir)).unwrap();
        let v = TermVector::from_pairs(vec![(1, 1.0)]);
        for b in 0..20 {
            let batch: Vec<_> = (0..100).map(|i| (r(b * 100 + i), &v)).collect();
            m.insert(&batch);
        }
        assert_eq!(m.len(), 200);
        // uniform over 2000 offered: about 100 of the kept are from the first half
        let first_half = m.docs().filter(|(_, d)| d.no < 1000).count();
        assert!((70..=130).contains(&first_half), "{first_half}");
    }

    #[test]
    fn empty_memory_and_empty_query_have_no_neighbour() {
        let mut m = DocMemory::new(MemoryParams::default()).unwrap();
        let q = TermVector::from_pairs(vec![(1, 1.0)]);
        assert_eq!(m.nearest(&q), None);
        m.insert(&[(r(0), &q), (r(1), &TermVector::default())]);
        assert_eq!(m.len(), 1, "empty vectors are not stored");
        assert_eq!(m.nearest(&TermVector::default()), None);
        let n = m.nearest(&q).unwrap();
        assert_eq!(n.reference, r(0));
        assert!((n.cosine() - 1.0).abs() < 1e-6);
    }
}
