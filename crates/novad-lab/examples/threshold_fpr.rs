//! The label-free default threshold on 20 Newsgroups: how many non-novel documents it flags
//! (false-positive rate) and how many novel ones it catches, per CIKM timestep.
//!
//!     cargo run --release --example threshold_fpr -- [seed] [params.toml]
//!
//! Runs the detector (the default parameters, or a TOML file) through the CIKM protocol of
//! `novad eval` and reads each verdict's `novel` flag as the daemon would store it.
use std::path::Path;

use novad_lab::eval::{cikm_protocol, CikmSizes, FlagCounts};
use novad_models::{Model, Params};

fn main() {
    let mut a = std::env::args().skip(1);
    let seed: u64 = a.next().map(|s| s.parse().unwrap()).unwrap_or(0);
    let mut params = match a.next() {
        Some(p) => toml::from_str(&std::fs::read_to_string(p).unwrap()).unwrap(),
        None => Params::default(),
    };
    params.seed = seed;
    let posts =
        novad_lab::corpus::read_20news(Path::new("../shared/data/20news-bydate.tar.gz")).unwrap();
    let stream = cikm_protocol(&posts, &CikmSizes::default(), seed).unwrap();
    let mut model = Model::new(params).unwrap();
    println!("timestep  threshold  FPR(non-novel flagged)  TPR(novel flagged)  flagged");
    let mut all = FlagCounts::default();
    for (t, ts) in stream.timesteps.iter().enumerate() {
        let texts: Vec<&str> = ts.docs.iter().map(|d| d.text.as_str()).collect();
        let (m, out) = model.step(&texts).unwrap();
        model = m;
        if ts.bootstrap {
            continue;
        }
        let c = FlagCounts::count(
            ts.docs
                .iter()
                .zip(&out.verdicts)
                .map(|(d, v)| (d.novel, v.empty, v.novel)),
        );
        println!(
            "{t:>8} {:>10.4} {:>23.3} {:>19.3} {:>8}",
            out.stats.threshold.unwrap_or(f64::NAN),
            c.fpr(),
            c.tpr(),
            out.stats.novel
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
