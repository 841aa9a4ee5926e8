//! Emerging topics as events, measured on the daemon's own topics (the `hybrid` method's
//! engine step, so exactly what a store on those parameters records). At every evaluated
//! timestep, for each emerging topic:
//! - it is an **event** when a group new at that timestep holds the majority (more than half)
//!   of its members;
//! - a new group is **found** when at least one event of that timestep is led by it;
//! - its **keyword precision@5** is the share of its five top terms among its leading group's
//!   20 distinctive terms: the group's document frequency at the timestep × ln(N / (1 + df)),
//!   with N and df over every document before the timestep (the past the keywords must stand
//!   out against), terms by the detector's own tokenizer.
//!
//! Over the stream: event precision = events / emerging topics, event recall = found groups /
//! new groups, topics per found group = events / found groups, keyword precision@5 averaged
//! over the events.
//!
//! Topics of a later day of an event (kind `continuing`) are not emerging topics: they are
//! counted apart, with the share of their members of the group that led the event when it
//! emerged (the story it follows).
//!
//! Several topic stages can be judged on one stream (the default's events and DICTCLUST): the
//! judge keeps one past and, per stage, which group each event emerged with.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use novad_models::text::Tokenizer;

/// One emerging topic as the daemon reports it.
#[derive(Debug, Clone)]
pub struct EventTopic {
    /// Positions of its documents in the timestep.
    pub members: Vec<usize>,
    /// Its keywords, strongest first.
    pub terms: Vec<String>,
    /// Its event's id, when the stage follows events.
    pub event: Option<u64>,
    /// A later day of an event (not an emerging topic).
    pub continuing: bool,
}

/// The event measures of one timestep.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EventStep {
    /// Emerging topics, and those that are events.
    pub topics: usize,
    pub events: usize,
    /// New groups of the timestep, and those found.
    pub new_groups: usize,
    pub found_groups: usize,
    /// Top-5 keywords of the events among their group's distinctive terms, of 5 per event
    /// (fewer when a topic has fewer keywords).
    pub keyword_hits: usize,
    pub keyword_slots: usize,
    /// Topics continuing an earlier event, their members, and those of the group the event
    /// emerged with.
    pub continuing: usize,
    pub followed: usize,
    pub on_story: usize,
}

/// The event measures over the evaluated timesteps.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EventSummary {
    pub topics: usize,
    pub events: usize,
    pub new_groups: usize,
    pub found_groups: usize,
    /// events / topics (None without topics).
    pub event_precision: Option<f64>,
    /// found groups / new groups.
    pub event_recall: Option<f64>,
    /// events / found groups.
    pub topics_per_event: Option<f64>,
    /// keyword hits / keyword slots.
    pub keyword_precision_at_5: Option<f64>,
    /// Topics continuing an event, their members, and the share of those of the group the
    /// event emerged with (None without continuing members).
    pub continuing: usize,
    pub followed: usize,
    pub on_story: Option<f64>,
}

/// Distinctive terms to score keywords against: the document frequencies of everything seen.
pub struct EventJudge {
    tok: Tokenizer,
    df: HashMap<String, u64>,
    docs: u64,
    /// Per (stage, event id): the group that led the event when it emerged.
    origin: HashMap<(String, u64), String>,
}

/// How many distinctive terms a group has.
const DISTINCTIVE: usize = 20;
/// How many of a topic's keywords are judged.
const AT: usize = 5;

impl EventJudge {
    pub fn new(tok: Tokenizer) -> Self {
        EventJudge {
            tok,
            df: HashMap::new(),
            docs: 0,
            origin: HashMap::new(),
        }
    }

    fn terms(&self, text: &str) -> HashSet<String> {
        self.tok.tokens(text).into_iter().collect()
    }

    /// The `DISTINCTIVE` terms of a group's `texts` against the past: group document
    /// frequency × ln(N / (1 + df)), largest first, ties by term.
    pub fn distinctive(&self, texts: &[&str]) -> Vec<String> {
        let mut gdf: HashMap<String, u64> = HashMap::new();
        for t in texts {
            for w in self.terms(t) {
                *gdf.entry(w).or_default() += 1;
            }
        }
        let n = self.docs.max(1) as f64;
        let mut scored: Vec<(f64, String)> = gdf
            .into_iter()
            .map(|(w, c)| {
                let df = self.df.get(&w).copied().unwrap_or(0) as f64;
                (c as f64 * (n / (1.0 + df)).ln().max(0.0), w)
            })
            .filter(|(s, _)| *s > 0.0)
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        scored.into_iter().take(DISTINCTIVE).map(|p| p.1).collect()
    }

    /// Judge one timestep's topics of `stage` against its documents' `labels` and texts
    /// (`new` = the groups new at this timestep). The past stays as it is ([`Self::advance`]).
    pub fn judge(
        &mut self,
        stage: &str,
        topics: &[EventTopic],
        labels: &[&str],
        texts: &[&str],
        new: &[String],
    ) -> EventStep {
        let (later, topics): (Vec<&EventTopic>, Vec<&EventTopic>) =
            topics.iter().partition(|t| t.continuing);
        let mut out = EventStep {
            topics: topics.len(),
            new_groups: new.len(),
            continuing: later.len(),
            ..EventStep::default()
        };
        for t in &later {
            out.followed += t.members.len();
            let origin = t
                .event
                .and_then(|id| self.origin.get(&(stage.to_string(), id)));
            if let Some(g) = origin {
                out.on_story += t.members.iter().filter(|&&m| labels[m] == g).count();
            }
        }
        let mut distinctive: HashMap<&str, HashSet<String>> = HashMap::new();
        for g in new {
            let own: Vec<&str> = (0..labels.len())
                .filter(|&i| labels[i] == g)
                .map(|i| texts[i])
                .collect();
            distinctive.insert(g, self.distinctive(&own).into_iter().collect());
        }
        let mut found: HashSet<&str> = HashSet::new();
        for t in topics {
            let Some(g) = majority(&t.members, labels) else {
                continue;
            };
            if let Some(id) = t.event {
                self.origin.insert((stage.to_string(), id), g.to_string());
            }
            let Some(words) = distinctive.get(g) else {
                continue;
            };
            out.events += 1;
            found.insert(g);
            let top: Vec<&String> = t.terms.iter().take(AT).collect();
            out.keyword_slots += top.len();
            out.keyword_hits += top.iter().filter(|w| words.contains(**w)).count();
        }
        out.found_groups = found.len();
        out
    }

    /// Take a timestep's documents into the past.
    pub fn advance(&mut self, texts: &[&str]) {
        for text in texts {
            for w in self.terms(text) {
                *self.df.entry(w).or_default() += 1;
            }
            self.docs += 1;
        }
    }

    /// [`Self::judge`] of the single stage `""` then [`Self::advance`] (the tests' shorthand).
    #[cfg(test)]
    pub fn step(
        &mut self,
        topics: &[EventTopic],
        labels: &[&str],
        texts: &[&str],
        new: &[String],
    ) -> EventStep {
        let out = self.judge("", topics, labels, texts, new);
        self.advance(texts);
        out
    }
}

/// The label held by more than half of `members` (None when none is).
fn majority<'a>(members: &[usize], labels: &[&'a str]) -> Option<&'a str> {
    let mut count: HashMap<&str, usize> = HashMap::new();
    for &m in members {
        *count.entry(labels[m]).or_default() += 1;
    }
    count
        .into_iter()
        .find(|&(_, c)| 2 * c > members.len())
        .map(|p| p.0)
}

/// Sum the steps into the stream's measures.
pub fn summarise(steps: &[&EventStep]) -> EventSummary {
    let mut s = EventSummary::default();
    let (mut hits, mut slots, mut on_story) = (0, 0, 0);
    for e in steps {
        s.topics += e.topics;
        s.events += e.events;
        s.new_groups += e.new_groups;
        s.found_groups += e.found_groups;
        hits += e.keyword_hits;
        slots += e.keyword_slots;
        s.continuing += e.continuing;
        s.followed += e.followed;
        on_story += e.on_story;
    }
    let ratio = |a: usize, b: usize| (b > 0).then(|| a as f64 / b as f64);
    s.event_precision = ratio(s.events, s.topics);
    s.event_recall = ratio(s.found_groups, s.new_groups);
    s.topics_per_event = ratio(s.events, s.found_groups);
    s.keyword_precision_at_5 = ratio(hits, slots);
    s.on_story = ratio(on_story, s.followed);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judge() -> EventJudge {
        EventJudge::new(novad_models::Params::default().tokenizer())
    }

    /// A planted stream: two old groups with boilerplate shared by everyone, then two new
    /// groups; one clean event per new group, one mixed topic, one split event, one topic of
    /// old documents.
    #[test]
    fn events_found_groups_and_keywords_are_counted_as_defined() {
        let mut j = judge();
        let past = [
            "writes article thanks hockey goalie season playoff",
            "writes article thanks baseball pitcher inning season",
            "writes article thanks hockey puck season",
            "writes article thanks baseball batter season",
        ];
        let labels = ["hockey", "baseball", "hockey", "baseball"];
        let first = j.step(&[], &labels, &past, &[]);
        assert_eq!(first, EventStep::default());
        let texts = [
            "writes article thanks orbit shuttle launch nasa",
            "writes article thanks orbit shuttle astronaut",
            "writes article thanks shuttle launch orbit",
            "writes article thanks encryption key clipper",
            "writes article thanks encryption clipper chip",
            "writes article thanks hockey goalie",
            "writes article thanks baseball pitcher",
        ];
        let labels = [
            "space", "space", "space", "crypt", "crypt", "hockey", "baseball",
        ];
        let new = vec!["space".to_string(), "crypt".to_string()];
        // boilerplate is never distinctive: it is in every earlier document
        let space = j.distinctive(&texts[..3]);
        assert!(space.contains(&"orbit".to_string()) && space.contains(&"shuttle".to_string()));
        assert!(!space.iter().any(|w| w == "writes" || w == "thanks"));
        let t = |m: &[usize], w: &[&str]| EventTopic {
            members: m.to_vec(),
            terms: w.iter().map(|s| s.to_string()).collect(),
            event: None,
            continuing: false,
        };
        let topics = [
            // a clean space event, keywords 3 of 5 distinctive
            t(
                &[0, 1, 2],
                &["orbit", "shuttle", "writes", "launch", "thanks"],
            ),
            // half crypt, half old: no majority, not an event
            t(&[3, 5], &["encryption", "hockey"]),
            // the space event split again: an event, the second for its group
            t(&[1, 2], &["shuttle"]),
            // old documents only
            t(&[5, 6], &["hockey", "baseball"]),
        ];
        let e = j.step(&topics, &labels, &texts, &new);
        assert_eq!((e.topics, e.events), (4, 2));
        assert_eq!((e.new_groups, e.found_groups), (2, 1));
        assert_eq!((e.keyword_hits, e.keyword_slots), (4, 6));
        let s = summarise(&[&first, &e]);
        assert_eq!(s.event_precision, Some(0.5));
        assert_eq!(s.event_recall, Some(0.5));
        assert_eq!(s.topics_per_event, Some(2.0));
        assert!((s.keyword_precision_at_5.unwrap() - 4.0 / 6.0).abs() < 1e-12);
        assert_eq!(summarise(&[]).event_precision, None);
    }
}
