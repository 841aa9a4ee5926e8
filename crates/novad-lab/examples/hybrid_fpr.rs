//! The label-free adaptive threshold on the hybrid score (default ℓ1 model + document memory)
//! on 20 Newsgroups: how many non-novel documents it flags (false-positive rate) and how many
//! novel ones it catches, per CIKM timestep — the counterpart of `threshold_fpr` for the
//! hybrid verdicts.
//!
//!     cargo run --release --example hybrid_fpr -- [seed] [corpus]
use std::path::PathBuf;

use novad_lab::eval::{cikm_protocol, CikmSizes};
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
    let (mut fp, mut neg, mut tp, mut pos) = (0usize, 0usize, 0usize, 0usize);
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
        let (mut f, mut n, mut tt, mut p) = (0, 0, 0, 0);
        for (d, v) in ts.docs.iter().zip(&step.verdicts) {
            if v.empty {
                continue;
            }
            if d.novel {
                p += 1;
                tt += v.novel as usize;
            } else {
                n += 1;
                f += v.novel as usize;
            }
        }
        println!(
            "{t:>8} {:>10.4} {:>23.3} {:>19.3} {:>8}",
            step.threshold.unwrap_or(f64::NAN),
            f as f64 / n.max(1) as f64,
            tt as f64 / p.max(1) as f64,
            f + tt
        );
        fp += f;
        neg += n;
        tp += tt;
        pos += p;
    }
    println!(
        "all: FPR {:.3} ({fp}/{neg} non-novel flagged), TPR {:.3} ({tp}/{pos} novel flagged)",
        fp as f64 / neg.max(1) as f64,
        tp as f64 / pos.max(1) as f64
    );
}
