/// Exact ROC AUC of `scores` for binary `labels` (true = positive = novel): the probability that
/// a random positive outscores a random negative, ties counted ½ (Mann–Whitney U / (n⁺ n⁻)).
/// `None` when there are no positives or no negatives. Scores are compared exactly; round them
/// first if float noise should count as a tie. O(n log n).
pub fn auc(scores: &[f64], labels: &[bool]) -> Option<f64> {
    assert_eq!(scores.len(), labels.len());
    let pos = labels.iter().filter(|&&l| l).count();
    let neg = labels.len() - pos;
    if pos == 0 || neg == 0 {
        return None;
    }
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    idx.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    // midranks of tied groups
    let mut rank_sum_pos = 0.0;
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && scores[idx[j + 1]] == scores[idx[i]] {
            j += 1;
        }
        let mid = (i + j) as f64 / 2.0 + 1.0;
        for &t in &idx[i..=j] {
            if labels[t] {
                rank_sum_pos += mid;
            }
        }
        i = j + 1;
    }
    let u = rank_sum_pos - (pos * (pos + 1)) as f64 / 2.0;
    Some(u / (pos as f64 * neg as f64))
}

/// ROC curve points (false-positive rate, true-positive rate), from (0,0) to (1,1), one point per
/// distinct score threshold (descending). Monotone non-decreasing in both coordinates. Empty
/// when there are no positives or no negatives.
pub fn roc_points(scores: &[f64], labels: &[bool]) -> Vec<(f64, f64)> {
    let pos = labels.iter().filter(|&&l| l).count() as f64;
    let neg = labels.len() as f64 - pos;
    if pos == 0.0 || neg == 0.0 {
        return Vec::new();
    }
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    idx.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let mut pts = vec![(0.0, 0.0)];
    let (mut tp, mut fp) = (0.0, 0.0);
    let mut i = 0;
    while i < idx.len() {
        let s = scores[idx[i]];
        while i < idx.len() && scores[idx[i]] == s {
            if labels[idx[i]] {
                tp += 1.0;
            } else {
                fp += 1.0;
            }
            i += 1;
        }
        pts.push((fp / neg, tp / pos));
    }
    pts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed_cases() {
        assert_eq!(auc(&[0.9, 0.8, 0.1], &[true, false, false]), Some(1.0));
        assert_eq!(auc(&[0.1, 0.8, 0.9], &[true, false, false]), Some(0.0));
        // all tied: ½
        assert_eq!(auc(&[1.0; 4], &[true, true, false, false]), Some(0.5));
        // pos {0.8, 0.5}, neg {0.5, 0.2}: pairs (0.8>0.5)=1, (0.8>0.2)=1, (0.5=0.5)=½, (0.5>0.2)=1 → 3.5/4
        assert_eq!(
            auc(&[0.8, 0.5, 0.5, 0.2], &[true, true, false, false]),
            Some(0.875)
        );
        assert_eq!(auc(&[0.3, 0.4], &[true, true]), None);
        assert_eq!(auc(&[], &[]), None);
    }

    #[test]
    fn roc_is_monotone_and_ends_at_one() {
        let s = [0.9, 0.5, 0.5, 0.3, 0.1, 0.7];
        let l = [true, false, true, false, true, false];
        let r = roc_points(&s, &l);
        assert_eq!(r[0], (0.0, 0.0));
        assert_eq!(*r.last().unwrap(), (1.0, 1.0));
        for w in r.windows(2) {
            assert!(w[1].0 >= w[0].0 && w[1].1 >= w[0].1);
        }
        // trapezoid area equals the rank AUC
        let area: f64 = r
            .windows(2)
            .map(|w| (w[1].0 - w[0].0) * (w[1].1 + w[0].1) / 2.0)
            .sum();
        assert!((area - auc(&s, &l).unwrap()).abs() < 1e-12);
        assert!(roc_points(&[1.0], &[true]).is_empty());
    }
}
