//! Measures over the whole stream rather than per timestep: the pooled AUC (one ranking of
//! every evaluated timestep's documents, what a user with one threshold over a date range
//! sees) and the quality of a method's own verdicts against the best F1 any one fixed
//! threshold reaches in hindsight.

use std::collections::BTreeMap;

use super::results::{Column, Summary, VerdictQuality};
use novad_models::metrics::auc;

/// One column's documents over the evaluated timesteps so far.
#[derive(Debug, Default)]
struct Pooled {
    /// Rounded scores of the kept (non-empty) documents, timestep after timestep.
    scores: Vec<f64>,
    labels: Vec<bool>,
    /// The method's verdicts on the same documents, when it made verdicts at every
    /// evaluated timestep.
    verdicts: Option<Vec<bool>>,
}

/// Every column's documents over the evaluated timesteps.
#[derive(Debug, Default)]
pub struct Pool {
    cols: BTreeMap<Column, Pooled>,
}

impl Pool {
    /// Add one evaluated timestep of column `c`: its kept documents' rounded `scores`, their
    /// `labels` and, when the method made them, its `verdicts` (all three of one length).
    /// A column without verdicts at one timestep has none pooled.
    pub fn add(&mut self, c: Column, scores: &[f64], labels: &[bool], verdicts: Option<&[bool]>) {
        assert_eq!(scores.len(), labels.len());
        let first = !self.cols.contains_key(&c);
        let p = self.cols.entry(c).or_default();
        p.scores.extend_from_slice(scores);
        p.labels.extend_from_slice(labels);
        p.verdicts = match (first, p.verdicts.take(), verdicts) {
            (true, _, Some(v)) => Some(v.to_vec()),
            (false, Some(mut old), Some(v)) => {
                old.extend_from_slice(v);
                Some(old)
            }
            _ => None,
        };
    }

    /// The pooled AUC of every column and the verdict quality of those with verdicts, into
    /// `s`.
    pub fn summarise(&self, s: &mut Summary) {
        for (c, p) in &self.cols {
            if let Some(a) = auc(&p.scores, &p.labels) {
                s.pooled_auc.insert(c.key().into(), a);
            }
            if let Some(v) = &p.verdicts {
                s.verdicts
                    .insert(c.key().into(), quality(v, &p.scores, &p.labels));
            }
        }
    }
}

/// The best F1 of "novel = score ≥ θ" over every θ, and the θ reaching it (the largest
/// one on ties of F1); (0, +∞) when there is no novel document.
pub fn best_f1(scores: &[f64], labels: &[bool]) -> (f64, f64) {
    let novel = labels.iter().filter(|&&l| l).count();
    if novel == 0 {
        return (0.0, f64::INFINITY);
    }
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    idx.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let (mut best, mut at) = (0.0, f64::INFINITY);
    let (mut tp, mut flagged) = (0usize, 0usize);
    let mut i = 0;
    while i < idx.len() {
        let s = scores[idx[i]];
        while i < idx.len() && scores[idx[i]] == s {
            tp += labels[idx[i]] as usize;
            flagged += 1;
            i += 1;
        }
        let f1 = 2.0 * tp as f64 / (flagged + novel) as f64;
        if f1 > best {
            (best, at) = (f1, s);
        }
    }
    (best, at)
}

/// Precision, recall and F1 of `verdicts` against `labels`, beside [`best_f1`] of `scores`.
pub fn quality(verdicts: &[bool], scores: &[f64], labels: &[bool]) -> VerdictQuality {
    let novel = labels.iter().filter(|&&l| l).count();
    let flagged = verdicts.iter().filter(|&&v| v).count();
    let tp = verdicts
        .iter()
        .zip(labels)
        .filter(|(&v, &l)| v && l)
        .count();
    let ratio = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let f1 = ratio(2 * tp, flagged + novel);
    let (best_f1, best_threshold) = best_f1(scores, labels);
    VerdictQuality {
        flagged,
        true_positives: tp,
        novel,
        precision: ratio(tp, flagged),
        recall: ratio(tp, novel),
        f1,
        best_f1,
        best_threshold,
        f1_ratio: if best_f1 > 0.0 { f1 / best_f1 } else { 0.0 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The best threshold is found by brute force over every cut, and the verdict quality
    /// counts agree with a hand count.
    #[test]
    fn best_f1_is_the_maximum_over_every_cut() {
        let mut st = 7u64;
        let mut next = || {
            st = st
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            st >> 33
        };
        for _ in 0..50 {
            let n = 5 + (next() % 40) as usize;
            let scores: Vec<f64> = (0..n).map(|_| (next() % 8) as f64 / 8.0).collect();
            let labels: Vec<bool> = (0..n).map(|_| next() % 3 == 0).collect();
            let novel = labels.iter().filter(|&&l| l).count();
            let (f, th) = best_f1(&scores, &labels);
            let mut brute: f64 = 0.0;
            for &t in &scores {
                let tp = (0..n).filter(|&j| scores[j] >= t && labels[j]).count();
                let fl = (0..n).filter(|&j| scores[j] >= t).count();
                brute = brute.max(2.0 * tp as f64 / (fl + novel) as f64);
            }
            assert!((f - brute).abs() < 1e-12, "{f} vs {brute}");
            if novel > 0 {
                let v: Vec<bool> = scores.iter().map(|&s| s >= th).collect();
                assert!((quality(&v, &scores, &labels).f1 - f).abs() < 1e-12);
            }
        }
        let q = quality(
            &[true, true, false, false],
            &[0.9, 0.8, 0.7, 0.1],
            &[true, false, true, false],
        );
        assert_eq!((q.flagged, q.true_positives, q.novel), (2, 1, 2));
        assert!((q.precision - 0.5).abs() < 1e-12 && (q.recall - 0.5).abs() < 1e-12);
        // the best cut takes the first three: 2·2 / (3 + 2)
        assert!((q.best_f1 - 0.8).abs() < 1e-12 && q.best_threshold == 0.7);
    }

    /// The pooled AUC ranks across timesteps: two timesteps each perfectly ranked on their
    /// own but on shifted scales pool to less than 1.
    #[test]
    fn pooled_auc_sees_a_shift_between_timesteps() {
        let mut pool = Pool::default();
        pool.add(Column::Nn, &[0.1, 0.2, 0.9], &[false, false, true], None);
        pool.add(Column::Nn, &[0.95, 0.96, 0.99], &[false, false, true], None);
        let mut s = Summary::default();
        pool.summarise(&mut s);
        let a = s.pooled_auc["nn"];
        // positives 0.9 and 0.99 against negatives 0.1, 0.2, 0.95, 0.96: 0.9 beats two,
        // 0.99 all four, 6 of 8 pairs (each timestep alone ranks perfectly)
        assert!((a - 6.0 / 8.0).abs() < 1e-12, "{a}");
        assert!(s.verdicts.is_empty());
    }
}
