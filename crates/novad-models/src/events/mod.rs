//! Emerging topics as events: one topic per story, every member listed, keywords that stand out
//! against the past, and an id that follows the story over later timesteps.
//!
//! At each timestep the batch is grouped by [`cluster::communities`]: a story that breaks fills
//! a region of the batch with documents that score high, while a false alarm is a high score
//! among ordinary documents of a known subject. So a document that scores high is a core only
//! when most of its nearest documents in the batch score high too; the cores'
//! k-nearest-neighbour graph (cosine over TF × IDF of the past) is cut into Louvain
//! communities, and a community is an event when it is large enough and enough of it is
//! novel. Keywords are class-based TF-IDF against the past ([`keywords::keywords`]), so
//! boilerplate every earlier document shares never leads them.
//!
//! Events live on ([`track`]): a community whose centroid is close to a live event's continues
//! it (same id, kind `continuing`), and a later document close to a live event's centroid
//! joins it even when it is no longer novel, so an event's life can be followed; an event
//! without members for more than `expire_after` timesteps ends. The tracker's state is two named parts
//! (`events/meta`, `events/live`), beside the model's own.
//!
//! Measured on 20 Newsgroups (`novad-lab eval --compare-dictclust`, docs/RESULTS.md, "Emerging
//! topics as events").

pub mod beside;
pub mod cluster;
pub mod graph;
pub mod keywords;
pub mod track;

use serde::{Deserialize, Serialize};

use crate::model::{check, ParamsError};

pub use track::{EventBatch, Events, LiveEvent, EVENT_PARTS_PREFIX};

/// Parameters of the event stage. Checked by [`EventParams::validate`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventParams {
    /// Documents scoring at or above this quantile of the batch's scores are elevated: the
    /// candidates of events, in [0, 1].
    pub elevated_quantile: f64,
    /// Nearest documents of the whole batch that judge a candidate (fewer in a batch under
    /// 50 × this: a fiftieth of it, but at least the smaller of this and `min_size`), ≥ 1.
    pub neighbourhood: usize,
    /// Share of elevated documents among them that makes a candidate a core, in [0, 1].
    pub min_elevated_share: f64,
    /// Share of a community's members the detector flagged novel, for it to be an event, in
    /// [0, 1].
    pub min_novel_share: f64,
    /// Neighbours per core in the graph cut into communities, ≥ 1.
    pub neighbours: usize,
    /// Louvain's resolution γ > 0 (higher: smaller communities).
    pub resolution: f64,
    /// Cores a community needs to be an event, ≥ 2.
    pub min_size: usize,
    /// A community whose centroid has at least this cosine with a live event's continues it.
    pub link_cosine: f64,
    /// A later document with at least this cosine to a live event's centroid joins it
    /// (> 1: none does; events continue only by their communities).
    pub follow_cosine: f64,
    /// An event without members for more than this many timesteps ends, ≥ 1.
    pub expire_after: u64,
    /// Keywords per event, ≥ 1.
    pub top_terms: usize,
    /// Representative documents per event (the members closest to its centroid).
    pub representatives: usize,
}

impl Default for EventParams {
    fn default() -> Self {
        // 20NG CIKM protocol, default detector, seeds 0–4 (docs/RESULTS.md, "Emerging topics
        // as events")
        EventParams {
            elevated_quantile: 0.6,
            neighbourhood: 20,
            min_elevated_share: 0.65,
            min_novel_share: 0.3,
            neighbours: 15,
            resolution: 0.25,
            min_size: 5,
            link_cosine: 0.3,
            follow_cosine: 0.3,
            expire_after: 7,
            top_terms: 10,
            representatives: 3,
        }
    }
}

impl EventParams {
    /// Check every field; the error names it (`events.<field>`) and the accepted range.
    pub fn validate(&self) -> Result<(), ParamsError> {
        let unit = |v: f64| v.is_finite() && (0.0..=1.0).contains(&v);
        let cosine = |v: f64| v.is_finite() && v > 0.0 && v <= 2.0;
        check(
            (1..=10_000).contains(&self.neighbourhood),
            "events.neighbourhood",
            "an integer in 1..=10000",
            self.neighbourhood.to_string(),
        )?;
        for (v, f) in [
            (self.elevated_quantile, "events.elevated_quantile"),
            (self.min_elevated_share, "events.min_elevated_share"),
            (self.min_novel_share, "events.min_novel_share"),
        ] {
            check(unit(v), f, "a number in [0, 1]", v.to_string())?;
        }
        check(
            (1..=1000).contains(&self.neighbours),
            "events.neighbours",
            "an integer in 1..=1000",
            self.neighbours.to_string(),
        )?;
        check(
            self.resolution.is_finite() && self.resolution > 0.0 && self.resolution <= 100.0,
            "events.resolution",
            "a number in (0, 100]",
            self.resolution.to_string(),
        )?;
        check(
            (2..=1_000_000).contains(&self.min_size),
            "events.min_size",
            "an integer in 2..=1000000",
            self.min_size.to_string(),
        )?;
        for (v, f) in [
            (self.link_cosine, "events.link_cosine"),
            (self.follow_cosine, "events.follow_cosine"),
        ] {
            check(
                cosine(v),
                f,
                "a number in (0, 2] (above 1: never)",
                v.to_string(),
            )?;
        }
        check(
            self.expire_after >= 1,
            "events.expire_after",
            "an integer ≥ 1",
            self.expire_after.to_string(),
        )?;
        check(
            (1..=1000).contains(&self.top_terms),
            "events.top_terms",
            "an integer in 1..=1000",
            self.top_terms.to_string(),
        )?;
        check(
            self.representatives <= 1000,
            "events.representatives",
            "an integer ≤ 1000",
            self.representatives.to_string(),
        )
    }
}
