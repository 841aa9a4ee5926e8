//! The paper's document weighting (§3): `x(d, r) = (1 + log₂ tf(d, r)) · log₂(N / df(r)) / C`
//! with C the ℓ2 norm of the row, N the number of non-empty documents seen so far and df the
//! accumulated document frequency from [`crate::text::Vocabulary`]. Terms with df below
//! `min_df` get weight 0 (one-off tokens only add noise columns to X).

use crate::text::{SparseDoc, Vocabulary};

/// The weighted, unit-ℓ2 vector of one document from its (term id, count) pairs (sorted by
/// id). Empty when no term has positive weight. Values finite and > 0.
pub fn weigh(counts: &[(u32, u32)], vocab: &Vocabulary, min_df: u64) -> SparseDoc {
    let n = vocab.docs_seen().max(1) as f64;
    let mut ids = Vec::with_capacity(counts.len());
    let mut vals = Vec::with_capacity(counts.len());
    for &(id, c) in counts {
        let df = vocab.df(id);
        if df < min_df || c == 0 {
            continue;
        }
        let idf = (n / df as f64).log2();
        let v = (1.0 + (c as f64).log2()) * idf;
        if v > 0.0 && v.is_finite() {
            ids.push(id);
            vals.push(v);
        }
    }
    let norm = vals.iter().map(|v| v * v).sum::<f64>().sqrt();
    if norm > 0.0 {
        for v in vals.iter_mut() {
            *v /= norm;
        }
    }
    SparseDoc { ids, vals }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_unit_l2_and_common_terms_weigh_nothing() {
        let mut v = Vocabulary::new(100);
        let toks = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        let (c, _) = v.observe(&[toks("a a b"), toks("a c"), toks("a b")], 0);
        let x = weigh(&c[0], &v, 1);
        // "a" occurs in every document: idf 0, dropped
        assert_eq!(x.ids, vec![v.id("b").unwrap()]);
        assert!((x.vals[0] - 1.0).abs() < 1e-12);
        let y = weigh(&c[1], &v, 2);
        assert!(y.is_empty(), "c has df 1 < min_df 2");
    }
}
