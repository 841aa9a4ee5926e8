//! The per-timestep summary of a timestep's verdicts ([`StepSummary`], stored in
//! [`crate::schema::SUMMARIES`] since format 8): what a timeline shows of a timestep without
//! reading its verdicts. Computed by one rule ([`SummaryBuilder`]) wherever it is computed —
//! at commit, by the migration, by `novad check` and by the timeline's range scan — so a stored
//! summary and one computed from the verdicts are equal bit for bit.

use serde::{Deserialize, Serialize};

use crate::schema::VerdictRecord;

/// Score quantiles of a set of verdicts (linear interpolation between order statistics).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ScoreQuantiles {
    pub p10: f64,
    pub p25: f64,
    pub p50: f64,
    pub p75: f64,
    pub p90: f64,
    pub max: f64,
}

impl ScoreQuantiles {
    /// Quantiles of `scores` (non-finite values ignored); `None` when none is finite. The
    /// answer depends only on the multiset of scores, not on their order.
    pub fn of(scores: &mut [f64]) -> Option<ScoreQuantiles> {
        let mut s: Vec<f64> = scores.iter().copied().filter(|x| x.is_finite()).collect();
        if s.is_empty() {
            return None;
        }
        s.sort_by(f64::total_cmp);
        let q = |p: f64| {
            let pos = p * (s.len() - 1) as f64;
            let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
            s[lo] + (s[hi] - s[lo]) * (pos - lo as f64)
        };
        Some(ScoreQuantiles {
            p10: q(0.10),
            p25: q(0.25),
            p50: q(0.50),
            p75: q(0.75),
            p90: q(0.90),
            max: s[s.len() - 1],
        })
    }
}

/// A summary of a set of verdicts (one timestep's, or those of a timestep in a time range).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StepSummary {
    /// Documents, and how many of them are novel.
    pub docs: u64,
    pub novel: u64,
    /// Earliest and latest document time (Unix ms); `None` without documents.
    pub first_time: Option<i64>,
    pub last_time: Option<i64>,
    /// Quantiles of the scores of the scored documents (not empty, not bootstrap).
    pub scores: Option<ScoreQuantiles>,
}

/// Accumulates verdicts, in any order, into their [`StepSummary`]. Holds one `f64` per scored
/// verdict until [`SummaryBuilder::finish`].
#[derive(Debug, Clone, Default)]
pub struct SummaryBuilder {
    docs: u64,
    novel: u64,
    first: Option<i64>,
    last: Option<i64>,
    scores: Vec<f64>,
}

impl SummaryBuilder {
    /// Count `v`; its score enters the quantiles when it is neither empty nor bootstrap.
    pub fn add(&mut self, v: &VerdictRecord) {
        self.docs += 1;
        self.novel += u64::from(v.novel);
        self.first = Some(self.first.map_or(v.time, |t| t.min(v.time)));
        self.last = Some(self.last.map_or(v.time, |t| t.max(v.time)));
        if !v.empty && !v.bootstrap {
            self.scores.push(v.score);
        }
    }

    /// The summary of every verdict added.
    pub fn finish(mut self) -> StepSummary {
        StepSummary {
            docs: self.docs,
            novel: self.novel,
            first_time: self.first,
            last_time: self.last,
            scores: ScoreQuantiles::of(&mut self.scores),
        }
    }
}

impl StepSummary {
    /// The summary of `verdicts` (see [`SummaryBuilder`]).
    pub fn of<'a>(verdicts: impl IntoIterator<Item = &'a VerdictRecord>) -> StepSummary {
        let mut b = SummaryBuilder::default();
        for v in verdicts {
            b.add(v);
        }
        b.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(time: i64, score: f64, novel: bool, empty: bool, bootstrap: bool) -> VerdictRecord {
        VerdictRecord {
            doc_id: format!("d{time}"),
            time,
            timestep: 0,
            seq: 0,
            source: "b.jsonl".into(),
            score,
            novel,
            bootstrap,
            empty,
            at_ceiling: false,
            terms: vec![],
            hybrid: None,
            topic: None,
        }
    }

    #[test]
    fn the_summary_is_independent_of_order_and_skips_empty_and_bootstrap_scores() {
        let vs = vec![
            v(50, 0.9, true, false, false),
            v(-3, 0.1, false, false, false),
            v(7, 100.0, false, true, false),
            v(9, 0.4, false, false, false),
            v(8, -50.0, false, false, true),
            v(20, f64::NAN, false, false, false),
        ];
        let s = StepSummary::of(&vs);
        let mut rev = vs.clone();
        rev.reverse();
        assert_eq!(s, StepSummary::of(&rev));
        assert_eq!((s.docs, s.novel), (6, 1));
        assert_eq!((s.first_time, s.last_time), (Some(-3), Some(50)));
        let q = s.scores.unwrap();
        // the finite scored scores are 0.1, 0.4, 0.9: neither 100 (empty) nor −50 (bootstrap)
        assert_eq!((q.max, q.p50), (0.9, 0.4));
        assert!((q.p25 - 0.25).abs() < 1e-12, "{q:?}");
        assert_eq!(StepSummary::of(&[]), StepSummary::default());
        let only_empty = StepSummary::of(&vs[2..3]);
        assert_eq!((only_empty.docs, only_empty.scores), (1, None));
    }
}
