//! Evaluation protocols: how a labelled corpus becomes a sequence of timesteps with novelty
//! labels.
//!
//! - **CIKM** (SPEC §6, the CIKM 2011 protocol on 20 Newsgroups): the groups are put in a seeded
//!   random order; phase 0 takes `bootstrap_posts` posts of each of the first
//!   `bootstrap_groups` groups and bootstraps the dictionary; every later phase takes
//!   `novel_posts` posts of each of the next `new_groups` groups (novel: their group has not
//!   occurred before) mixed with `known_posts` posts of groups already seen (not novel), taken
//!   round-robin over the known groups. Within a group, posts are consumed in article-number
//!   order (train and test merged: they share one numbering per group), so each phase sees the
//!   next posts of every group it draws from. Posts whose body is blank are skipped. The
//!   documents of a phase are shuffled (seeded) so that novel and known posts are mixed.
//! - **Stream**: a JSONL file with `text`, `time` and `label` per line, cut into timesteps by
//!   day or week (UTC, weeks start on Monday); the first `bootstrap_periods` non-empty periods
//!   form the bootstrap timestep. A document is novel if its label never occurred in an earlier
//!   timestep.
//!
//! In both protocols the bootstrap timestep's documents are never novel, and every timestep
//! carries its documents' labels so any invariant can be re-checked.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::EvalError;
use crate::corpus::Post;

/// One document of an evaluation stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalDoc {
    pub text: String,
    /// The true topic (20NG group, or the stream's `label`).
    pub label: String,
    /// True when `label` did not occur in an earlier timestep.
    pub novel: bool,
    /// Where the document came from (`group/number` or `line N`).
    pub source: String,
}

/// One timestep (one batch given to every method).
#[derive(Debug, Clone, Serialize)]
pub struct Timestep {
    /// Display name (`phase 3`, `2024-05-01`, …).
    pub name: String,
    /// The bootstrap timestep (index 0): learns the initial dictionaries, never evaluated.
    pub bootstrap: bool,
    /// Labels occurring for the first time in this timestep.
    pub new_labels: Vec<String>,
    #[serde(skip)]
    pub docs: Vec<EvalDoc>,
}

impl Timestep {
    pub fn n_novel(&self) -> usize {
        self.docs.iter().filter(|d| d.novel).count()
    }

    /// The emerging-topic truth of the documents `idx` names, in that order: a novel
    /// document's new group (its label, numbered 0, 1, … in order of first appearance among
    /// them), `None` for a non-novel one.
    pub fn novel_groups(&self, idx: &[usize]) -> Vec<Option<usize>> {
        let mut groups: std::collections::HashMap<&str, usize> = Default::default();
        idx.iter()
            .map(|&i| {
                let d = &self.docs[i];
                d.novel.then(|| {
                    let n = groups.len();
                    *groups.entry(d.label.as_str()).or_insert(n)
                })
            })
            .collect()
    }
}

/// A whole evaluation stream. Timestep 0 is the bootstrap.
#[derive(Debug, Clone, Serialize)]
pub struct Stream {
    pub protocol: String,
    /// Protocol parameters and derived facts (group order, …), recorded in results.json.
    pub details: serde_json::Value,
    pub timesteps: Vec<Timestep>,
}

/// Sizes of the CIKM protocol. Defaults (see [`CikmSizes::default`]): 6 bootstrap groups × 150
/// posts, then 7 phases of 2 new groups × 100 posts + 800 posts of known groups (1,000 docs per
/// phase, 20 % novel; 7,900 documents in all, every one of the 20 groups used).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CikmSizes {
    pub bootstrap_groups: usize,
    pub bootstrap_posts: usize,
    pub new_groups: usize,
    pub novel_posts: usize,
    pub known_posts: usize,
    /// Phases after the bootstrap; `None` = as many as there are unused groups for.
    pub phases: Option<usize>,
}

impl Default for CikmSizes {
    fn default() -> Self {
        CikmSizes {
            bootstrap_groups: 6,
            bootstrap_posts: 150,
            new_groups: 2,
            novel_posts: 100,
            known_posts: 800,
            phases: None,
        }
    }
}

/// Salt mixed into the seed for the protocol's random choices, so that the protocol and the
/// model (which uses the seed itself) draw from unrelated streams.
const PROTOCOL_SALT: u64 = 0x5eed_c1c3_2011_0006;

/// Build the CIKM protocol from the posts of a 20NG archive (any order; they are grouped and
/// sorted by article number here). Deterministic in `seed`.
pub fn cikm_protocol(posts: &[Post], sizes: &CikmSizes, seed: u64) -> Result<Stream, EvalError> {
    let bad = |m: String| Err(EvalError::Protocol(m));
    if sizes.bootstrap_groups == 0 || sizes.bootstrap_posts == 0 {
        return bad("the bootstrap needs at least one group and one post per group".into());
    }
    if sizes.new_groups == 0 || sizes.novel_posts == 0 {
        return bad("every phase must add at least one new group with at least one post".into());
    }
    let mut by_group: BTreeMap<&str, Vec<&Post>> = BTreeMap::new();
    for p in posts {
        if !p.text.trim().is_empty() {
            by_group.entry(p.group.as_str()).or_default().push(p);
        }
    }
    for v in by_group.values_mut() {
        v.sort_by(|a, b| (a.number, &a.split).cmp(&(b.number, &b.split)));
    }
    let n_groups = by_group.len();
    if n_groups < sizes.bootstrap_groups + sizes.new_groups {
        return bad(format!(
            "the corpus has {n_groups} groups; the protocol needs at least {} ({} bootstrap + {} new)",
            sizes.bootstrap_groups + sizes.new_groups,
            sizes.bootstrap_groups,
            sizes.new_groups
        ));
    }
    let max_phases = (n_groups - sizes.bootstrap_groups) / sizes.new_groups;
    let phases = sizes.phases.unwrap_or(max_phases);
    if phases == 0 || phases > max_phases {
        return bad(format!(
            "{phases} phases requested; with {n_groups} groups, {} bootstrap groups and {} new \
             groups per phase there is room for 1..={max_phases}",
            sizes.bootstrap_groups, sizes.new_groups
        ));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ PROTOCOL_SALT);
    let mut order: Vec<&str> = by_group.keys().copied().collect();
    order.shuffle(&mut rng);
    let mut cursor: BTreeMap<&str, usize> = order.iter().map(|&g| (g, 0)).collect();
    let mut take = |g: &str, n: usize| -> Vec<&Post> {
        let c = cursor.get_mut(g).unwrap();
        let all = &by_group[g];
        let end = (*c + n).min(all.len());
        let out = all[*c..end].to_vec();
        *c = end;
        out
    };
    let doc = |p: &Post, novel: bool| EvalDoc {
        text: p.text.clone(),
        label: p.group.clone(),
        novel,
        source: format!("{}/{}", p.group, p.number),
    };

    let mut timesteps = Vec::with_capacity(phases + 1);
    let boot_groups: Vec<&str> = order[..sizes.bootstrap_groups].to_vec();
    let mut docs = Vec::new();
    for &g in &boot_groups {
        let got = take(g, sizes.bootstrap_posts);
        if got.len() < sizes.bootstrap_posts {
            return bad(format!(
                "group {g} has {} non-blank posts, the bootstrap wants {}",
                got.len(),
                sizes.bootstrap_posts
            ));
        }
        docs.extend(got.into_iter().map(|p| doc(p, false)));
    }
    docs.shuffle(&mut rng);
    timesteps.push(Timestep {
        name: "phase 0 (bootstrap)".into(),
        bootstrap: true,
        new_labels: boot_groups.iter().map(|s| s.to_string()).collect(),
        docs,
    });
    let mut known: Vec<&str> = boot_groups.clone();
    let mut phase_groups = vec![boot_groups
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()];
    for ph in 1..=phases {
        let lo = sizes.bootstrap_groups + (ph - 1) * sizes.new_groups;
        let new: Vec<&str> = order[lo..lo + sizes.new_groups].to_vec();
        let mut docs = Vec::new();
        for &g in &new {
            let got = take(g, sizes.novel_posts);
            if got.len() < sizes.novel_posts {
                return bad(format!(
                    "group {g} has {} non-blank posts, phase {ph} wants {} of them",
                    got.len(),
                    sizes.novel_posts
                ));
            }
            docs.extend(got.into_iter().map(|p| doc(p, true)));
        }
        // Known posts: round-robin over the known groups, starting at a phase-dependent group
        // so that the remainder of known_posts / |known| rotates.
        let mut taken = 0;
        let mut exhausted = vec![false; known.len()];
        let mut i = ph % known.len();
        while taken < sizes.known_posts && exhausted.iter().any(|e| !e) {
            let j = i % known.len();
            if !exhausted[j] {
                let got = take(known[j], 1);
                if got.is_empty() {
                    exhausted[j] = true;
                } else {
                    docs.extend(got.into_iter().map(|p| doc(p, false)));
                    taken += 1;
                }
            }
            i += 1;
        }
        if taken < sizes.known_posts {
            return bad(format!(
                "phase {ph}: the known groups have only {taken} unused posts left, {} wanted",
                sizes.known_posts
            ));
        }
        docs.shuffle(&mut rng);
        timesteps.push(Timestep {
            name: format!("phase {ph}"),
            bootstrap: false,
            new_labels: new.iter().map(|s| s.to_string()).collect(),
            docs,
        });
        known.extend(new.iter().copied());
        phase_groups.push(new.iter().map(|s| s.to_string()).collect());
    }
    let details = serde_json::json!({
        "sizes": sizes,
        "phases": phases,
        "group_order": order,
        "groups_per_phase": phase_groups,
        "protocol_seed": seed,
        "protocol_salt": format!("{PROTOCOL_SALT:#x}"),
        "order_within_group": "article number (train and test merged)",
        "skipped": "posts with a blank body",
    });
    Ok(Stream {
        protocol: "cikm".into(),
        details,
        timesteps,
    })
}

/// Length of a stream period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Period {
    Day,
    Week,
}

const DAY_MS: i64 = 86_400_000;

impl Period {
    /// The period index of a Unix-milliseconds time (UTC). Weeks start on Monday.
    pub fn index(self, ms: i64) -> i64 {
        let day = ms.div_euclid(DAY_MS);
        match self {
            Period::Day => day,
            // 1970-01-01 was a Thursday: day + 3 puts Mondays on multiples of 7.
            Period::Week => (day + 3).div_euclid(7),
        }
    }

    /// The first day (YYYY-MM-DD) of a period index.
    pub fn start_date(self, index: i64) -> String {
        let day = match self {
            Period::Day => index,
            Period::Week => index * 7 - 3,
        };
        chrono::DateTime::from_timestamp_millis(day * DAY_MS)
            .map(|d| d.format("%Y-%m-%d").to_string())
            .unwrap_or_else(|| format!("day {day}"))
    }
}

/// Read a JSONL stream corpus: one object per non-blank line with `text` (string), `time`
/// (RFC 3339, `YYYY-MM-DD`, or Unix seconds as string or number) and `label` (string or
/// number). Documents are ordered by time (stably) and cut into periods.
pub fn read_jsonl_stream(
    path: &Path,
    period: Period,
    bootstrap_periods: usize,
) -> Result<Stream, EvalError> {
    let raw = std::fs::read_to_string(path).map_err(|source| EvalError::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse_jsonl_stream(&raw, period, bootstrap_periods).map_err(|(line, msg)| EvalError::Jsonl {
        path: path.display().to_string(),
        line,
        msg,
    })
}

/// [`read_jsonl_stream`] on text already in memory. Errors carry the 1-based line.
pub fn parse_jsonl_stream(
    raw: &str,
    period: Period,
    bootstrap_periods: usize,
) -> Result<Stream, (usize, String)> {
    if bootstrap_periods == 0 {
        return Err((0, "bootstrap_periods must be at least 1".into()));
    }
    let mut rows: Vec<(i64, usize, String, String)> = Vec::new();
    for (i, line) in raw.lines().enumerate() {
        let ln = i + 1;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| (ln, format!("not JSON: {e}")))?;
        let obj = v.as_object().ok_or((ln, "not a JSON object".to_string()))?;
        let text = obj
            .get("text")
            .and_then(|t| t.as_str())
            .ok_or((ln, "missing string field `text`".to_string()))?;
        let time = match obj.get("time") {
            Some(serde_json::Value::String(s)) => {
                novad::batch::parse_time(s).map_err(|e| (ln, e))?
            }
            Some(serde_json::Value::Number(n)) => {
                novad::batch::parse_time(&n.to_string()).map_err(|e| (ln, e))?
            }
            _ => return Err((ln, "missing field `time` (string or number)".into())),
        };
        let label = match obj.get("label") {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Number(n)) => n.to_string(),
            _ => return Err((ln, "missing field `label` (string or number)".into())),
        };
        rows.push((time, ln, label, text.to_string()));
    }
    rows.sort_by_key(|r| (r.0, r.1));
    let mut periods: BTreeMap<i64, Vec<(usize, String, String)>> = BTreeMap::new();
    for (time, ln, label, text) in rows {
        periods
            .entry(period.index(time))
            .or_default()
            .push((ln, label, text));
    }
    if periods.len() <= bootstrap_periods {
        return Err((
            0,
            format!(
                "the stream has {} non-empty {period:?} period(s); {bootstrap_periods} bootstrap \
                 period(s) plus at least one evaluated period are needed",
                periods.len()
            ),
        ));
    }
    let mut seen: HashSet<String> = HashSet::new();
    let mut timesteps = Vec::new();
    let mut boot_docs = Vec::new();
    let mut boot_names = Vec::new();
    let mut names = Vec::new();
    for (n, (idx, docs)) in periods.into_iter().enumerate() {
        let name = period.start_date(idx);
        names.push(name.clone());
        if n < bootstrap_periods {
            boot_names.push(name);
            boot_docs.extend(docs);
            if n + 1 == bootstrap_periods {
                let docs: Vec<EvalDoc> = std::mem::take(&mut boot_docs)
                    .into_iter()
                    .map(|(ln, label, text)| EvalDoc {
                        text,
                        label,
                        novel: false,
                        source: format!("line {ln}"),
                    })
                    .collect();
                let mut new_labels: Vec<String> = Vec::new();
                for d in &docs {
                    if seen.insert(d.label.clone()) {
                        new_labels.push(d.label.clone());
                    }
                }
                timesteps.push(Timestep {
                    name: format!(
                        "{} .. {} (bootstrap)",
                        boot_names[0],
                        boot_names.last().unwrap()
                    ),
                    bootstrap: true,
                    new_labels,
                    docs,
                });
            }
            continue;
        }
        let docs: Vec<EvalDoc> = docs
            .into_iter()
            .map(|(ln, label, text)| EvalDoc {
                novel: !seen.contains(&label),
                text,
                label,
                source: format!("line {ln}"),
            })
            .collect();
        let mut new_labels: Vec<String> = Vec::new();
        for d in &docs {
            if d.novel && !new_labels.contains(&d.label) {
                new_labels.push(d.label.clone());
            }
        }
        seen.extend(new_labels.iter().cloned());
        timesteps.push(Timestep {
            name,
            bootstrap: false,
            new_labels,
            docs,
        });
    }
    let details = serde_json::json!({
        "period": period,
        "bootstrap_periods": bootstrap_periods,
        "periods": names,
        "novel": "label never occurred in an earlier timestep",
    });
    Ok(Stream {
        protocol: "stream".into(),
        details,
        timesteps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn novel_groups_number_new_labels_by_first_appearance_among_the_chosen() {
        let doc = |label: &str, novel: bool| EvalDoc {
            text: String::new(),
            label: label.into(),
            novel,
            source: String::new(),
        };
        let ts = Timestep {
            name: "t".into(),
            bootstrap: false,
            new_labels: vec![],
            docs: vec![
                doc("sci.space", true),
                doc("rec.autos", false),
                doc("talk.politics", true),
                doc("sci.space", true),
                doc("misc.forsale", true),
            ],
        };
        assert_eq!(
            ts.novel_groups(&[0, 1, 2, 3]),
            vec![Some(0), None, Some(1), Some(0)]
        );
        // only the chosen documents count, in the order given
        assert_eq!(ts.novel_groups(&[4, 2, 1]), vec![Some(0), Some(1), None]);
        assert!(ts.novel_groups(&[]).is_empty());
    }

    fn post(group: &str, number: u64) -> Post {
        Post {
            group: group.into(),
            split: "train".into(),
            number,
            text: format!("{group} post {number}"),
        }
    }

    #[test]
    fn cikm_small_corpus_invariants() {
        let groups = ["a", "b", "c", "d", "e", "f", "g"];
        let mut posts = Vec::new();
        for g in groups {
            for n in (1..=20).rev() {
                posts.push(post(g, n * 10));
            }
        }
        let sizes = CikmSizes {
            bootstrap_groups: 3,
            bootstrap_posts: 4,
            new_groups: 2,
            novel_posts: 3,
            known_posts: 5,
            phases: None,
        };
        let s = cikm_protocol(&posts, &sizes, 7).unwrap();
        assert_eq!(s.timesteps.len(), 3);
        assert_eq!(s.timesteps[0].docs.len(), 12);
        assert!(s.timesteps[0].docs.iter().all(|d| !d.novel));
        for t in &s.timesteps[1..] {
            assert_eq!(t.docs.len(), 2 * 3 + 5);
            assert_eq!(t.n_novel(), 6);
        }
        // the bootstrap takes the first (lowest-numbered) posts of its groups
        let mut nums: Vec<u64> = s.timesteps[0]
            .docs
            .iter()
            .filter(|d| d.label == s.timesteps[0].new_labels[0])
            .map(|d| d.source.rsplit('/').next().unwrap().parse().unwrap())
            .collect();
        nums.sort_unstable();
        assert_eq!(nums, vec![10, 20, 30, 40]);
        // too many phases is an error
        let mut big = sizes.clone();
        big.phases = Some(3);
        assert!(cikm_protocol(&posts, &big, 7).is_err());
    }

    #[test]
    fn stream_periods_and_novelty() {
        let raw = r#"
{"text":"a1","time":"2024-05-01T10:00:00Z","label":"x"}
{"text":"a2","time":"2024-05-01","label":"y"}
{"text":"b1","time":"2024-05-02T01:00:00Z","label":"x"}
{"text":"b2","time":1714694400,"label":"z"}
{"text":"c1","time":"2024-05-04","label":"z"}
{"text":"c2","time":"2024-05-04","label":7}
"#;
        let s = parse_jsonl_stream(raw, Period::Day, 1).unwrap();
        assert_eq!(s.timesteps.len(), 4);
        assert!(s.timesteps[0].bootstrap);
        assert_eq!(s.timesteps[0].docs.len(), 2);
        let novel: Vec<Vec<bool>> = s.timesteps[1..]
            .iter()
            .map(|t| t.docs.iter().map(|d| d.novel).collect())
            .collect();
        // 05-02: x known; 05-03 (1714694400 = 2024-05-03T00:00Z): z new; 05-04: z known, 7 new
        assert_eq!(novel, vec![vec![false], vec![true], vec![false, true]]);
        let w = parse_jsonl_stream(raw, Period::Week, 1);
        assert!(w.is_err(), "a single week leaves nothing to evaluate");
        let e = parse_jsonl_stream("{\"text\":\"a\",\"time\":\"2024-01-01\"}\n", Period::Day, 1)
            .unwrap_err();
        assert_eq!(e.0, 1);
        assert!(e.1.contains("label"));
    }

    #[test]
    fn weeks_start_on_monday() {
        let ms = |d: &str| novad::batch::parse_time(d).unwrap();
        // 2024-04-29 is a Monday
        assert_eq!(
            Period::Week.index(ms("2024-04-29")),
            Period::Week.index(ms("2024-05-05T23:59:59Z"))
        );
        assert_ne!(
            Period::Week.index(ms("2024-04-28")),
            Period::Week.index(ms("2024-04-29"))
        );
        assert_eq!(
            Period::Week.start_date(Period::Week.index(ms("2024-05-02"))),
            "2024-04-29"
        );
    }
}

/// How a threshold rule's verdicts split over the labels of one timestep (empty documents are
/// left out): non-novel documents flagged (false positives) and novel ones flagged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlagCounts {
    pub false_pos: usize,
    pub non_novel: usize,
    pub true_pos: usize,
    pub novel: usize,
}

impl FlagCounts {
    /// Count `(label novel, verdict empty, verdict novel)` triples.
    pub fn count(verdicts: impl IntoIterator<Item = (bool, bool, bool)>) -> FlagCounts {
        let mut c = FlagCounts::default();
        for (label, empty, flagged) in verdicts {
            if empty {
                continue;
            }
            if label {
                c.novel += 1;
                c.true_pos += flagged as usize;
            } else {
                c.non_novel += 1;
                c.false_pos += flagged as usize;
            }
        }
        c
    }

    pub fn add(&mut self, o: FlagCounts) {
        self.false_pos += o.false_pos;
        self.non_novel += o.non_novel;
        self.true_pos += o.true_pos;
        self.novel += o.novel;
    }

    /// Share of non-novel documents flagged (0 when there are none).
    pub fn fpr(&self) -> f64 {
        self.false_pos as f64 / self.non_novel.max(1) as f64
    }

    /// Share of novel documents flagged (0 when there are none).
    pub fn tpr(&self) -> f64 {
        self.true_pos as f64 / self.novel.max(1) as f64
    }
}
