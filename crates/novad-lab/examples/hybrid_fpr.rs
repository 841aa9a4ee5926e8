//! The label-free adaptive threshold on the hybrid score (default ℓ1 model + document memory)
//! on 20 Newsgroups: how many non-novel documents it flags (false-positive rate) and how many
//! novel ones it catches, per CIKM timestep — the counterpart of `threshold_fpr` for the
//! hybrid verdicts.
//!
//!     cargo run --release --example hybrid_fpr -- [seed] [corpus]
use std::path::PathBuf;

use novad_lab::eval::{cikm_protocol, CikmSizes, FlagCounts};
use novad_models::memory::{DocRef, Hybrid, HybridDoc, HybridParams, TermVector};
use novad_models::{Model, Params};

fn main() {
    let mut a = std::env::args().skip(1);
    let seed: u64 = a.next().map_or(0, |s| s.parse().expect("seed"));
    let corpus = PathBuf::from(
        a.next()
            .unwrap_or_else(|| "../shared/data/20news-bydate.tar.gz".into()),
    );
    let params = Params {
        seed,
        ..Params::default()
    };
    let posts = novad_lab::corpus::read_20news(&corpus).expect("read the corpus");
    let stream = cikm_protocol(&posts, &CikmSizes::default(), seed).expect("protocol");
    let mut model = Model::new(params.clone()).expect("valid parameters");
    let mut hybrid = Hybrid::new(HybridParams::default()).expect("valid parameters");
    println!("timestep  threshold  FPR(non-novel flagged)  TPR(novel flagged)  flagged");
    let mut all = FlagCounts::default();
    for (t, ts) in stream.timesteps.iter().enumerate() {
        let texts: Vec<&str> = ts.docs.iter().map(|d| d.text.as_str()).collect();
        let (next, out) = model.step(&texts).expect("model step");
        let vectors: Vec<TermVector> = out
            .vectors
            .iter()
            .map(|v| TermVector::from_sparse(v, |id| next.vocab().term(id)))
            .collect();
        let docs: Vec<HybridDoc> = vectors
            .iter()
            .zip(&out.verdicts)
            .enumerate()
            .map(|(i, (v, verdict))| HybridDoc {
                reference: DocRef {
                    timestep: t as u64,
                    seq: i as u32,
                    time: t as i64,
                },
                vector: v,
                model_score: verdict.score,
            })
            .collect();
        let step = hybrid
            .step(&docs, &params.threshold, out.stats.bootstrap)
            .expect("hybrid step");
        hybrid.apply(step.plan);
        model = next;
        if ts.bootstrap {
            continue;
        }
        let c = FlagCounts::count(
            ts.docs
                .iter()
                .zip(&step.verdicts)
                .map(|(d, v)| (d.novel, v.empty, v.novel)),
        );
        println!(
            "{t:>8} {:>10.4} {:>23.3} {:>19.3} {:>8}",
            step.threshold.unwrap_or(f64::NAN),
            c.fpr(),
            c.tpr(),
            c.false_pos + c.true_pos
        );
        all.add(c);
    }
    println!(
        "all: FPR {:.3} ({}/{} non-novel flagged), TPR {:.3} ({}/{} novel flagged)",
        all.fpr(),
        all.false_pos,
        all.non_novel,
        all.tpr(),
        all.true_pos,
        all.novel
    );
}
