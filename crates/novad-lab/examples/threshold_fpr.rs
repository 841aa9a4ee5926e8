//! The label-free adaptive threshold on 20 Newsgroups, as the daemon runs it
//! (`Engine::step_at`): how many non-novel documents it flags (false-positive rate) and how many
//! novel ones it catches, per CIKM timestep.
//!
//!     cargo run --release -p novad-lab --example threshold_fpr -- [seed] [hybrid|model|params.toml]
//!
//! `hybrid` (the default): the default ℓ1 parameters, whose hybrid detector decides; `model`:
//! the same without the detector (the ℓ1 score decides); or an ℓ1 parameter file. Reads each
//! verdict's `novel` flag as the daemon would store it. The corpus is `$NOVAD_20NG` or
//! `../shared/data/20news-bydate.tar.gz`.
use novad_lab::eval::{cikm_protocol, CikmSizes, FlagCounts};
use novad_models::threshold::ThresholdRule;
use novad_models::{Engine, ModelParams, Params};

fn main() {
    let mut a = std::env::args().skip(1);
    let seed: u64 = a.next().map_or(0, |s| s.parse().expect("seed"));
    let mut params = match a.next().as_deref() {
        None | Some("hybrid") => Params::default(),
        // the model's own score with its own default rule, as `--detector model` makes it
        Some("model") => Params {
            hybrid: None,
            threshold: ThresholdRule::default_adaptive(),
            ..Params::default()
        },
        Some(p) => toml::from_str(&std::fs::read_to_string(p).expect("params file"))
            .expect("ℓ1 parameters"),
    };
    params.seed = seed;
    let corpus = novad_lab::corpus::archive_20news();
    let posts = novad_lab::corpus::read_20news(&corpus).expect("read the corpus");
    let stream = cikm_protocol(&posts, &CikmSizes::default(), seed).expect("protocol");
    let mut engine = Engine::new(ModelParams::L1(params)).expect("valid parameters");
    println!("timestep  threshold  FPR(non-novel flagged)  TPR(novel flagged)  flagged");
    let mut all = FlagCounts::default();
    for (t, ts) in stream.timesteps.iter().enumerate() {
        let texts: Vec<&str> = ts.docs.iter().map(|d| d.text.as_str()).collect();
        let times = vec![t as i64; texts.len()];
        let (next, out) = engine.step_at(&texts, &times).expect("engine step");
        engine = next;
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
