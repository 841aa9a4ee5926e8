//! Emerging topics: DICTCLUST on planted clusters, and topics through the daemon.
mod common;

use common::rng;
use novad_models::l1::coding::CodingParams;
use novad_models::l1::dictclust::{dictclust, pairwise_prf, TopicParams};
use novad_models::model::Topic;
use novad_models::text::{tfidf_l1, SparseDoc, Tokenizer, Vocabulary};
use rand::Rng;

/// Novel documents from `k` planted topics (15 words each, 25 draws per document, a few shared
/// words); returns vectors, labels and the vocabulary.
fn planted(k: usize, per_topic: usize, seed: u64) -> (Vec<SparseDoc>, Vec<usize>, Vocabulary) {
    let mut r = rng(seed);
    let mut texts = Vec::new();
    let mut labels = Vec::new();
    for i in 0..k * per_topic {
        let t = i % k;
        let mut w: Vec<String> = (0..25)
            .map(|_| format!("planted{t}term{}", r.random_range(0..15)))
            .collect();
        w.push(format!("shared{}", r.random_range(0..5)));
        texts.push(w.join(" "));
        labels.push(t);
    }
    let (docs, v) = vectorise(&texts);
    (docs, labels, v)
}

/// The texts' TF-IDF vectors over a vocabulary built from them.
fn vectorise(texts: &[String]) -> (Vec<SparseDoc>, Vocabulary) {
    let tok = Tokenizer::default();
    let toks: Vec<Vec<String>> = texts.iter().map(|t| tok.tokens(t)).collect();
    let mut v = Vocabulary::new(10_000);
    let (counts, _) = v.observe(&toks, 0);
    let docs = counts
        .iter()
        .map(|c| tfidf_l1(c, |id| v.df(id), v.docs_seen()))
        .collect();
    (docs, v)
}

/// What [`cluster_all`] found.
struct Clustered {
    topics: Vec<Topic>,
    /// Each document's cluster.
    found: Vec<Option<usize>>,
    /// Pairwise (P, R, F1) against the labels.
    prf: (f64, f64, f64),
}

/// DICTCLUST over every document (all novel, equal scores, k₁ atoms, support 3, the paper's
/// coding), scored against `labels`.
fn cluster_all(docs: &[SparseDoc], m: usize, labels: &[usize], k1: usize, seed: u64) -> Clustered {
    let novel: Vec<usize> = (0..docs.len()).collect();
    let scores = vec![1.0; docs.len()];
    let params = TopicParams {
        k1,
        min_support: 3,
        ..TopicParams::default()
    };
    let (topics, assign) = dictclust(
        docs,
        &scores,
        &novel,
        m,
        &CodingParams::paper(),
        &params,
        seed,
    );
    let truth: Vec<Option<usize>> = labels.iter().map(|&l| Some(l)).collect();
    let found: Vec<Option<usize>> = assign.iter().map(|a| a.map(|x| x as usize)).collect();
    let prf = pairwise_prf(&truth, &found);
    Clustered { topics, found, prf }
}

#[test]
fn dictclust_recovers_planted_clusters() {
    for (k, k1, seed) in [(3, 3, 1), (3, 6, 2), (4, 10, 3)] {
        let (docs, labels, vocab) = planted(k, 30, seed);
        let Clustered {
            topics,
            prf: (p, r, f1),
            ..
        } = cluster_all(&docs, vocab.len(), &labels, k1, seed);
        eprintln!(
            "k {k} k1 {k1}: P {p:.3} R {r:.3} F1 {f1:.3}, {} topics",
            topics.len()
        );
        assert!(f1 >= 0.9, "k {k} k1 {k1}: F1 {f1:.3} (P {p:.3}, R {r:.3})");
        // every topic's top terms come from one planted topic
        for t in &topics {
            let first = vocab.term(t.terms[0].0).to_string();
            let prefix = &first[..8];
            assert!(
                t.terms
                    .iter()
                    .take(3)
                    .all(|&(id, _)| vocab.term(id).starts_with(prefix)),
                "{first}"
            );
            assert!(
                !t.representatives.is_empty()
                    && t.representatives.iter().all(|r| t.members.contains(r))
            );
        }
    }
}

/// Two novel documents far longer than `TOPIC_MAX_TERMS` (the planted words of topic 2 many
/// times over, plus 600 words only they share) leave the planted clusters intact and join
/// topic 2.
#[test]
fn long_documents_join_their_topic() {
    let (k, per_topic, seed) = (3, 30, 5);
    let mut r = rng(seed);
    let mut texts = Vec::new();
    let mut labels = Vec::new();
    for i in 0..k * per_topic {
        let t = i % k;
        let w: Vec<String> = (0..25)
            .map(|_| format!("planted{t}term{}", r.random_range(0..15)))
            .collect();
        texts.push(w.join(" "));
        labels.push(t);
    }
    for _ in 0..2 {
        let mut w: Vec<String> = (0..15)
            .flat_map(|j| std::iter::repeat_n(format!("planted2term{j}"), 20))
            .collect();
        w.extend((0..600).map(|j| format!("tail{j}word")));
        texts.push(w.join(" "));
        labels.push(2);
    }
    let (docs, v) = vectorise(&texts);
    assert!(docs[docs.len() - 1].ids.len() > novad_models::l1::dictclust::TOPIC_MAX_TERMS);
    let Clustered {
        found,
        prf: (p, rc, f1),
        ..
    } = cluster_all(&docs, v.len(), &labels, 6, seed);
    assert!(f1 >= 0.9, "F1 {f1:.3} (P {p:.3}, R {rc:.3})");
    let n = docs.len();
    // documents 2, 5, 8, … are topic 2's
    let topic2 = found[2].expect("a planted document has a cluster");
    assert_eq!(found[n - 2], Some(topic2), "the first long document");
    assert_eq!(found[n - 1], Some(topic2), "the second long document");
}
