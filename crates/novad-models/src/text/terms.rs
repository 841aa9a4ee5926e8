//! The terms of a vocabulary, interned: every term's text in one buffer, its id found through
//! a hash table of ids.
//!
//! A vocabulary is copied once per step (the step is a function from the model before it to
//! the model after it), so the copy must be cheap: here it is a copy of four flat buffers
//! (the text, the ends, the keys, the table of ids), with no allocation or reference count per
//! term, and dropping one is freeing them. The table places a term by foldhash of its text,
//! seeded per process as the vocabulary's map was (no output depends on the table's order).

use std::hash::BuildHasher;

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use super::vocab::EVICTED;
use crate::memory::term_key;

/// Terms by id `0..len()`, each with its document-memory key ([`term_key`]).
///
/// Invariants: `ends` is non-decreasing and `ends.last() == text.len()` (each end on a char
/// boundary); `keys[id] == term_key(term(id))`; the table holds every id exactly once, placed
/// by `hasher`'s hash of its text; no two ids spell the same term.
#[derive(Debug, Default)]
pub(super) struct Terms {
    text: String,
    ends: Vec<usize>,
    keys: Vec<u64>,
    table: HashTable<u32>,
    hasher: RandomState,
}

/// The text of term `id` in `text` cut at `ends`.
fn term_at<'a>(text: &'a str, ends: &[usize], id: u32) -> &'a str {
    let i = id as usize;
    let start = if i == 0 { 0 } else { ends[i - 1] };
    &text[start..ends[i]]
}

/// A copy of `v` with room for a sixteenth more elements, at least 1,024: a step copies the
/// vocabulary and then adds the batch's new terms, which would otherwise move every buffer
/// once more.
pub(super) fn copy_with_room<T: Clone>(v: &[T]) -> Vec<T> {
    let mut out = Vec::with_capacity(with_room(v.len(), 1024));
    out.extend_from_slice(v);
    out
}

/// `len` and a sixteenth more, at least `len + least`.
fn with_room(len: usize, least: usize) -> usize {
    len + (len / 16).max(least)
}

/// The copy a step makes: the text, the ends and the keys with room for the batch's new terms
/// (the text's room in bytes, at least 16 KiB); the table of ids as it is (it places every id
/// again by its text only when it outgrows its own capacity).
impl Clone for Terms {
    fn clone(&self) -> Terms {
        let mut text = String::with_capacity(with_room(self.text.len(), 16 * 1024));
        text.push_str(&self.text);
        Terms {
            text,
            ends: copy_with_room(&self.ends),
            keys: copy_with_room(&self.keys),
            table: self.table.clone(),
            hasher: self.hasher.clone(),
        }
    }
}

impl Terms {
    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    /// The text of term `id` (`id < len()`).
    pub(super) fn get(&self, id: u32) -> &str {
        term_at(&self.text, &self.ends, id)
    }

    /// The document-memory key of term `id` (`id < len()`).
    pub(super) fn key(&self, id: u32) -> u64 {
        self.keys[id as usize]
    }

    /// The id of `term`, if it is held.
    pub(super) fn find(&self, term: &str) -> Option<u32> {
        self.find_hashed(term, self.hasher.hash_one(term))
    }

    /// The id of `term` looked for where hash `h` places it.
    fn find_hashed(&self, term: &str, h: u64) -> Option<u32> {
        self.table.find(h, |&id| self.get(id) == term).copied()
    }

    /// [`Self::push`] of a term that must be new: the error says it appears twice.
    pub(super) fn push_new(&mut self, term: &str) -> Result<u32, String> {
        self.push(term)
            .map_err(|_| format!("term `{term}` appears twice"))
    }

    /// Add `term` with the next id and return it; `Err` with the id it has when it is held
    /// already (nothing changes then).
    pub(super) fn push(&mut self, term: &str) -> Result<u32, u32> {
        let h = self.hasher.hash_one(term);
        if let Some(id) = self.find_hashed(term, h) {
            return Err(id);
        }
        let id = self.ends.len() as u32;
        self.text.push_str(term);
        self.ends.push(self.text.len());
        self.keys.push(term_key(term));
        self.insert(h, id);
        Ok(id)
    }

    /// Put `id` into the table where hash `h` places it (a growing table places every id
    /// again by its text).
    fn insert(&mut self, h: u64, id: u32) {
        let (text, ends, hasher) = (&self.text, &self.ends, &self.hasher);
        self.table
            .insert_unique(h, id, |&i| hasher.hash_one(term_at(text, ends, i)));
    }

    /// Keep the terms `map` keeps (`map[id]`: the new id of term `id`, or [`EVICTED`]), which
    /// must number them `0..` in their old order; O(text + len): no term is hashed again.
    pub(super) fn retain(&mut self, map: &[u32]) {
        debug_assert_eq!(map.len(), self.len());
        let mut text = String::with_capacity(self.text.len());
        let mut ends = Vec::with_capacity(self.ends.len());
        let mut keys = Vec::with_capacity(self.keys.len());
        for (id, _) in map.iter().enumerate().filter(|(_, &n)| n != EVICTED) {
            debug_assert_eq!(map[id] as usize, ends.len());
            text.push_str(self.get(id as u32));
            ends.push(text.len());
            keys.push(self.keys[id]);
        }
        self.table.retain(|id| {
            let n = map[*id as usize];
            *id = n;
            n != EVICTED
        });
        self.text = text;
        self.ends = ends;
        self.keys = keys;
    }

    /// How many ids the table holds (every term's, once).
    #[cfg(test)]
    pub(super) fn indexed(&self) -> usize {
        self.table.len()
    }

    /// Every term's text, in id order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        (0..self.len() as u32).map(|id| self.get(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(words: &[&str]) -> Terms {
        let mut t = Terms::default();
        for w in words {
            t.push(w).expect("distinct");
        }
        t
    }

    /// Every term is found under its id and spelled back; a term held already is refused
    /// with its id; a prefix, an extension or an empty string of a held term is not held.
    #[test]
    fn terms_are_found_by_their_text_only() {
        let words = ["alpha", "beta", "al", "alphabet", "γάμμα", "b"];
        let mut t = terms(&words);
        for (id, w) in words.iter().enumerate() {
            assert_eq!(t.find(w), Some(id as u32));
            assert_eq!(t.get(id as u32), *w);
            assert_eq!(t.key(id as u32), term_key(w));
        }
        assert_eq!(t.push("beta"), Err(1));
        assert_eq!(t.len(), words.len());
        for absent in ["alph", "betas", "", "γάμ", "B"] {
            assert_eq!(t.find(absent), None, "{absent}");
        }
        assert_eq!(t.iter().collect::<Vec<_>>(), words);
    }

    /// Two different terms placed under the same hash (made by hand: the table is told it) are
    /// both held and told apart by their text.
    #[test]
    fn terms_sharing_a_hash_are_told_apart() {
        let mut t = terms(&["one"]);
        let h = t.hasher.hash_one("one");
        t.text.push_str("two");
        t.ends.push(t.text.len());
        t.keys.push(term_key("two"));
        t.insert(h, 1);
        assert_eq!(t.find_hashed("one", h), Some(0));
        assert_eq!(t.find_hashed("two", h), Some(1));
        assert_eq!(t.find_hashed("three", h), None);
        assert_eq!(t.find("one"), Some(0));
    }

    /// A table that grows places every id again by its text: all of many terms are found
    /// after it, in a copy too.
    #[test]
    fn terms_are_found_after_the_table_grows() {
        let mut t = Terms::default();
        let words: Vec<String> = (0..20_000).map(|i| format!("t{}", i * 7919)).collect();
        for (i, w) in words.iter().enumerate() {
            assert_eq!(t.push(w), Ok(i as u32));
        }
        let copy = t.clone();
        for (i, w) in words.iter().enumerate() {
            assert_eq!(t.find(w), Some(i as u32));
            assert_eq!(copy.find(w), Some(i as u32));
        }
    }

    /// After a retain the kept terms have their new ids, in their old order, the others are
    /// gone, and terms added after it get the next ids; a copy made before is untouched.
    #[test]
    fn retain_renumbers_the_kept_terms_in_order() {
        let words: Vec<String> = (0..500).map(|i| format!("w{i}")).collect();
        let refs: Vec<&str> = words.iter().map(String::as_str).collect();
        let mut t = terms(&refs);
        let before = t.clone();
        let keep: Vec<bool> = (0..500).map(|i| i % 3 != 1).collect();
        let mut map = vec![EVICTED; 500];
        let mut next = 0u32;
        for (i, &k) in keep.iter().enumerate() {
            if k {
                map[i] = next;
                next += 1;
            }
        }
        t.retain(&map);
        assert_eq!(t.len(), next as usize);
        for (i, w) in words.iter().enumerate() {
            if keep[i] {
                assert_eq!(t.find(w), Some(map[i]), "{w}");
                assert_eq!(t.get(map[i]), w);
                assert_eq!(t.key(map[i]), term_key(w));
            } else {
                assert_eq!(t.find(w), None, "{w}");
            }
            assert_eq!(before.find(w), Some(i as u32), "the copy keeps {w}");
        }
        assert_eq!(t.push("w1"), Ok(next));
        assert_eq!(t.push("w3"), Err(map[3]));
    }
}
