//! OSTC state and parameters: the state parts round-trip and corrupt parts are refused, the
//! stats rule's mass is state, and older state and parameter formats load with the defaults.
mod common;

use common::ostc::{parts_map, planted, small_params};
use novad_models::ostc::{OstcModel, OstcParams, ScoreRule};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

#[test]
fn state_round_trips_and_corruption_is_refused() {
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let texts = planted(&mut rng, &[0, 1, 2], 120);
    let refs: Vec<&str> = texts.iter().map(|s| s.as_str()).collect();
    let p = small_params(5, 3);
    let m = OstcModel::new(p.clone()).unwrap();
    let (m, _) = m.step(&refs[..60]).unwrap();
    let parts = parts_map(&m);
    let back = OstcModel::from_state_parts(p.clone(), &parts).unwrap();
    assert_eq!(parts_map(&back), parts);
    let (a, oa) = m.step(&refs[60..]).unwrap();
    let (b, ob) = back.step(&refs[60..]).unwrap();
    assert_eq!(oa.verdicts, ob.verdicts);
    assert_eq!(oa.topics, ob.topics);
    assert_eq!(parts_map(&a), parts_map(&b));
    // unchanged content → identical bytes: an empty batch changes neither vocab nor β
    let (c, _) = a.step(&[]).unwrap();
    let (pa, pc) = (parts_map(&a), parts_map(&c));
    assert_eq!(pa["vocab"], pc["vocab"]);
    assert_eq!(pa["beta"], pc["beta"]);
    assert_ne!(pa["meta"], pc["meta"]);

    // corruption: truncated β
    let mut bad = parts.clone();
    let v = bad.get_mut("beta").unwrap();
    v.truncate(v.len() / 2);
    let e = OstcModel::from_state_parts(p.clone(), &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("beta"), "{e}");
    // a topic off the simplex (valid encoding, wrong content)
    let (rows, cols, mut data): (u64, u64, Vec<f32>) =
        postcard::from_bytes(&parts["beta"]).unwrap();
    data[0] += 0.5;
    let mut bad = parts.clone();
    bad.insert(
        "beta".into(),
        postcard::to_allocvec(&(rows, cols, data.clone())).unwrap(),
    );
    let e = OstcModel::from_state_parts(p.clone(), &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("topic 0 sums to"), "{e}");
    // non-finite
    data[0] = f32::NAN;
    bad.insert(
        "beta".into(),
        postcard::to_allocvec(&(rows, cols, data)).unwrap(),
    );
    let e = OstcModel::from_state_parts(p.clone(), &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("non-finite"), "{e}");
    // missing part, wrong k
    let mut bad = parts.clone();
    bad.remove("history");
    let e = OstcModel::from_state_parts(p.clone(), &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing state part `history`"), "{e}");
    let e = OstcModel::from_state_parts(small_params(5, 4), &parts)
        .unwrap_err()
        .to_string();
    assert!(e.contains("k = 4"), "{e}");
    // invalid parameters are named
    let mut q = p.clone();
    q.rho = -1.0;
    let e = OstcModel::new(q).unwrap_err().to_string();
    assert!(e.contains("ostc.rho"), "{e}");
}

/// The `stats` rule's per-topic mass is state: it round-trips, the resumed model continues
/// byte-identically, a store without the part (written before it existed) loads with it
/// empty, and a mass of the wrong length or a negative one is refused.
#[test]
fn stats_mass_round_trips_and_is_checked() {
    let mut rng = ChaCha8Rng::seed_from_u64(19);
    let texts = planted(&mut rng, &[0, 1, 2], 120);
    let refs: Vec<&str> = texts.iter().map(|s| s.as_str()).collect();
    let p = OstcParams {
        step_rule: novad_models::ostc::dictionary::StepRule::Stats,
        ..small_params(5, 3)
    };
    let (m, _) = OstcModel::new(p.clone())
        .unwrap()
        .step(&refs[..60])
        .unwrap();
    let parts = parts_map(&m);
    let mass: Vec<f64> = postcard::from_bytes(&parts["mass"]).unwrap();
    assert_eq!(mass.len(), 3);
    assert!(mass.iter().all(|v| v.is_finite() && *v > 0.0), "{mass:?}");
    let back = OstcModel::from_state_parts(p.clone(), &parts).unwrap();
    let (a, oa) = m.step(&refs[60..]).unwrap();
    let (b, ob) = back.step(&refs[60..]).unwrap();
    assert_eq!(oa.verdicts, ob.verdicts);
    assert_eq!(parts_map(&a), parts_map(&b));
    assert_ne!(parts_map(&a)["mass"], parts["mass"]);
    // an `em` store written before the part existed
    let q = small_params(5, 3);
    let (old, _) = OstcModel::new(q.clone())
        .unwrap()
        .step(&refs[..60])
        .unwrap();
    let mut old_parts = parts_map(&old);
    assert_eq!(
        old_parts["mass"],
        postcard::to_allocvec(&Vec::<f64>::new()).unwrap()
    );
    old_parts.remove("mass");
    let loaded = OstcModel::from_state_parts(q, &old_parts).unwrap();
    assert_eq!(parts_map(&loaded)["beta"], old_parts["beta"]);
    for bad_mass in [vec![1.0, 2.0], vec![1.0, -1.0, 1.0]] {
        let mut bad = parts.clone();
        bad.insert("mass".into(), postcard::to_allocvec(&bad_mass).unwrap());
        let e = OstcModel::from_state_parts(p.clone(), &bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("mass"), "{e}");
    }
}

#[test]
fn default_params_are_valid_and_survive_toml() {
    let p = OstcParams::default();
    p.validate().unwrap();
    let s = toml::to_string(&p).unwrap();
    let back: OstcParams = toml::from_str(&s).unwrap();
    assert_eq!(back, p);
    let mut q = p.clone();
    q.batch_size = 0;
    let e = q.validate().unwrap_err().to_string();
    assert!(e.contains("ostc.batch_size"), "{e}");
}

#[test]
fn version_one_state_loads_with_a_fresh_score_history() {
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let texts = planted(&mut rng, &[0, 1], 120);
    let r: Vec<&str> = texts.iter().map(|s| s.as_str()).collect();
    let p = small_params(1, 3);
    let mut m = OstcModel::new(p.clone()).unwrap();
    for chunk in r.chunks(40) {
        m = m.step(chunk).unwrap().0;
    }
    assert!(m.history().total > 0.0);
    let mut parts = parts_map(&m);
    // `meta` starts with its version as a postcard varint: 2 now, 1 before score rules
    assert_eq!(parts["meta"][0], 2);
    parts.get_mut("meta").unwrap()[0] = 1;
    let old = OstcModel::from_state_parts(p.clone(), &parts).unwrap();
    assert_eq!(old.history().total, 0.0);
    assert_eq!(old.beta(), m.beta());
    parts.get_mut("meta").unwrap()[0] = 3;
    assert!(OstcModel::from_state_parts(p, &parts).is_err());
}

#[test]
fn parameters_written_before_score_rules_load_with_the_defaults() {
    let mut v = toml::Value::try_from(OstcParams::default()).unwrap();
    let t = v.as_table_mut().unwrap();
    for key in ["score", "score_scale", "score_background"] {
        t.remove(key);
    }
    let old: OstcParams = toml::from_str(&toml::to_string(&v).unwrap()).unwrap();
    assert_eq!(old, OstcParams::default());
    assert_eq!(old.score, ScoreRule::Contrast);
    let bad = OstcParams {
        score_scale: Some(0.0),
        ..OstcParams::default()
    };
    assert!(bad.validate().is_err());
}

#[test]
fn stored_parameters_without_the_score_fields_decode_with_the_defaults() {
    // stores up to format 4 predate the hybrid detector: their parameters decode without it
    // and the tokenizer choice
    let p = OstcParams {
        seed: 42,
        k: 17,
        hybrid: None,
        tokenizer: None,
        ..OstcParams::default()
    };
    let with_hybrid_field = postcard::to_stdvec(&p).unwrap();
    assert_eq!(
        with_hybrid_field[with_hybrid_field.len() - 2..],
        [0, 0],
        "the trailing Nones of `hybrid` and `tokenizer`"
    );
    let bytes = &with_hybrid_field[..with_hybrid_field.len() - 2];
    assert_eq!(OstcParams::from_stored(bytes).unwrap(), p);
    // the layout before the score fields is the prefix without their 10 bytes (enum tag,
    // None tag, f64)
    let legacy = &bytes[..bytes.len() - 10];
    assert!(postcard::from_bytes::<OstcParams>(legacy).is_err());
    assert_eq!(OstcParams::from_stored(legacy).unwrap(), p);
    assert!(OstcParams::from_stored(&bytes[..bytes.len() - 12]).is_err());
}
