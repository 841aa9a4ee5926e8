use foldhash::{HashMap, HashMapExt};

use rayon::prelude::*;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};

use super::terms::{copy_with_room, Terms};

/// A document's distinct term resolved against a vocabulary ([`Vocabulary::resolve`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Term {
    /// The vocabulary's id of the term.
    Known(u32),
    /// A term the vocabulary does not hold.
    New(String),
}

/// Marker for "this row was evicted" in [`Remap::map`].
pub const EVICTED: u32 = u32::MAX;

/// A growing, bounded vocabulary: term ↔ id, document frequency and the timestep each term was
/// last seen.
///
/// Invariants: ids are `0..len()` with no gaps; `df[id] ≥ 1` for every id; `len() ≤ max_terms`
/// after every [`Vocabulary::observe`].
///
/// Bound policy: new terms are admitted on first sight. When an observation leaves more than
/// `max_terms` terms, terms are evicted in order of (document frequency, last seen timestep, id),
/// ascending — rare and stale terms first — until 90 % of `max_terms` remain. Terms of the batch
/// being observed are evicted only if the older terms do not suffice (a single batch with more
/// distinct terms than the bound); their occurrences are then dropped from that batch. Remaining
/// ids are compacted in their old order, and the caller gets a [`Remap`] to apply to every matrix
/// indexed by term.
///
/// The terms are interned (their text in one buffer, a table of ids to find them): cloning a
/// vocabulary, once per step, copies a few flat buffers and visits no term. Each term's memory
/// key ([`term_key`](crate::memory::term_key)) is kept beside it, so that a batch's vectors are
/// keyed for the document memory without reading or hashing the strings again.
#[derive(Debug, Deserialize)]
#[serde(try_from = "VocabRepr")]
pub struct Vocabulary {
    /// The terms and their keys (the keys derived, not stored).
    terms: Terms,
    df: Vec<u64>,
    last_seen: Vec<u64>,
    docs_seen: u64,
    max_terms: usize,
}

/// The copy a step makes: every buffer with room for the batch's new terms (the table of ids
/// is copied as it is).
impl Clone for Vocabulary {
    fn clone(&self) -> Vocabulary {
        Vocabulary {
            terms: self.terms.clone(),
            df: copy_with_room(&self.df),
            last_seen: copy_with_room(&self.last_seen),
            docs_seen: self.docs_seen,
            max_terms: self.max_terms,
        }
    }
}

/// The stored form: the fields of [`VocabRepr`], written from the vocabulary's own fields
/// (no copy of the terms).
impl Serialize for Vocabulary {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        struct Texts<'a>(&'a Terms);
        impl Serialize for Texts<'_> {
            fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
                ser.collect_seq(self.0.iter())
            }
        }
        let mut st = ser.serialize_struct("VocabRepr", 5)?;
        st.serialize_field("terms", &Texts(&self.terms))?;
        st.serialize_field("df", &self.df)?;
        st.serialize_field("last_seen", &self.last_seen)?;
        st.serialize_field("docs_seen", &self.docs_seen)?;
        st.serialize_field("max_terms", &self.max_terms)?;
        st.end()
    }
}

#[derive(Deserialize)]
struct VocabRepr {
    terms: Vec<String>,
    df: Vec<u64>,
    last_seen: Vec<u64>,
    docs_seen: u64,
    max_terms: usize,
}

/// A stored vocabulary is refused unless it has one document frequency and one last-seen
/// timestep per term and no term twice (every id would move after a repeated term).
impl TryFrom<VocabRepr> for Vocabulary {
    type Error = String;
    fn try_from(r: VocabRepr) -> Result<Self, String> {
        if r.df.len() != r.terms.len() || r.last_seen.len() != r.terms.len() {
            return Err(format!(
                "the stored vocabulary has {} terms, {} document frequencies and {} last-seen \
                 timesteps",
                r.terms.len(),
                r.df.len(),
                r.last_seen.len()
            ));
        }
        let mut terms = Terms::default();
        for t in &r.terms {
            terms.push_new(t)?;
        }
        Ok(Vocabulary {
            terms,
            df: r.df,
            last_seen: r.last_seen,
            docs_seen: r.docs_seen,
            max_terms: r.max_terms,
        })
    }
}

/// How term ids changed in one observation. Rows `0..old_len` of a term-indexed matrix move to
/// `map[row]` (or are dropped when it is [`EVICTED`]); the matrix then has `new_len` rows and
/// every row not filled from an old row is a new term, initialised to zero.
#[derive(Debug, Clone, PartialEq)]
pub struct Remap {
    pub old_len: usize,
    pub new_len: usize,
    /// `None` means the identity on `0..old_len`.
    pub map: Option<Vec<u32>>,
}

impl Remap {
    /// The new id of old row `r`, if it survives.
    pub fn get(&self, r: usize) -> Option<usize> {
        match &self.map {
            None => Some(r),
            Some(m) => (m[r] != EVICTED).then_some(m[r] as usize),
        }
    }

    /// Per new id, whether its term is new: no old id maps to it (the term was not in the
    /// vocabulary before the observation). O(new_len + old_len).
    pub fn new_ids(&self) -> Vec<bool> {
        let mut new = vec![true; self.new_len];
        for r in 0..self.old_len {
            if let Some(nr) = self.get(r) {
                new[nr] = false;
            }
        }
        new
    }
}

/// What one observation did to the vocabulary.
#[derive(Debug, Clone)]
pub struct VocabChange {
    pub remap: Remap,
    /// Terms seen for the first time in this observation (and kept).
    pub added: usize,
    /// Terms removed by the size bound.
    pub evicted: usize,
}

impl Vocabulary {
    /// An empty vocabulary holding at most `max_terms` terms (`max_terms ≥ 1`).
    pub fn new(max_terms: usize) -> Self {
        Vocabulary {
            terms: Terms::default(),
            df: Vec::new(),
            last_seen: Vec::new(),
            docs_seen: 0,
            max_terms: max_terms.max(1),
        }
    }

    pub fn len(&self) -> usize {
        self.terms.len()
    }
    pub fn is_empty(&self) -> bool {
        self.terms.len() == 0
    }
    pub fn max_terms(&self) -> usize {
        self.max_terms
    }
    /// Number of non-empty documents observed so far.
    pub fn docs_seen(&self) -> u64 {
        self.docs_seen
    }
    pub fn id(&self, term: &str) -> Option<u32> {
        self.terms.find(term)
    }
    pub fn term(&self, id: u32) -> &str {
        self.terms.get(id)
    }
    /// The document memory's key of term `id`: `term_key(self.term(id))`.
    pub fn key(&self, id: u32) -> u64 {
        self.terms.key(id)
    }
    pub fn df(&self, id: u32) -> u64 {
        self.df[id as usize]
    }

    /// Every term with its document frequency and last-seen timestep, in id order.
    pub fn entries(&self) -> impl Iterator<Item = (&str, u64, u64)> + '_ {
        self.terms
            .iter()
            .zip(&self.df)
            .zip(&self.last_seen)
            .map(|((t, &d), &l)| (t, d, l))
    }

    /// Rebuild a vocabulary from [`Vocabulary::entries`]. Fails on a duplicate term or a zero
    /// document frequency.
    pub fn from_entries(
        entries: Vec<(String, u64, u64)>,
        docs_seen: u64,
        max_terms: usize,
    ) -> Result<Vocabulary, String> {
        let mut v = Vocabulary::new(max_terms);
        for (t, d, l) in entries {
            if d == 0 {
                return Err(format!("term `{t}` has document frequency 0"));
            }
            v.terms.push_new(&t)?;
            v.df.push(d);
            v.last_seen.push(l);
        }
        v.docs_seen = docs_seen;
        Ok(v)
    }

    /// Term counts of each document in terms of the *current* ids, without changing anything;
    /// unknown tokens are skipped. Pairs are sorted by id.
    pub fn counts(&self, tokens: &[String]) -> Vec<(u32, u32)> {
        let mut c: HashMap<u32, u32> = HashMap::new();
        for t in tokens {
            if let Some(id) = self.id(t) {
                *c.entry(id).or_insert(0) += 1;
            }
        }
        let mut v: Vec<(u32, u32)> = c.into_iter().collect();
        v.sort_unstable();
        v
    }

    /// A document's distinct tokens with their counts, each resolved against this vocabulary:
    /// its id when the vocabulary holds it, else the term. The known terms come first, by
    /// increasing id, then the new ones in order of first occurrence (so that
    /// [`Self::observe_resolved`] sorts only the new ones). Read only, so documents can be
    /// resolved anywhere (in parallel, on other replicas).
    pub fn resolve(&self, tokens: &[String]) -> Vec<(Term, u32)> {
        let mut seen: HashMap<&str, usize> = HashMap::with_capacity(tokens.len());
        let mut out: Vec<(&str, u32)> = Vec::new();
        for t in tokens {
            match seen.get(t.as_str()) {
                Some(&i) => out[i].1 += 1,
                None => {
                    seen.insert(t, out.len());
                    out.push((t, 1));
                }
            }
        }
        let mut known: Vec<(u32, u32)> = Vec::with_capacity(out.len());
        let mut new: Vec<(Term, u32)> = Vec::new();
        for (t, c) in out {
            match self.id(t) {
                Some(id) => known.push((id, c)),
                None => new.push((Term::New(t.to_string()), c)),
            }
        }
        known.sort_unstable();
        let mut terms: Vec<(Term, u32)> = Vec::with_capacity(known.len() + new.len());
        terms.extend(known.into_iter().map(|(id, c)| (Term::Known(id), c)));
        terms.extend(new);
        terms
    }

    /// Observe one batch of tokenised documents at `timestep`: admit new terms, count document
    /// frequencies, enforce the size bound. Returns each document's (id, count) pairs in the
    /// ids valid *after* the observation (sorted by id), and the id change to apply to
    /// term-indexed matrices.
    pub fn observe(
        &mut self,
        docs: &[Vec<String>],
        timestep: u64,
    ) -> (Vec<Vec<(u32, u32)>>, VocabChange) {
        let resolved: Vec<Vec<(Term, u32)>> = docs.par_iter().map(|t| self.resolve(t)).collect();
        self.observe_resolved(resolved, timestep)
    }

    /// [`Self::observe`] of documents already resolved against this vocabulary
    /// ([`Self::resolve`]), with the same result: in document order, new terms get the next id
    /// in order of their place in the document's list (for [`Self::resolve`]'s lists, of first
    /// occurrence, as if the tokens were read one by one). Every known id must be `< len()`
    /// (panics otherwise). A document's pairs come out sorted by id whatever the order of its
    /// list; a list in [`Self::resolve`]'s order (known ids ascending, then the new terms) is
    /// sorted by its new terms alone.
    pub fn observe_resolved(
        &mut self,
        docs: Vec<Vec<(Term, u32)>>,
        timestep: u64,
    ) -> (Vec<Vec<(u32, u32)>>, VocabChange) {
        let old_len = self.len();
        let mut per_doc: Vec<Vec<(u32, u32)>> = Vec::with_capacity(docs.len());
        for terms in docs {
            let mut v: Vec<(u32, u32)> = Vec::with_capacity(terms.len());
            for (t, c) in terms {
                let id = match t {
                    Term::Known(id) => id,
                    // an earlier document of this batch may have added it
                    Term::New(t) => match self.terms.push(&t) {
                        Err(id) => id,
                        Ok(id) => {
                            self.df.push(0);
                            self.last_seen.push(timestep);
                            id
                        }
                    },
                };
                self.df[id as usize] += 1;
                self.last_seen[id as usize] = timestep;
                v.push((id, c));
            }
            if !v.is_empty() {
                self.docs_seen += 1;
            }
            per_doc.push(v);
        }
        per_doc.par_iter_mut().for_each(|v| sort_ids(v));
        let before_evict = self.len();
        let mut change = VocabChange {
            remap: Remap {
                old_len,
                new_len: before_evict,
                map: None,
            },
            added: before_evict - old_len,
            evicted: 0,
        };
        if before_evict > self.max_terms {
            let map = self.evict(timestep);
            for v in per_doc.iter_mut() {
                v.retain_mut(|(id, _)| {
                    let n = map[*id as usize];
                    *id = n;
                    n != EVICTED
                });
            }
            change.evicted = before_evict - self.len();
            change.added = map[old_len..].iter().filter(|&&n| n != EVICTED).count();
            change.remap = Remap {
                old_len,
                new_len: self.len(),
                map: Some(map[..old_len].to_vec()),
            };
        }
        (per_doc, change)
    }

    /// Evict down to the low-water mark; returns the map old id → new id (or EVICTED) over all
    /// current ids.
    fn evict(&mut self, timestep: u64) -> Vec<u32> {
        let n = self.len();
        let low_water = self.max_terms - self.max_terms / 10;
        let to_remove = n.saturating_sub(low_water.max(1));
        let mut order: Vec<u32> = (0..n as u32).collect();
        // Older terms first (not seen in this batch), then by rarity and staleness; the key
        // ends with the id, so the first `to_remove` form one set however they are found: a
        // selection (O(n)) instead of a sort
        let key = |&id: &u32| {
            let i = id as usize;
            (
                self.last_seen[i] == timestep,
                self.df[i],
                self.last_seen[i],
                id,
            )
        };
        if to_remove > 0 && to_remove < n {
            order.select_nth_unstable_by_key(to_remove, key);
        }
        let mut keep = vec![true; n];
        for &id in order.iter().take(to_remove) {
            keep[id as usize] = false;
        }
        let mut map = vec![EVICTED; n];
        let mut next = 0u32;
        for i in 0..n {
            if keep[i] {
                map[i] = next;
                next += 1;
            }
        }
        fn retain<T>(v: &mut Vec<T>, keep: &[bool]) {
            let mut i = 0;
            v.retain(|_| {
                let k = keep[i];
                i += 1;
                k
            });
        }
        self.terms.retain(&map);
        retain(&mut self.df, &keep);
        retain(&mut self.last_seen, &keep);
        map
    }
}

/// Sort a document's (id, count) pairs by id (ids distinct): only the part after its
/// ascending head, then the whole only when the two parts overlap. A list whose known ids
/// come first and ascending and whose new ids (all past the known ones) follow costs a sort
/// of the new ones.
fn sort_ids(v: &mut [(u32, u32)]) {
    let head = 1 + v.windows(2).take_while(|w| w[0].0 < w[1].0).count();
    if head >= v.len() {
        return;
    }
    v[head..].sort_unstable();
    if v[head - 1].0 >= v[head].0 {
        v.sort_unstable();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::term_key;
    use std::collections::HashSet;

    /// A seeded linear congruential generator: 31-bit draws.
    fn lcg(seed: u64) -> impl FnMut() -> usize {
        let mut st = seed;
        move || {
            st = st
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (st >> 33) as usize
        }
    }

    fn toks(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    /// Documents resolved apart (last to first, against a copy of the vocabulary, as replicas
    /// would) and observed in batch order get the ids of reading the tokens one by one: a
    /// term new to the vocabulary gets the next id at its first occurrence in the batch,
    /// whichever document resolved it; counts and document frequencies follow.
    #[test]
    fn resolved_documents_observe_as_tokens_read_one_by_one() {
        let mut next = lcg(7u64);
        let mut v = Vocabulary::new(1000);
        let mut ids: HashMap<String, u32> = HashMap::new();
        let mut df: Vec<u64> = Vec::new();
        for t in 0..4u64 {
            let docs: Vec<Vec<String>> = (0..30)
                .map(|_| {
                    (0..next() % 9)
                        .map(|_| format!("w{}", next() % (15 + 10 * t as usize)))
                        .collect()
                })
                .collect();
            // the reference: every token read in order
            let mut want: Vec<Vec<(u32, u32)>> = Vec::new();
            for d in &docs {
                let mut counts: HashMap<u32, u32> = HashMap::new();
                for tok in d {
                    let n = ids.len() as u32;
                    let id = *ids.entry(tok.clone()).or_insert(n);
                    *counts.entry(id).or_insert(0) += 1;
                }
                let mut c: Vec<(u32, u32)> = counts.into_iter().collect();
                c.sort_unstable();
                df.resize(ids.len(), 0);
                for &(id, _) in &c {
                    df[id as usize] += 1;
                }
                want.push(c);
            }
            let copy = v.clone();
            let mut resolved: Vec<Vec<(Term, u32)>> = vec![Vec::new(); docs.len()];
            for j in (0..docs.len()).rev() {
                resolved[j] = copy.resolve(&docs[j]);
            }
            let known = resolved
                .iter()
                .flatten()
                .filter(|(t, _)| matches!(t, Term::Known(_)))
                .count();
            assert!(t == 0 || known > 0, "timestep {t}: some terms are known");
            let (got, change) = v.observe_resolved(resolved, t);
            assert_eq!(got, want, "timestep {t}");
            assert_eq!(change.remap.map, None);
            for (term, &id) in &ids {
                assert_eq!(v.id(term), Some(id), "{term}");
                assert_eq!(v.df(id), df[id as usize], "{term}");
            }
        }
    }

    /// Every id's memory key is the key of its term string.
    fn assert_keys(v: &Vocabulary) {
        for id in 0..v.len() as u32 {
            assert_eq!(v.key(id), term_key(v.term(id)), "{}", v.term(id));
        }
    }

    /// Whatever the order of a document's known terms among its new ones, the ids, counts
    /// and frequencies come out as from the list [`Vocabulary::resolve`] gives (sorted by
    /// id): the ascending head is a shortcut, not a requirement.
    #[test]
    fn observing_does_not_depend_on_where_the_known_terms_stand() {
        let mut next = lcg(11u64);
        let mut base = Vocabulary::new(1000);
        let seed: Vec<Vec<String>> = (0..20)
            .map(|_| (0..8).map(|_| format!("w{}", next() % 40)).collect())
            .collect();
        base.observe(&seed, 1);
        let docs: Vec<Vec<String>> = (0..30)
            .map(|_| {
                (0..next() % 12)
                    .map(|_| format!("w{}", next() % 70))
                    .collect()
            })
            .collect();
        let resolved: Vec<Vec<(Term, u32)>> = docs.iter().map(|d| base.resolve(d)).collect();
        for d in &resolved {
            // the layout: known ids ascending, then the new terms
            let known: Vec<u32> = d
                .iter()
                .map_while(|(t, _)| match t {
                    Term::Known(id) => Some(*id),
                    Term::New(_) => None,
                })
                .collect();
            assert!(known.windows(2).all(|w| w[0] < w[1]));
            assert!(d[known.len()..]
                .iter()
                .all(|(t, _)| matches!(t, Term::New(_))));
        }
        // the known terms moved about: reversed, and put after the new ones
        let moved: Vec<Vec<(Term, u32)>> = resolved
            .iter()
            .map(|d| {
                let (mut known, new): (Vec<_>, Vec<_>) = d
                    .iter()
                    .cloned()
                    .partition(|(t, _)| matches!(t, Term::Known(_)));
                known.reverse();
                let mut out = new;
                let at = next() % (out.len() + 1);
                out.splice(at..at, known);
                out
            })
            .collect();
        let (mut a, mut b) = (base.clone(), base.clone());
        let (want, wc) = a.observe_resolved(resolved, 2);
        let (got, gc) = b.observe_resolved(moved, 2);
        assert_eq!(got, want);
        assert!(want.iter().all(|d| d.windows(2).all(|w| w[0].0 < w[1].0)));
        assert_eq!((gc.added, gc.evicted), (wc.added, wc.evicted));
        assert_eq!(b.df, a.df);
        assert!(
            wc.added > 0 && want.iter().any(|d| d.len() > 2),
            "a test with new terms"
        );
    }

    #[test]
    fn sorting_a_documents_ids_sorts_them_whatever_their_order() {
        let mut next = lcg(5u64);
        for n in 0..40 {
            let mut ids: Vec<u32> = (0..n as u32).map(|i| i * 3 + (next() % 3) as u32).collect();
            ids.dedup();
            // an ascending head of any length, then the rest in any order
            let head = next() % (ids.len() + 1);
            let mut v: Vec<(u32, u32)> = ids.iter().map(|&i| (i, i + 1)).collect();
            for i in (head + 1..v.len()).rev() {
                let j = head + next() % (i - head + 1);
                v.swap(i, j);
            }
            if next() % 2 == 0 {
                v.reverse();
            }
            let mut want = v.clone();
            want.sort_unstable();
            sort_ids(&mut v);
            assert_eq!(v, want, "{n}");
        }
    }

    #[test]
    fn ids_are_dense_and_df_counts_documents() {
        let mut v = Vocabulary::new(100);
        let (c, ch) = v.observe(&[toks("a b a"), toks("b c"), vec![]], 0);
        assert_eq!(v.len(), 3);
        assert_eq!(ch.added, 3);
        assert_eq!(ch.remap.get(0), Some(0));
        assert_eq!(c[0], vec![(0, 2), (1, 1)]);
        assert_eq!(c[2], vec![]);
        assert_eq!(v.df(v.id("b").unwrap()), 2);
        assert_eq!(v.docs_seen(), 2, "empty documents do not count");
    }

    #[test]
    fn bound_evicts_rare_stale_terms_and_remaps() {
        let mut v = Vocabulary::new(10);
        let first: Vec<String> = (0..10).map(|i| format!("t{i}")).collect();
        v.observe(std::slice::from_ref(&first), 0);
        v.observe(&[toks("t3 t5")], 1); // t3, t5 now have df 2
        let (c, ch) = v.observe(&[toks("new1 new2 t5")], 2);
        assert!(v.len() <= 10);
        assert_eq!(v.len(), 9, "evicts down to 90% of the bound");
        // t5 (in this batch) and t3 (df 2) survive; new terms survive.
        for t in ["t3", "t5", "new1", "new2"] {
            assert!(v.id(t).is_some(), "{t} kept");
        }
        assert!(v.id("t0").is_none(), "rarest, oldest term evicted first");
        let remap = &ch.remap;
        assert_eq!(remap.old_len, 10);
        assert_eq!(remap.new_len, 9);
        assert_eq!(remap.get(0), None);
        assert_eq!(remap.get(5), v.id("t5").map(|x| x as usize));
        // the batch's counts use the new ids
        let ids: Vec<u32> = c[0].iter().map(|p| p.0).collect();
        let mut want = vec![
            v.id("new1").unwrap(),
            v.id("new2").unwrap(),
            v.id("t5").unwrap(),
        ];
        want.sort();
        assert_eq!(ids, want);
        for id in 0..v.len() as u32 {
            assert_eq!(v.id(v.term(id)), Some(id));
        }
        assert_eq!(
            v.terms.indexed(),
            v.len(),
            "no evicted term left in the index"
        );
        assert_keys(&v);
    }

    /// The selection evicts exactly the terms a full sort by (seen in this batch, df, last
    /// seen, id) puts first, with many ties in df and last seen for the id to break.
    #[test]
    fn eviction_removes_the_terms_a_full_sort_puts_first() {
        let mut next = lcg(11u64);
        let mut v = Vocabulary::new(1_000);
        for t in 0..4u64 {
            let docs: Vec<Vec<String>> = (0..40)
                .map(|_| (0..6).map(|_| format!("w{}", next() % 500)).collect())
                .collect();
            v.observe(&docs, t);
        }
        v.max_terms = 120;
        let (n, before) = (v.len(), v.clone());
        let to_remove = n - (120 - 12);
        let mut order: Vec<u32> = (0..n as u32).collect();
        order.sort_by_key(|&id| {
            let i = id as usize;
            let last = before.last_seen[i];
            (last == 3, before.df[i], last, id)
        });
        let gone: HashSet<u32> = order[..to_remove].iter().copied().collect();
        let map = v.evict(3);
        assert_eq!(v.len(), n - to_remove);
        for (id, &to) in map.iter().enumerate() {
            assert_eq!(to == EVICTED, gone.contains(&(id as u32)), "term {id}");
            if to != EVICTED {
                assert_eq!(v.term(to), before.term(id as u32));
            }
        }
        assert_keys(&v);
    }

    /// `new_ids` marks exactly the terms the vocabulary did not hold before, with and without
    /// eviction.
    #[test]
    fn new_ids_are_the_terms_not_held_before() {
        let mut v = Vocabulary::new(10);
        let batches = [
            toks("a b c d"),
            toks("c d e"),
            toks("f g h i j k"),
            toks("a l m n o p q"),
        ];
        let mut evicted = false;
        for (t, b) in batches.iter().enumerate() {
            let old = v.clone();
            let (_, ch) = v.observe(std::slice::from_ref(b), t as u64);
            evicted |= ch.evicted > 0;
            let want: Vec<bool> = (0..v.len() as u32)
                .map(|id| old.id(v.term(id)).is_none())
                .collect();
            assert_eq!(ch.remap.new_ids(), want, "batch {t}");
        }
        assert!(evicted, "the bound was reached");
    }

    #[test]
    fn a_batch_larger_than_the_bound_stays_bounded() {
        let mut v = Vocabulary::new(5);
        let big: Vec<String> = (0..20).map(|i| format!("w{i}")).collect();
        let (c, _) = v.observe(&[big], 0);
        assert!(v.len() <= 5);
        assert_eq!(c[0].len(), v.len());
    }

    #[test]
    fn serde_round_trip_rebuilds_index() {
        let mut v = Vocabulary::new(10);
        v.observe(&[toks("x y z")], 3);
        let bytes = postcard::to_stdvec(&v).unwrap();
        let w: Vocabulary = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(w.id("y"), v.id("y"));
        assert_eq!(w.len(), 3);
        assert_eq!(postcard::to_stdvec(&w).unwrap(), bytes);
        assert_keys(&w);
        let entries = w.entries().map(|(t, d, l)| (t.to_string(), d, l)).collect();
        assert_keys(&Vocabulary::from_entries(entries, w.docs_seen(), 10).unwrap());
    }

    /// The plain stored form of a vocabulary, field by field.
    #[derive(Serialize)]
    struct Plain {
        terms: Vec<String>,
        df: Vec<u64>,
        last_seen: Vec<u64>,
        docs_seen: u64,
        max_terms: usize,
    }

    fn plain(v: &Vocabulary) -> Plain {
        Plain {
            terms: v.entries().map(|(t, _, _)| t.to_string()).collect(),
            df: v.entries().map(|(_, d, _)| d).collect(),
            last_seen: v.entries().map(|(_, _, l)| l).collect(),
            docs_seen: v.docs_seen(),
            max_terms: v.max_terms(),
        }
    }

    /// After evictions the stored bytes are those of the plain form (the terms in id order),
    /// and they read back to the same ids.
    #[test]
    fn stored_form_is_the_plain_one_after_evictions() {
        let mut v = Vocabulary::new(20);
        for t in 0..6u64 {
            let docs: Vec<Vec<String>> = (0..4)
                .map(|d| toks(&format!("a{t} b{d} c{} common", (t + d) % 7)))
                .collect();
            v.observe(&docs, t);
        }
        assert!(v.len() <= 20 && v.id("common").is_some());
        let bytes = postcard::to_stdvec(&v).unwrap();
        assert_eq!(bytes, postcard::to_stdvec(&plain(&v)).unwrap());
        let w: Vocabulary = postcard::from_bytes(&bytes).unwrap();
        for id in 0..v.len() as u32 {
            assert_eq!(w.id(v.term(id)), Some(id));
        }
        assert_keys(&w);
    }

    /// A stored vocabulary with a term twice, or with fewer frequencies or timesteps than
    /// terms, is refused with what is wrong (every later id would move otherwise).
    #[test]
    fn damaged_stored_vocabularies_are_refused() {
        let mut v = Vocabulary::new(10);
        v.observe(&[toks("x y z")], 3);
        let mut twice = plain(&v);
        twice.terms[2] = "x".into();
        let err = postcard::from_bytes::<Vocabulary>(&postcard::to_stdvec(&twice).unwrap())
            .unwrap_err()
            .to_string();
        assert!(!err.is_empty());
        let repr = |p: &Plain| VocabRepr {
            terms: p.terms.clone(),
            df: p.df.clone(),
            last_seen: p.last_seen.clone(),
            docs_seen: p.docs_seen,
            max_terms: p.max_terms,
        };
        let why = Vocabulary::try_from(repr(&twice)).unwrap_err();
        assert!(why.contains("`x` appears twice"), "{why}");
        let mut short = plain(&v);
        short.df.pop();
        let why = Vocabulary::try_from(repr(&short)).unwrap_err();
        assert!(why.contains("3 terms, 2 document frequencies"), "{why}");
        assert!(Vocabulary::try_from(repr(&plain(&v))).is_ok());
    }

    /// A step observes into a copy: the original keeps its terms, ids and counts, and the copy
    /// ends as a vocabulary that observed the same batches itself.
    #[test]
    fn observing_a_copy_leaves_the_original() {
        let mut v = Vocabulary::new(12);
        v.observe(&[toks("a b c"), toks("b c d")], 0);
        let before = postcard::to_stdvec(&v).unwrap();
        let mut direct = Vocabulary::new(12);
        direct.observe(&[toks("a b c"), toks("b c d")], 0);
        let batch = [toks("c d e f g"), toks("h i j k l m")];
        let mut copy = v.clone();
        copy.observe(&batch, 1);
        direct.observe(&batch, 1);
        assert_eq!(postcard::to_stdvec(&v).unwrap(), before);
        assert_eq!(v.id("e"), None);
        assert_eq!(
            postcard::to_stdvec(&copy).unwrap(),
            postcard::to_stdvec(&direct).unwrap()
        );
        assert!(
            copy.len() < 13 && copy.id("m").is_some(),
            "the copy evicted"
        );
        assert_keys(&copy);
    }
}
