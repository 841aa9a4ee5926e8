//! Events over time: the live events (id, centroid, life), how a timestep's communities and
//! documents continue them or start new ones, and the tracker's state as named parts.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::cluster::{communities, past_unit};
use super::keywords::{keywords, Past};
use super::EventParams;
use crate::model::{decode_part, part_bytes, EngineError, ParamsError, Topic, TopicKind};
use crate::text::{SparseDoc, Vocabulary};

/// Prefix of the tracker's part names.
pub const EVENT_PARTS_PREFIX: &str = "events/";
const PART_META: &str = "events/meta";
const PART_LIVE: &str = "events/live";

/// Terms an event's centroid keeps (its heaviest).
const CENTROID_TERMS: usize = 64;
/// Timesteps of an event's life kept in its record (the latest).
const LIFE: usize = 64;
/// Weight of a timestep's members in an event's centroid (the rest is the centroid before).
const BLEND: f64 = 0.5;
/// Documents that must join a live event, without a community of their own, for it to
/// continue: one stray document is no continuation.
const FOLLOW_MIN: usize = 2;

/// An event that can still continue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveEvent {
    pub id: u64,
    /// Timestep it emerged at, and the last one it had members at.
    pub first: u64,
    pub last: u64,
    /// Unit-ℓ2 centroid of its members, (term key, weight), keys increasing.
    pub centroid: Vec<(u64, f32)>,
    /// Members per timestep of its life (the latest [`LIFE`]), oldest first.
    pub sizes: Vec<(u64, u32)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Meta {
    version: u32,
    next_id: u64,
}

/// The event tracker: its parameters, the next id, the live events (ids increasing).
#[derive(Debug, Clone, PartialEq)]
pub struct Events {
    params: EventParams,
    next_id: u64,
    live: Vec<LiveEvent>,
}

/// A timestep as the tracker sees it.
#[derive(Debug, Clone, Copy)]
pub struct EventBatch<'a> {
    pub timestep: u64,
    /// TF-IDF vectors of the batch, ids in `vocab`.
    pub vectors: &'a [SparseDoc],
    /// The vocabulary after observing the batch.
    pub vocab: &'a Vocabulary,
    /// The novel documents (the candidates of new events).
    pub novel: &'a [bool],
    /// The documents' novelty scores (for each topic's mean).
    pub scores: &'a [f64],
}

/// A keyed unit-ℓ2 vector as a map, ordered so that every sum over it (its norm) is taken in
/// one order: the stored centroids are the same bits in every run and process.
type Keyed = BTreeMap<u64, f64>;

/// A document as (term key, weight) pairs.
type Pairs = Vec<(u64, f32)>;

/// A unit vector of term ids ([`past_unit`]) keyed by term.
fn keyed(v: &[(u32, f32)], vocab: &Vocabulary) -> Pairs {
    v.iter().map(|&(id, w)| (vocab.key(id), w)).collect()
}

fn normalise(m: &mut Keyed) {
    let n = m.values().map(|v| v * v).sum::<f64>().sqrt();
    if n > 0.0 && n.is_finite() {
        m.values_mut().for_each(|v| *v /= n);
    } else {
        m.clear();
    }
}

fn dot(a: &Keyed, b: &[(u64, f32)]) -> f64 {
    b.iter()
        .map(|(k, w)| a.get(k).copied().unwrap_or(0.0) * *w as f64)
        .sum()
}

/// The heaviest [`CENTROID_TERMS`] entries of `m`, re-normalised, keys increasing.
fn stored(m: &Keyed) -> Vec<(u64, f32)> {
    let mut v: Vec<(u64, f64)> = m.iter().map(|(&k, &w)| (k, w)).collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v.truncate(CENTROID_TERMS);
    let n = v.iter().map(|p| p.1 * p.1).sum::<f64>().sqrt();
    let mut out: Vec<(u64, f32)> = v
        .into_iter()
        .filter(|_| n > 0.0)
        .map(|(k, w)| (k, (w / n) as f32))
        .collect();
    out.sort_by_key(|p| p.0);
    out
}

/// The unit centroid of `members` (keyed vectors by batch position).
fn centroid(members: &[usize], docs: &[Pairs]) -> Keyed {
    let mut c = Keyed::new();
    for &j in members {
        for &(k, w) in &docs[j] {
            *c.entry(k).or_default() += w as f64;
        }
    }
    normalise(&mut c);
    c
}

/// One topic of the step before it is spelled out: its event, kind and members.
struct Found {
    /// Index into the live events (before this step) it continues, or None: a new event.
    continues: Option<usize>,
    members: Vec<usize>,
    keywords: Option<Vec<(u32, f64)>>,
}

impl Events {
    /// A tracker with no events.
    pub fn new(params: EventParams) -> Result<Events, ParamsError> {
        params.validate()?;
        Ok(Events {
            params,
            next_id: 1,
            live: Vec::new(),
        })
    }

    pub fn params(&self) -> &EventParams {
        &self.params
    }

    /// The live events, ids increasing.
    pub fn live(&self) -> &[LiveEvent] {
        &self.live
    }

    /// One timestep: the batch's communities continue live events or start new ones, later
    /// documents join live events, events without members for more than `expire_after`
    /// timesteps end. A batch whose scores or flags are not one per vector changes nothing.
    /// Returns the new tracker and the step's topics (each with its event id; members are
    /// batch positions, each document in at most one topic), largest first, ties by id. Pure.
    pub fn step(&self, b: &EventBatch) -> (Events, Vec<Topic>) {
        let p = &self.params;
        let n = b.vectors.len();
        if b.scores.len() != n || b.novel.len() != n {
            // not a batch of this tracker's kind: nothing groups, nothing changes
            return (self.clone(), Vec::new());
        }
        let novel: Vec<bool> = (0..n).map(|j| b.novel.get(j) == Some(&true)).collect();
        let past = Past::new(b.vocab, b.vectors);
        let unit = past_unit(b.vectors, &past);
        let comms = communities(&unit, b.vectors, b.scores, &novel, &past, p);
        let docs: Vec<Pairs> = unit.iter().map(|v| keyed(v, b.vocab)).collect();
        let cents: Vec<Keyed> = comms.iter().map(|c| centroid(&c.members, &docs)).collect();
        // communities continue live events: greedily by cosine, each event at most once
        let mut pairs: Vec<(f64, usize, usize)> = Vec::new();
        for (c, cent) in cents.iter().enumerate() {
            for (e, ev) in self.live.iter().enumerate() {
                let cos = dot(cent, &ev.centroid);
                if cos >= p.link_cosine {
                    pairs.push((cos, c, e));
                }
            }
        }
        pairs.sort_by(|a, b| b.0.total_cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2))));
        let mut link: Vec<Option<usize>> = vec![None; comms.len()];
        let mut taken = vec![false; self.live.len()];
        for (_, c, e) in pairs {
            if link[c].is_none() && !taken[e] {
                link[c] = Some(e);
                taken[e] = true;
            }
        }
        let mut found: Vec<Found> = comms
            .iter()
            .zip(&link)
            .map(|(c, &l)| Found {
                continues: l,
                members: c.members.clone(),
                keywords: Some(c.keywords.clone()),
            })
            .collect();
        self.follow(b, &docs, &mut found);
        self.finish(b, &past, &docs, found)
    }

    /// Documents in no community join the live event (from before this step) whose centroid
    /// is closest, when at least `follow_cosine` close: into its community of this step, or
    /// into a topic of their own when at least [`FOLLOW_MIN`] join.
    fn follow(&self, b: &EventBatch, docs: &[Pairs], found: &mut Vec<Found>) {
        let p = &self.params;
        if p.follow_cosine > 1.0 || self.live.is_empty() {
            return;
        }
        let mut index: HashMap<u64, Vec<(usize, f32)>> = HashMap::new();
        for (e, ev) in self.live.iter().enumerate() {
            for &(k, w) in &ev.centroid {
                index.entry(k).or_default().push((e, w));
            }
        }
        let grouped: std::collections::HashSet<usize> = found
            .iter()
            .flat_map(|f| f.members.iter().copied())
            .collect();
        let mut joins: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        let mut acc = vec![0.0f64; self.live.len()];
        for (j, d) in docs.iter().enumerate() {
            if d.is_empty() || grouped.contains(&j) || b.vectors[j].is_empty() {
                continue;
            }
            acc.iter_mut().for_each(|a| *a = 0.0);
            for (k, w) in d {
                if let Some(post) = index.get(k) {
                    for &(e, v) in post {
                        acc[e] += *w as f64 * v as f64;
                    }
                }
            }
            let best = (0..acc.len())
                .filter(|&e| acc[e] >= p.follow_cosine)
                .max_by(|&a, &b| acc[a].total_cmp(&acc[b]).then(b.cmp(&a)));
            if let Some(e) = best {
                joins.entry(e).or_default().push(j);
            }
        }
        for (e, js) in joins {
            match found.iter_mut().find(|f| f.continues == Some(e)) {
                Some(f) => {
                    f.members.extend(js);
                    f.members.sort_unstable();
                    f.keywords = None;
                }
                None if js.len() >= FOLLOW_MIN => found.push(Found {
                    continues: Some(e),
                    members: js,
                    keywords: None,
                }),
                None => {}
            }
        }
    }

    /// Spell out the step's topics and the tracker after it.
    fn finish(
        &self,
        b: &EventBatch,
        past: &Past,
        docs: &[Pairs],
        found: Vec<Found>,
    ) -> (Events, Vec<Topic>) {
        let p = &self.params;
        let t = b.timestep;
        let mut next = self.clone();
        let mut topics = Vec::with_capacity(found.len());
        for f in found {
            let cent = centroid(&f.members, docs);
            let kw = f.keywords.unwrap_or_else(|| {
                let m: Vec<&SparseDoc> = f.members.iter().map(|&j| &b.vectors[j]).collect();
                keywords(&m, past, p.top_terms)
            });
            let (id, kind, life) = match f.continues {
                Some(e) => {
                    let ev = &mut next.live[e];
                    let mut c: Keyed = ev
                        .centroid
                        .iter()
                        .map(|&(k, w)| (k, w as f64 * (1.0 - BLEND)))
                        .collect();
                    for (&k, &w) in &cent {
                        *c.entry(k).or_default() += w * BLEND;
                    }
                    normalise(&mut c);
                    ev.centroid = stored(&c);
                    ev.last = t;
                    ev.sizes.push((t, f.members.len() as u32));
                    if ev.sizes.len() > LIFE {
                        ev.sizes.remove(0);
                    }
                    (ev.id, TopicKind::Continuing, ev.sizes.clone())
                }
                None => {
                    let id = next.next_id;
                    next.next_id += 1;
                    let sizes = vec![(t, f.members.len() as u32)];
                    next.live.push(LiveEvent {
                        id,
                        first: t,
                        last: t,
                        centroid: stored(&cent),
                        sizes: sizes.clone(),
                    });
                    (id, TopicKind::Emerging, sizes)
                }
            };
            topics.push(topic(b, docs, &cent, f.members, kw, id, kind, &life, p));
        }
        next.live
            .retain(|e| e.last.saturating_add(p.expire_after) >= t);
        next.live.sort_by_key(|e| e.id);
        topics.sort_by(|a, b| {
            b.members
                .len()
                .cmp(&a.members.len())
                .then(a.event.cmp(&b.event))
        });
        for (i, tp) in topics.iter_mut().enumerate() {
            tp.atom = i as u32;
        }
        (next, topics)
    }

    /// The tracker's state as named parts: `events/meta` (version, next id), `events/live`.
    pub fn state_parts(&self) -> Vec<(String, Vec<u8>)> {
        let meta = Meta {
            version: 1,
            next_id: self.next_id,
        };
        vec![
            (PART_META.to_string(), part_bytes(&meta)),
            (PART_LIVE.to_string(), part_bytes(&self.live)),
        ]
    }

    /// Rebuild from [`Self::state_parts`] (the parts of a whole model state may be given; only
    /// `events/…` are read), checking the ids are increasing and below the next id and every
    /// centroid weight finite.
    pub fn from_state_parts(
        params: EventParams,
        parts: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Events, EngineError> {
        params.validate()?;
        let meta: Meta = decode_part(parts, PART_META)?;
        let live: Vec<LiveEvent> = decode_part(parts, PART_LIVE)?;
        let bad = |why: &str| Err(EngineError::Inconsistent(format!("events: {why}")));
        if meta.version != 1 {
            return bad(&format!("unknown version {}", meta.version));
        }
        if live.windows(2).any(|w| w[0].id >= w[1].id)
            || live
                .iter()
                .any(|e| e.id >= meta.next_id || e.first > e.last)
        {
            return bad("event ids out of order");
        }
        if live
            .iter()
            .any(|e| e.centroid.iter().any(|c| !c.1.is_finite()))
        {
            return Err(EngineError::NonFinite("an event centroid"));
        }
        Ok(Events {
            params,
            next_id: meta.next_id,
            live,
        })
    }
}

/// One event's topic at this step.
#[allow(clippy::too_many_arguments)]
fn topic(
    b: &EventBatch,
    docs: &[Pairs],
    cent: &Keyed,
    members: Vec<usize>,
    kw: Vec<(u32, f64)>,
    id: u64,
    kind: TopicKind,
    life: &[(u64, u32)],
    p: &EventParams,
) -> Topic {
    let n = b.vectors.len().max(1) as f64;
    let mut reps: Vec<(f64, usize)> = members.iter().map(|&j| (dot(cent, &docs[j]), j)).collect();
    reps.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    // the atom (unit ℓ1, by term id) the adaptive dictionary can inject: the members' mean
    let mut atom: BTreeMap<u32, f64> = BTreeMap::new();
    for &j in &members {
        for (&id, &w) in b.vectors[j].ids.iter().zip(&b.vectors[j].vals) {
            *atom.entry(id).or_default() += w;
        }
    }
    let total: f64 = atom.values().sum();
    let mean_score = members.iter().map(|&j| b.scores[j]).sum::<f64>() / members.len() as f64;
    Topic {
        atom: 0,
        strength: members.len() as f64 / n,
        terms: kw.iter().map(|&(id, w)| (id, w as f32)).collect(),
        atom_vector: atom
            .into_iter()
            .map(|(id, w)| (id, (w / total * (1.0 - 1e-6)) as f32))
            .collect(),
        representatives: reps.iter().take(p.representatives).map(|r| r.1).collect(),
        mean_score,
        kind,
        profile: life.iter().map(|&(_, s)| s as f32).collect(),
        members,
        event: Some(id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::{tfidf_l1, Tokenizer};

    /// A known past: ordinary posts on five subjects.
    const SUBJECTS: [&str; 5] = [
        "engine gearbox clutch wheel tyre garage mechanic",
        "pitcher inning batter season league umpire stadium",
        "recipe flour butter oven sugar dough baking",
        "printer driver cable scanner monitor keyboard port",
        "garden tomato soil seed compost shovel hedge",
    ];
    const STORY: &str = "volcano eruption lava ash crater magma evacuation";

    /// The `i`-th post of a subject: four of its seven words, rotating, and a word of its own.
    fn post(subject: &str, i: usize) -> String {
        let w: Vec<&str> = subject.split(' ').collect();
        let pick: Vec<&str> = (0..4).map(|k| w[(i + 2 * k) % w.len()]).collect();
        format!("{} unique{i}x{}", pick.join(" "), subject.len())
    }

    struct World {
        vocab: Vocabulary,
        tok: Tokenizer,
        t: u64,
    }

    impl World {
        fn new() -> World {
            let mut w = World {
                vocab: Vocabulary::new(100_000),
                tok: Tokenizer::new(2, 40, true, &[]),
                t: 0,
            };
            let past: Vec<String> = (0..200).map(|i| post(SUBJECTS[i % 5], i / 5)).collect();
            w.observe(&past);
            w
        }

        fn observe(&mut self, texts: &[String]) -> Vec<SparseDoc> {
            let toks: Vec<Vec<String>> = texts.iter().map(|s| self.tok.tokens(s)).collect();
            let (counts, _) = self.vocab.observe(&toks, self.t);
            self.t += 1;
            counts
                .iter()
                .map(|c| tfidf_l1(c, |id| self.vocab.df(id), self.vocab.docs_seen()))
                .collect()
        }
    }

    /// A batch: `story` posts of the new story (novel, high scores), one novel false alarm per
    /// subject (high score), and ordinary posts (low scores, not novel).
    fn batch(story: usize, alarms: bool, salt: usize) -> (Vec<String>, Vec<f64>, Vec<bool>) {
        let (mut texts, mut scores, mut novel) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..story {
            texts.push(post(STORY, i + salt));
            scores.push(0.95 - 0.001 * i as f64);
            novel.push(true);
        }
        for (s, subject) in SUBJECTS.iter().enumerate() {
            if alarms {
                texts.push(format!(
                    "{} odd{s}x{salt} rare{s}y{salt}",
                    post(subject, 99 + salt)
                ));
                scores.push(0.9);
                novel.push(true);
            }
            for i in 0..9 {
                texts.push(post(subject, 300 + 9 * s + i + salt));
                scores.push(0.1 + 0.04 * i as f64);
                novel.push(false);
            }
        }
        (texts, scores, novel)
    }

    fn step(
        ev: &Events,
        w: &mut World,
        b: &(Vec<String>, Vec<f64>, Vec<bool>),
    ) -> (Events, Vec<Topic>) {
        let vectors = w.observe(&b.0);
        ev.step(&EventBatch {
            timestep: w.t - 1,
            vectors: &vectors,
            vocab: &w.vocab,
            novel: &b.2,
            scores: &b.1,
        })
    }

    /// A burst of a new story becomes one emerging event holding exactly the story's posts,
    /// with the story's words as keywords; the scattered false alarms make no topic. The next
    /// day's posts of the story continue the event under its id; the tracker's parts rebuild
    /// it; it ends after `expire_after` quiet timesteps; a batch with nothing novel has no
    /// topic.
    #[test]
    fn a_burst_is_one_event_that_continues_and_ends() {
        let mut w = World::new();
        let ev = Events::new(EventParams::default()).unwrap();
        let day1 = batch(12, true, 0);
        let (ev, topics) = step(&ev, &mut w, &day1);
        assert_eq!(topics.len(), 1, "{topics:?}");
        let t = &topics[0];
        assert_eq!(t.kind, TopicKind::Emerging);
        assert_eq!(t.members, (0..12).collect::<Vec<_>>());
        let id = t.event.expect("an event id");
        let words: Vec<&str> = t.terms.iter().take(5).map(|k| w.vocab.term(k.0)).collect();
        assert!(words.iter().all(|k| STORY.contains(k)), "{words:?}");
        assert_eq!(ev.live().len(), 1);

        // the next day: fewer posts of the story, no longer novel, among ordinary ones
        let mut day2 = batch(6, false, 40);
        day2.1.iter_mut().take(6).for_each(|s| *s = 0.5);
        day2.2.iter_mut().for_each(|n| *n = false);
        let (ev, topics) = step(&ev, &mut w, &day2);
        assert_eq!(topics.len(), 1, "{topics:?}");
        assert_eq!(topics[0].kind, TopicKind::Continuing);
        assert_eq!(topics[0].event, Some(id));
        assert_eq!(topics[0].members, (0..6).collect::<Vec<_>>());
        assert_eq!(ev.live()[0].sizes, vec![(1, 12), (2, 6)]);

        let parts: BTreeMap<String, Vec<u8>> = ev.state_parts().into_iter().collect();
        let back = Events::from_state_parts(EventParams::default(), &parts).unwrap();
        assert_eq!(back, ev);

        let mut ev = ev;
        for _ in 0..EventParams::default().expire_after + 1 {
            let quiet = batch(0, false, 80 + w.t as usize);
            let (next, topics) = step(&ev, &mut w, &quiet);
            assert!(topics.is_empty(), "{topics:?}");
            ev = next;
        }
        assert!(ev.live().is_empty(), "the event ended");
    }

    /// Deterministic, every document in at most one topic, members in range, ids increasing
    /// and never reused.
    #[test]
    fn steps_are_deterministic_and_members_distinct() {
        let mut w1 = World::new();
        let mut w2 = World::new();
        let ev = Events::new(EventParams::default()).unwrap();
        let b = batch(15, true, 3);
        let (a, ta) = step(&ev, &mut w1, &b);
        let (c, tc) = step(&ev, &mut w2, &b);
        assert_eq!((a.clone(), ta.clone()), (c, tc));
        let mut seen = std::collections::HashSet::new();
        for t in &ta {
            for &m in &t.members {
                assert!(
                    m < b.0.len() && seen.insert(m),
                    "member {m} twice or out of range"
                );
            }
        }
        let ids: Vec<u64> = a.live().iter().map(|e| e.id).collect();
        assert!(ids.windows(2).all(|p| p[0] < p[1]));
        let mut bad = BTreeMap::new();
        for (n, b) in a.state_parts() {
            bad.insert(n, b);
        }
        let mut live = a.live().to_vec();
        if let Some(e) = live.first_mut() {
            e.id = 1_000;
            bad.insert(PART_LIVE.to_string(), part_bytes(&live));
            assert!(Events::from_state_parts(EventParams::default(), &bad).is_err());
        }
    }
}
