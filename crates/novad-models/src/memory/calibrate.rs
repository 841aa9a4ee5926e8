//! The calibrated hybrid score and its threshold band: pure functions of plain inputs.
//!
//! A calibrated hybrid fuses the model's score and the nearest-neighbour score on their own
//! scale (both in [0, 1]: the share of the document the dictionary leaves unexplained, and
//! 1 − the largest cosine to a remembered document), so a document's score is a fixed
//! function of the document and the state — no history of past scores moves it. What does
//! move with time is the state: as the memory fills and the dictionary learns, the typical
//! document is explained better and scores lower. That drift is taken out against the first
//! scored day: the score is `raw − shift`, with `shift` = the median of past raw scores minus
//! the median of the first day's (the anchor), clamped to [−max_shift, 0]. The shift only ever
//! raises scores back to the first day's scale; a burst of novel documents, which raises the
//! median, can shrink the raise but never lower a score below its raw value.
//!
//! The verdict: novel when the threshold rule says so and the score is above `floor`, or
//! whenever the score is above `ceiling` — whatever the past scores were.

use serde::{Deserialize, Serialize};

use crate::model::{check, ParamsError};
use crate::threshold::ScoreHistory;

/// Settings of a calibrated hybrid (see the module documentation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// The largest raise of a score that the drift correction may apply, in [0, 1].
    pub max_shift: f64,
    /// A document scoring at most `floor` is never novel, in [0, 1].
    pub floor: f64,
    /// A document scoring above `ceiling` is always novel, in [`floor`, 1].
    pub ceiling: f64,
    /// Topics group only the novel documents that the adaptive rule would flag at this
    /// quantile too (held in the same band), in [0, 1]; at or below the rule's own quantile,
    /// every novel document. A stricter selection than the verdicts': scattered false
    /// alarms do not make topics.
    pub topic_quantile: f64,
}

impl Default for Calibration {
    /// Measured on 20 Newsgroups (`novad-lab eval`; docs/RESULTS.md, "Calibrated hybrid score
    /// and a threshold band"): the drift there stays under 0.04, the adaptive threshold
    /// settles between the bounds, and topics of the 0.9-quantile's documents are as many
    /// events as before calibration.
    fn default() -> Self {
        Calibration {
            max_shift: 0.1,
            floor: 0.7,
            ceiling: 0.85,
            topic_quantile: 0.9,
        }
    }
}

impl Calibration {
    pub fn validate(&self) -> Result<(), ParamsError> {
        let unit = |v: f64, f: &'static str| {
            check(
                (0.0..=1.0).contains(&v),
                f,
                "a number in [0, 1]",
                v.to_string(),
            )
        };
        unit(self.max_shift, "hybrid.calibration.max_shift")?;
        unit(self.floor, "hybrid.calibration.floor")?;
        unit(self.ceiling, "hybrid.calibration.ceiling")?;
        unit(self.topic_quantile, "hybrid.calibration.topic_quantile")?;
        check(
            self.floor <= self.ceiling,
            "hybrid.calibration.ceiling",
            "at least hybrid.calibration.floor",
            self.ceiling.to_string(),
        )
    }

    /// The drift correction of a state: median(raw history) − anchor, clamped to
    /// [−max_shift, 0]; 0 without an anchor or a history. Subtracting it from a raw score
    /// never lowers the score.
    pub fn shift(&self, raw_history: &ScoreHistory, anchor: Option<f64>) -> f64 {
        match (anchor, median(raw_history)) {
            (Some(a), Some(m)) => (m - a).clamp(-self.max_shift, 0.0),
            _ => 0.0,
        }
    }

    /// The calibrated score of a raw fused score under `shift` (from [`Self::shift`]): in
    /// [0, 1] and ≥ `raw` clamped to [0, 1].
    pub fn score(&self, raw: f64, shift: f64) -> f64 {
        (raw - shift).clamp(0.0, 1.0)
    }

    /// Apply the band to a rule's verdicts: a document is novel when `rule_novel` and its
    /// score is above the floor, or when its score is above the ceiling; never when it is not
    /// `eligible`. Returns the verdicts and the effective threshold min(max(t, floor),
    /// ceiling) of the rule's threshold `t` (the ceiling when the rule selected nothing).
    pub fn band(
        &self,
        scores: &[f64],
        eligible: &[bool],
        rule_novel: &[bool],
        rule_threshold: f64,
    ) -> (Vec<bool>, f64) {
        let novel = scores
            .iter()
            .zip(eligible)
            .zip(rule_novel)
            .map(|((&s, &e), &r)| e && ((r && s > self.floor) || s > self.ceiling))
            .collect();
        let t = if rule_threshold.is_finite() {
            rule_threshold.max(self.floor).min(self.ceiling)
        } else {
            self.ceiling
        };
        (novel, t)
    }
}

/// The weighted median of a history (the upper edge of the bin where half the weight is
/// reached, resolution 1 / [`crate::threshold::BINS`]); None for an empty history.
pub fn median(h: &ScoreHistory) -> Option<f64> {
    h.quantile(0.5)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::threshold::{decide, ThresholdRule};

    fn history(scores: &[f64]) -> ScoreHistory {
        let mut h = ScoreHistory::default();
        h.update(scores, 0.0);
        h
    }

    #[test]
    fn the_shift_only_raises_and_is_bounded() {
        let c = Calibration::default();
        let first: Vec<f64> = (0..101).map(|i| 0.5 + 0.002 * i as f64).collect(); // median 0.6
        let anchor = median(&history(&first));
        assert!((anchor.unwrap() - 0.6).abs() < 1e-3);
        // the typical score fell by 0.05: scores are raised by 0.05
        let later: Vec<f64> = first.iter().map(|s| s - 0.05).collect();
        let s = c.shift(&history(&later), anchor);
        assert!((s + 0.05).abs() < 1e-3, "{s}");
        assert!((c.score(0.5, s) - 0.55).abs() < 1e-3);
        // fell by 0.3: raised by max_shift only
        let far: Vec<f64> = first.iter().map(|s| s - 0.3).collect();
        assert_eq!(c.shift(&history(&far), anchor), -c.max_shift);
        // rose (a burst of novel documents): no shift at all
        let burst: Vec<f64> = first.iter().map(|_| 1.0).collect();
        assert_eq!(c.shift(&history(&burst), anchor), 0.0);
        // no anchor or no history: no shift
        assert_eq!(c.shift(&history(&later), None), 0.0);
        assert_eq!(c.shift(&ScoreHistory::default(), anchor), 0.0);
        // a score is never lowered and stays in [0, 1]
        for raw in [0.0, 0.3, 0.95, 1.0] {
            for shift in [0.0, -0.05, -0.1] {
                let x = c.score(raw, shift);
                assert!(x >= raw && (0.0..=1.0).contains(&x));
            }
        }
    }

    /// No history of maxed-out scores can stop a document above the ceiling from being
    /// flagged, and nothing at or below the floor is flagged, whatever the rule says.
    #[test]
    fn the_band_overrides_a_blinded_rule() {
        let c = Calibration::default();
        let rule = ThresholdRule::Adaptive {
            quantile: 0.75,
            half_life: 30.0,
        };
        let blinded = history(&[1.0; 50]);
        let scores = [0.2, 0.72, 0.86, 1.0, 0.99];
        let eligible = [true, true, true, true, false];
        let (rule_novel, t) = decide(&rule, &blinded, &scores, &eligible);
        assert_eq!(t, 1.0);
        assert!(rule_novel.iter().all(|&n| !n), "the rule alone is blind");
        let (novel, eff) = c.band(&scores, &eligible, &rule_novel, t);
        assert_eq!(novel, vec![false, false, true, true, false]);
        assert_eq!(eff, c.ceiling);
        // a low history: the rule would flag almost everything; the floor stops it
        let low = history(&[0.1; 50]);
        let (rule_novel, t) = decide(&rule, &low, &scores, &eligible);
        let (novel, eff) = c.band(&scores, &eligible, &rule_novel, t);
        assert_eq!(novel, vec![false, true, true, true, false]);
        assert_eq!(eff, c.floor);
        // in between, the rule decides
        let mid = history(&(0..100).map(|i| 0.6 + 0.002 * i as f64).collect::<Vec<_>>());
        let (rule_novel, t) = decide(&rule, &mid, &scores, &eligible);
        assert!(t > c.floor && t < c.ceiling, "{t}");
        let (novel, eff) = c.band(&scores, &eligible, &rule_novel, t);
        assert_eq!(eff, t);
        assert_eq!(novel, vec![false, 0.72 > t, true, true, false]);
        // a rule that selected nothing: the ceiling is the threshold
        assert_eq!(
            c.band(&[0.9], &[true], &[false], f64::INFINITY),
            (vec![true], c.ceiling)
        );
    }

    #[test]
    fn invalid_settings_are_refused_naming_the_field() {
        let bad = Calibration {
            floor: 0.9,
            ceiling: 0.8,
            ..Calibration::default()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("ceiling"));
        let bad = Calibration {
            max_shift: -0.1,
            ..Calibration::default()
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("max_shift"));
        Calibration::default().validate().unwrap();
    }
}
