//! Turning scores into verdicts: fixed ζ, top fraction of the batch, or an adaptive quantile of
//! the (exponentially forgotten) distribution of past scores.

use serde::{Deserialize, Serialize};

/// The rule deciding which documents of a batch are novel. Documents that are empty (no known
/// term) are never novel under any rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ThresholdRule {
    /// Novel iff score > ζ (Algorithm 3).
    Fixed { zeta: f64 },
    /// The ⌈fraction · n⌉ highest-scoring non-empty documents of each batch (paper's Twitter
    /// run: 0.1). Ties are broken by position in the batch.
    TopFraction { fraction: f64 },
    /// Novel iff score > the `quantile` of past scores (the scores of earlier timesteps,
    /// including the bootstrap batch), with each past timestep's weight halved every
    /// `half_life` timesteps (0 = never forget). Needs no labels and adapts to drift.
    Adaptive { quantile: f64, half_life: f64 },
}

impl ThresholdRule {
    /// The model's own score's default: the 0.9-quantile of past scores, half-life 30.
    pub fn default_adaptive() -> Self {
        ThresholdRule::Adaptive {
            quantile: 0.9,
            half_life: 30.0,
        }
    }

    /// The calibrated hybrid detector's default: the 0.75-quantile of past scores, half-life
    /// 30, held in the hybrid's band.
    pub fn hybrid_adaptive() -> Self {
        ThresholdRule::Adaptive {
            quantile: 0.75,
            half_life: 30.0,
        }
    }
}

/// Number of histogram bins over [0, 1] (resolution 5e-4 in score).
pub const BINS: usize = 2000;

/// The persisted distribution of past scores: a weighted histogram over [0, 1]. Scores outside
/// [0, 1] are clamped into the end bins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreHistory {
    pub weights: Vec<f64>,
    pub total: f64,
}

impl Default for ScoreHistory {
    fn default() -> Self {
        ScoreHistory {
            weights: vec![0.0; BINS],
            total: 0.0,
        }
    }
}

impl ScoreHistory {
    fn bin(score: f64) -> usize {
        let b = (score.clamp(0.0, 1.0) * BINS as f64) as usize;
        b.min(BINS - 1)
    }

    /// Forget (multiply every weight by `0.5^(1/half_life)`), then add one unit per score.
    pub fn update(&mut self, scores: &[f64], half_life: f64) {
        if half_life > 0.0 {
            let f = 0.5f64.powf(1.0 / half_life);
            self.weights.iter_mut().for_each(|w| *w *= f);
        }
        for &s in scores {
            self.weights[Self::bin(s)] += 1.0;
        }
        self.total = self.weights.iter().sum();
    }

    /// The upper edge of the bin where the cumulative weight first reaches q · total; `None`
    /// when there is no history.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.total.is_nan() || self.total <= 0.0 {
            return None;
        }
        let target = q.clamp(0.0, 1.0) * self.total;
        let mut cum = 0.0;
        for (b, &w) in self.weights.iter().enumerate() {
            cum += w;
            if cum >= target && cum > 0.0 {
                return Some((b + 1) as f64 / BINS as f64);
            }
        }
        Some(1.0)
    }
}

/// Decide novelty for one batch. `scores[j]` is document j's score, `eligible[j]` is false for
/// empty documents. Returns the verdicts and the effective threshold: for `Fixed` and
/// `Adaptive` the novel documents are those with score > threshold; for `TopFraction` it is
/// the smallest selected score (+∞ when nothing is selected).
///
/// The history is *not* updated here: call [`ScoreHistory::update`] after deciding, so a
/// batch is judged only against the past.
pub fn decide(
    rule: &ThresholdRule,
    history: &ScoreHistory,
    scores: &[f64],
    eligible: &[bool],
) -> (Vec<bool>, f64) {
    let top_fraction = |fraction: f64| -> (Vec<bool>, f64) {
        let mut idx: Vec<usize> = (0..scores.len()).filter(|&j| eligible[j]).collect();
        let take = ((fraction * idx.len() as f64).ceil() as usize).min(idx.len());
        idx.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
        let mut novel = vec![false; scores.len()];
        let mut thr = f64::INFINITY;
        for &j in idx.iter().take(take) {
            novel[j] = true;
            thr = thr.min(scores[j]);
        }
        (novel, thr)
    };
    match rule {
        ThresholdRule::Fixed { zeta } => (
            scores
                .iter()
                .zip(eligible)
                .map(|(&s, &e)| e && s > *zeta)
                .collect(),
            *zeta,
        ),
        ThresholdRule::TopFraction { fraction } => top_fraction(*fraction),
        ThresholdRule::Adaptive { quantile, .. } => match history.quantile(*quantile) {
            Some(t) => (
                scores
                    .iter()
                    .zip(eligible)
                    .map(|(&s, &e)| e && s > t)
                    .collect(),
                t,
            ),
            // No history yet: fall back to the same fraction of this batch.
            None => top_fraction(1.0 - quantile),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_rule_and_empty_documents() {
        let (v, t) = decide(
            &ThresholdRule::Fixed { zeta: 0.5 },
            &ScoreHistory::default(),
            &[0.4, 0.6, 0.9],
            &[true, true, false],
        );
        assert_eq!(v, vec![false, true, false]);
        assert_eq!(t, 0.5);
    }

    #[test]
    fn top_fraction_takes_ceiling_of_share_with_stable_ties() {
        let (v, _) = decide(
            &ThresholdRule::TopFraction { fraction: 0.25 },
            &ScoreHistory::default(),
            &[1.0, 0.2, 1.0, 0.3, 0.1],
            &[true; 5],
        );
        // ⌈0.25·5⌉ = 2: both 1.0 scores, earliest first
        assert_eq!(v, vec![true, false, true, false, false]);
    }

    #[test]
    fn adaptive_quantile_uses_only_the_past() {
        let mut h = ScoreHistory::default();
        let past: Vec<f64> = (0..100).map(|i| i as f64 / 100.0).collect();
        h.update(&past, 0.0);
        let rule = ThresholdRule::Adaptive {
            quantile: 0.9,
            half_life: 0.0,
        };
        // 90 of the 100 past scores are ≤ 0.89: the threshold is the upper edge of 0.89's bin
        let (v, t) = decide(&rule, &h, &[0.95, 0.5, 0.85], &[true; 3]);
        assert!((0.89..=0.8906).contains(&t), "{t}");
        assert_eq!(v, vec![true, false, false]);
        // forgetting: after many updates with high scores the threshold rises
        for _ in 0..50 {
            h.update(&[0.99; 100], 5.0);
        }
        let (_, t2) = decide(
            &ThresholdRule::Adaptive {
                quantile: 0.5,
                half_life: 5.0,
            },
            &h,
            &[0.5],
            &[true],
        );
        assert!(t2 > 0.98, "{t2}");
    }

    #[test]
    fn adaptive_without_history_falls_back_to_top_fraction() {
        let rule = ThresholdRule::default_adaptive();
        let scores: Vec<f64> = (0..20).map(|i| i as f64 / 20.0).collect();
        let (v, _) = decide(&rule, &ScoreHistory::default(), &scores, &[true; 20]);
        assert_eq!(v.iter().filter(|&&b| b).count(), 2);
        assert!(v[19] && v[18]);
    }
}
