//! Keywords that stand out against the past: class-based TF-IDF (as BERTopic's c-TF-IDF,
//! with the past as the background). A term's weight in a group of documents is its document
//! frequency in the group × ln(N / (1 + df)), N and df counted over every document before the
//! batch, so a term frequent in the past (newsgroup boilerplate: "writes", "article") weighs
//! little however common it is in the group.

use std::collections::HashMap;

use crate::text::{SparseDoc, Vocabulary};

/// The documents before a batch, as the vocabulary after observing it remembers them: its
/// document frequencies minus the batch's own.
pub struct Past<'a> {
    vocab: &'a Vocabulary,
    /// The batch's document frequency of each term id of `vocab` (a dense table: every
    /// document's every term is looked up, several times).
    batch_df: Vec<u32>,
    docs: u64,
}

impl<'a> Past<'a> {
    /// The past of the batch `vectors` (ids in `vocab`, which has observed them).
    pub fn new(vocab: &'a Vocabulary, vectors: &[SparseDoc]) -> Past<'a> {
        let mut batch_df = vec![0u32; vocab.len()];
        let mut counted = 0u64;
        for v in vectors.iter().filter(|v| !v.is_empty()) {
            counted += 1;
            for &id in &v.ids {
                if let Some(c) = batch_df.get_mut(id as usize) {
                    *c += 1;
                }
            }
        }
        Past {
            vocab,
            batch_df,
            docs: vocab.docs_seen().saturating_sub(counted),
        }
    }

    /// Documents before the batch.
    pub fn docs(&self) -> u64 {
        self.docs
    }

    /// Documents before the batch that contain term `id`.
    pub fn df(&self, id: u32) -> u64 {
        let here = self.batch_df.get(id as usize).copied().unwrap_or(0);
        self.vocab.df(id).saturating_sub(u64::from(here))
    }

    /// ln(N / (1 + df)) of term `id`, ≥ 0 (0 without a past).
    pub fn idf(&self, id: u32) -> f64 {
        let n = self.docs as f64;
        if n < 1.0 {
            return 0.0;
        }
        (n / (1.0 + self.df(id) as f64)).ln().max(0.0)
    }

    /// The factor that turns a batch vector's weight of term `id` (TF × the smoothed IDF of
    /// [`crate::text::tfidf_l1`], counted with the batch) into TF × [`Self::idf`]: a term the
    /// batch brings in many documents keeps the weight its rarity in the past gives it.
    pub fn reweight(&self, id: u32) -> f64 {
        let n = self.vocab.docs_seen() as f64;
        let now = ((1.0 + n) / (1.0 + self.vocab.df(id) as f64)).ln() + 1.0;
        self.idf(id) / now.max(f64::MIN_POSITIVE)
    }
}

/// The `top` keywords of a group of documents: (term id, group df × [`Past::idf`]), largest
/// first, ties by lower id. A term must occur in at least two of the group's documents (one
/// document's peculiar words say nothing of the group), unless the group has one document.
pub fn keywords(members: &[&SparseDoc], past: &Past, top: usize) -> Vec<(u32, f64)> {
    let mut df: HashMap<u32, u32> = HashMap::new();
    for d in members {
        for &id in &d.ids {
            *df.entry(id).or_default() += 1;
        }
    }
    let least = if members.len() >= 2 { 2 } else { 1 };
    let mut scored: Vec<(u32, f64)> = df
        .into_iter()
        .filter(|&(_, c)| c >= least)
        .map(|(id, c)| (id, c as f64 * past.idf(id)))
        .filter(|&(_, s)| s > 0.0)
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(top);
    scored
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::{tfidf_l1, Tokenizer};

    fn observe(vocab: &mut Vocabulary, texts: &[&str], t: u64) -> Vec<SparseDoc> {
        let tok = Tokenizer::new(2, 40, true, &[]);
        let toks: Vec<Vec<String>> = texts.iter().map(|s| tok.tokens(s)).collect();
        let (counts, _) = vocab.observe(&toks, t);
        counts
            .iter()
            .map(|c| tfidf_l1(c, |id| vocab.df(id), vocab.docs_seen()))
            .collect()
    }

    /// The past excludes the batch; a word every past document had ranks below a word of the
    /// group no past document had, though the group uses both equally; a word of one member
    /// is no keyword.
    #[test]
    fn keywords_stand_out_against_the_past() {
        let mut vocab = Vocabulary::new(1000);
        let past: Vec<String> = (0..20)
            .map(|i| format!("writes article item{i} thanks"))
            .collect();
        let past: Vec<&str> = past.iter().map(|s| s.as_str()).collect();
        observe(&mut vocab, &past, 0);
        let batch = [
            "writes volcano eruption ash",
            "writes volcano eruption lava",
            "writes volcano eruption unique",
            "thanks article item3",
        ];
        let vecs = observe(&mut vocab, &batch, 1);
        let p = Past::new(&vocab, &vecs);
        assert_eq!(p.docs(), 20);
        let writes = vocab.id("writes").unwrap();
        assert_eq!(p.df(writes), 20);
        assert_eq!(p.df(vocab.id("volcano").unwrap()), 0);
        let group: Vec<&SparseDoc> = vecs[..3].iter().collect();
        let kw = keywords(&group, &p, 10);
        let names: Vec<&str> = kw.iter().map(|k| vocab.term(k.0)).collect();
        let mut top2 = names[..2].to_vec();
        top2.sort();
        assert_eq!(top2, ["eruption", "volcano"]);
        assert!(!names.contains(&"lava") && !names.contains(&"unique"));
        assert!(
            !names.contains(&"writes"),
            "every past document had it: idf 0"
        );
        // a word of the past weighs by how rare it was: "item3" (one earlier document)
        // outranks "article" (every one)
        let old: Vec<&SparseDoc> = vec![&vecs[3], &vecs[3]];
        let kw_old: Vec<&str> = keywords(&old, &p, 10)
            .iter()
            .map(|k| vocab.term(k.0))
            .collect();
        assert_eq!(kw_old.first(), Some(&"item3"));
        assert!(!kw_old.contains(&"article"));
    }
}
