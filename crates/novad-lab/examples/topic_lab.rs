//! Emerging-topic clustering lab: replays a `novad eval` run's detection scores
//! (`scores.jsonl`) on the same CIKM stream and reports, per clustering variant, the average
//! best pairwise F1 over the evaluated timesteps (threshold swept as in the eval) and the F1 with
//! perfect detection. Clustering only — seconds per variant instead of a full eval.
//!
//! `cargo run --release --example topic_lab -- EVAL_OUT_DIR [SEED] [VARIANT,…]`

use std::collections::HashMap;
use std::path::PathBuf;

use novad_lab::eval::{
    best_point, cikm_protocol, compact, dictclust_assign, round_scores, spherical_kmeans_best,
    sweep, CikmSizes, StreamVectorizer,
};
use novad_models::l1::dictclust::TopicParams;
use novad_models::text::SparseDoc;
use novad_models::Params;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = PathBuf::from(&args[1]);
    let seed: u64 = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(0);
    let variants: Vec<String> = args
        .get(3)
        .map(|s| s.split(',').map(String::from).collect())
        .unwrap_or_else(|| vec!["dict".into(), "km".into()]);
    let params = Params::default();
    let posts =
        novad_lab::corpus::read_20news(&PathBuf::from("../shared/data/20news-bydate.tar.gz"))
            .expect("corpus");
    let stream = cikm_protocol(&posts, &CikmSizes::default(), seed).expect("protocol");
    // scores by timestep, in document order
    let text = std::fs::read_to_string(dir.join("scores.jsonl")).expect("scores.jsonl");
    let mut by_step: HashMap<u64, Vec<serde_json::Value>> = HashMap::new();
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        by_step
            .entry(v["timestep"].as_u64().unwrap())
            .or_default()
            .push(v);
    }
    let mut vz = StreamVectorizer::new(&params.text, params.tokenizer);
    let mut model = novad_models::Model::new(params.clone()).unwrap();
    let fractions = [0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.7, 1.0];
    let mut sums: HashMap<(String, &str), (f64, f64, f64, usize)> = HashMap::new();
    for (t, ts) in stream.timesteps.iter().enumerate() {
        let texts: Vec<&str> = ts.docs.iter().map(|d| d.text.as_str()).collect();
        let vb = vz.step(&texts);
        let old_m = model.vocab().len();
        let old_dict = model.dictionary().to_dense();
        let (next, out) = model.step(&texts).unwrap();
        assert_eq!(out.vectors, vb.vectors, "engine and eval vectors agree");
        assert_eq!(vb.change.evicted, 0);
        let m_new = next.vocab().len();
        model = next;
        if ts.bootstrap {
            continue;
        }
        // Â_t padded to the new vocabulary (new terms have zero rows)
        let mut dict_t = ndarray::Array2::<f32>::zeros((m_new, old_dict.ncols()));
        dict_t.slice_mut(ndarray::s![..old_m, ..]).assign(&old_dict);
        let rows = &by_step[&(t as u64)];
        let keep: Vec<usize> = (0..ts.docs.len())
            .filter(|&i| !vb.vectors[i].is_empty())
            .collect();
        let truth = ts.novel_groups(&keep);
        let docs: Vec<SparseDoc> = keep.iter().map(|&i| vb.vectors[i].clone()).collect();
        let unseen: Vec<f64> = docs
            .iter()
            .map(|d| {
                d.ids
                    .iter()
                    .zip(&d.vals)
                    .filter(|(&i, _)| (i as usize) >= old_m)
                    .map(|(_, v)| v)
                    .sum()
            })
            .collect();
        let judge = Judge {
            dict: &dict_t,
            unseen: &unseen,
            docs: &docs,
            params: &params,
        };
        let pick = |key: &str| -> Vec<f64> {
            round_scores(
                &keep
                    .iter()
                    .map(|&i| rows[i]["scores"][key].as_f64().unwrap())
                    .collect::<Vec<_>>(),
                1e-9,
            )
        };
        let det: [(&str, Vec<f64>); 3] = [
            ("l1", pick("l1-online")),
            ("nn", pick("nn")),
            (
                "oracle",
                truth.iter().map(|x| x.is_some() as u8 as f64).collect(),
            ),
        ];
        let dict_seed = params.seed ^ (t as u64).wrapping_mul(0xA24B_AED4_963E_E407);
        let km_seed = seed ^ 0x6b6d_6561_6e73_0000 ^ (t as u64 + 1);
        if let Ok(f) = std::env::var("LAB_DIAG") {
            let f: f64 = f.parse().unwrap();
            let sc = &det[0].1;
            let mut sorted = sc.clone();
            sorted.sort_by(|a, b| b.total_cmp(a));
            let thr = sorted[((f * sc.len() as f64) as usize).min(sc.len() - 1)];
            let sel: Vec<usize> = (0..sc.len()).filter(|&j| sc[j] >= thr).collect();
            let (local, m) = compact(&docs, &sel);
            let found = cluster(&variants[0], &local, m, &params, dict_seed, km_seed);
            judge.report(t, &sel, &found, &truth, sc);
            continue;
        }
        let dets: Vec<String> = std::env::var("LAB_DETECTORS")
            .unwrap_or_else(|_| "l1,nn,oracle".into())
            .split(',')
            .map(String::from)
            .collect();
        for v in &variants {
            for (dname, scores) in det.iter().filter(|d| dets.iter().any(|x| x == d.0)) {
                let fr: Vec<f64> = if *dname == "oracle" {
                    vec![truth.iter().filter(|x| x.is_some()).count() as f64 / truth.len() as f64]
                } else {
                    fractions.to_vec()
                };
                let pts = sweep(scores, &truth, &fr, |sel| {
                    let (local, m) = compact(&docs, sel);
                    let base = v.split('+').next().unwrap();
                    let mut found = cluster(base, &local, m, &params, dict_seed, km_seed);
                    if let Some(f) = v.split('+').nth(1) {
                        let thr = sel.iter().map(|&j| scores[j]).fold(f64::INFINITY, f64::min);
                        let factor: f64 = f.parse().unwrap();
                        judge.filter(sel, &mut found, thr * factor);
                    }
                    found
                });
                let b = best_point(&pts).unwrap();
                let e = sums.entry((v.clone(), dname)).or_default();
                e.0 += b.f1;
                e.1 += b.precision;
                e.2 += b.recall;
                e.3 += 1;
            }
        }
        eprint!(".");
    }
    eprintln!();
    let mut keys: Vec<_> = sums.keys().cloned().collect();
    keys.sort();
    for k in keys {
        let (f, p, r, n) = sums[&k];
        let n = n as f64;
        println!(
            "{:<28} {:<7} F1 {:.3}  P {:.3}  R {:.3}",
            k.0,
            k.1,
            f / n,
            p / n,
            r / n
        );
    }
}

fn cluster(
    variant: &str,
    docs: &[SparseDoc],
    m: usize,
    params: &Params,
    dict_seed: u64,
    km_seed: u64,
) -> Vec<Option<usize>> {
    let mut tp: TopicParams = params.topics.clone().unwrap_or_default();
    let mut coding = params.coding.clone();
    let parts: Vec<&str> = variant.split(':').collect();
    for kv in &parts[1..] {
        let (k, v) = kv.split_once('=').unwrap();
        match k {
            "k1" => tp.k1 = v.parse().unwrap(),
            "merge" => tp.merge_cosine = v.parse().unwrap(),
            "alt" => tp.alternations = v.parse().unwrap(),
            "sup" => tp.min_support = v.parse().unwrap(),
            "w" => coding.absent_weight = v.parse().unwrap(),
            "lam" => tp.lambda = v.parse().unwrap(),
            "iter" => coding.max_iter = v.parse().unwrap(),
            "tol" => coding.tol = v.parse().unwrap(),
            _ => panic!("unknown knob {k}"),
        }
    }
    match parts[0] {
        "dict" => dictclust_assign(docs, m, &coding, &tp, dict_seed),
        "km" => spherical_kmeans_best(docs, m, tp.k1, 8, 20, km_seed).0,
        other => panic!("unknown variant {other}"),
    }
}

struct Judge<'a> {
    dict: &'a ndarray::Array2<f32>,
    unseen: &'a [f64],
    docs: &'a [SparseDoc],
    params: &'a Params,
}

/// A cluster's centroid judged against Â_t.
struct Centroid {
    /// The detector's score of the centroid: (objective + α · never-seen mass) / (1 + α).
    score: f64,
    /// Its ℓ1 coding objective over Â_t alone.
    objective: f64,
    /// Mean never-seen mass of the members.
    unseen: f64,
    /// Centroid mass on terms shared by ≥ 2 members.
    shared: f64,
}

impl Judge<'_> {
    /// Members (positions in `sel`) of every cluster of `found`, by cluster.
    fn clusters(found: &[Option<usize>]) -> std::collections::BTreeMap<usize, Vec<usize>> {
        let mut clusters: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
        for (q, c) in found.iter().enumerate() {
            if let Some(c) = c {
                clusters.entry(*c).or_default().push(q);
            }
        }
        clusters
    }

    /// The centroid (mean unit-ℓ1 member vector) of `mem` and its score against Â_t.
    fn centroid(&self, sel: &[usize], mem: &[usize]) -> Centroid {
        let mut acc: std::collections::BTreeMap<u32, (f64, usize)> = Default::default();
        let mut unseen = 0.0;
        for &q in mem {
            let d = &self.docs[sel[q]];
            for (&i, &v) in d.ids.iter().zip(&d.vals) {
                let e = acc.entry(i).or_insert((0.0, 0));
                e.0 += v / mem.len() as f64;
                e.1 += 1;
            }
            unseen += self.unseen[sel[q]] / mem.len() as f64;
        }
        let cen = SparseDoc {
            ids: acc.keys().copied().collect(),
            vals: acc.values().map(|x| x.0).collect(),
        };
        let cd = novad_models::l1::coding::CodingDict::from_dense(
            self.dict.view(),
            self.params.coding.step,
        );
        let code = novad_models::l1::coding::code_batch(
            &cd,
            std::slice::from_ref(&cen),
            &self.params.coding,
        );
        let alpha = self.params.unseen_weight;
        Centroid {
            score: (code[0].score + alpha * unseen) / (1.0 + alpha),
            objective: code[0].score,
            unseen,
            shared: acc.values().filter(|x| x.1 >= 2).map(|x| x.0).sum(),
        }
    }

    fn report(
        &self,
        t: usize,
        sel: &[usize],
        found: &[Option<usize>],
        truth: &[Option<usize>],
        scores: &[f64],
    ) {
        for (c, mem) in Self::clusters(found) {
            let cen = self.centroid(sel, &mem);
            let nov = mem.iter().filter(|&&q| truth[sel[q]].is_some()).count();
            let ms: f64 = mem.iter().map(|&q| scores[sel[q]]).sum::<f64>() / mem.len() as f64;
            println!(
                "t{t} c{c:>2} size {:>4} novel {:.2}  centroid {:.3} (obj {:.3}) mean {:.3} unseen {:.3} shared {:.3}",
                mem.len(),
                nov as f64 / mem.len() as f64,
                cen.score,
                cen.objective,
                ms,
                cen.unseen,
                cen.shared
            );
        }
    }

    /// Drop (set to None) every cluster whose centroid scores below `thr` against Â_t.
    fn filter(&self, sel: &[usize], found: &mut [Option<usize>], thr: f64) {
        for (_, mem) in Self::clusters(found) {
            if self.centroid(sel, &mem).score < thr {
                for &q in &mem {
                    found[q] = None;
                }
            }
        }
    }
}
