use serde::{Deserialize, Serialize};

/// A document as a sparse column: strictly increasing term ids with positive weights.
///
/// Invariant (for vectors built by [`tfidf_l1`]): ids are sorted and distinct, every value is
/// finite and > 0, and the values sum to 1 unless the document is empty (no entries).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SparseDoc {
    pub ids: Vec<u32>,
    pub vals: Vec<f64>,
}

impl SparseDoc {
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
    pub fn nnz(&self) -> usize {
        self.ids.len()
    }
    /// ℓ1 norm of the vector (1 for a non-empty TF-IDF document, 0 for an empty one).
    pub fn l1(&self) -> f64 {
        self.vals.iter().map(|v| v.abs()).sum()
    }
}

/// TF-IDF weights of a document, normalised to unit ℓ1 norm.
///
/// `counts` are (term id, raw count) pairs with distinct ids, in any order; `df(id)` is the
/// number of documents seen so far that contain the term (≥ 1 for a term of this document) and
/// `n_docs` the number of documents seen so far. Weight = count · idf with the smoothed
/// `idf = ln((1 + n_docs) / (1 + df)) + 1`, which is ≥ 1 and finite, so every kept term has a
/// positive weight. An empty `counts` gives an empty vector (never NaN).
pub fn tfidf_l1(counts: &[(u32, u32)], df: impl Fn(u32) -> u64, n_docs: u64) -> SparseDoc {
    let mut pairs: Vec<(u32, f64)> = counts
        .iter()
        .filter(|&&(_, c)| c > 0)
        .map(|&(id, c)| {
            let idf = ((1.0 + n_docs as f64) / (1.0 + df(id) as f64)).ln() + 1.0;
            (id, c as f64 * idf.max(f64::MIN_POSITIVE))
        })
        .collect();
    pairs.sort_unstable_by_key(|p| p.0);
    let total: f64 = pairs.iter().map(|p| p.1).sum();
    if pairs.is_empty() || total.is_nan() || total <= 0.0 || !total.is_finite() {
        return SparseDoc::default();
    }
    SparseDoc {
        ids: pairs.iter().map(|p| p.0).collect(),
        vals: pairs.iter().map(|p| p.1 / total).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_l1_sorted_and_rarer_terms_weigh_more() {
        let v = tfidf_l1(
            &[(7, 1), (2, 1), (5, 2)],
            |id| if id == 7 { 1 } else { 9 },
            10,
        );
        assert_eq!(v.ids, vec![2, 5, 7]);
        assert!((v.l1() - 1.0).abs() < 1e-12);
        assert!(v.vals[2] > v.vals[0], "rare term 7 outweighs common term 2");
        assert!((v.vals[1] - 2.0 * v.vals[0]).abs() < 1e-12, "tf is linear");
    }

    #[test]
    fn empty_counts_give_empty_vector() {
        let v = tfidf_l1(&[], |_| 1, 0);
        assert!(v.is_empty());
        assert_eq!(v.l1(), 0.0);
    }
}
