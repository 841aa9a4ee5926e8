//! Stored parameters are self-describing (JSON, fields by name): a parameter set written before
//! a field existed decodes, the new field takes its default, and nothing else changes.

use novad_models::l1::dictclust::TopicParams;
use novad_models::{ModelKind, ModelParams, Params};

/// ℓ1 parameters as stored before `topics.lambda` and `topics.merge_cosine` were added.
const BEFORE: &str = include_str!("fixtures/l1-params-before-topic-lambda.json");

#[test]
fn parameters_written_before_a_field_existed_load_with_its_default() {
    let old: serde_json::Value = serde_json::from_str(BEFORE).unwrap();
    assert!(
        old["topics"].get("lambda").is_none(),
        "the fixture predates the field"
    );
    let p = match ModelParams::from_bytes(ModelKind::L1, BEFORE.as_bytes()).unwrap() {
        ModelParams::L1(p) => p,
        other => panic!("an ℓ1 parameter set, got {:?}", other.kind()),
    };
    p.validate().unwrap();
    let topics = p.topics.as_ref().unwrap();
    let defaults = TopicParams::default();
    assert_eq!(topics.lambda, defaults.lambda);
    assert_eq!(topics.merge_cosine, defaults.merge_cosine);
    // every field the fixture has is kept as written
    let mut back = ModelParams::L1(p.clone()).to_json();
    let t = back["topics"].as_object_mut().unwrap();
    t.remove("lambda");
    t.remove("merge_cosine");
    // the fixture also predates the hybrid detector: such a store keeps the model's own score
    assert!(old.get("hybrid").is_none() && p.hybrid.is_none());
    assert_eq!(
        back.as_object_mut().unwrap().remove("hybrid"),
        Some(serde_json::Value::Null)
    );
    // and events: it keeps DICTCLUST
    assert_eq!(
        back.as_object_mut().unwrap().remove("events"),
        Some(serde_json::Value::Null)
    );
    // and the tokenizer choice: it keeps the classic tokenizer
    assert!(p.tokenizer.is_none());
    assert_eq!(
        back.as_object_mut().unwrap().remove("tokenizer"),
        Some(serde_json::Value::Null)
    );
    assert_eq!(back, old);
}

/// A store's parameters written before the tokenizer choice existed (the field absent) keep the
/// classic tokenizer for every model kind, while new defaults name the Unicode one.
#[test]
fn parameters_without_a_tokenizer_keep_the_classic_one() {
    use novad_models::text::TokenizerVersion;
    for kind in ModelKind::ALL {
        let p = ModelParams::defaults(kind);
        let mut v = p.to_json();
        assert_eq!(v["tokenizer"], serde_json::json!("unicode"), "{kind}");
        v.as_object_mut().unwrap().remove("tokenizer");
        let old = ModelParams::from_bytes(kind, v.to_string().as_bytes()).unwrap();
        let tokenizer = match &old {
            ModelParams::L1(p) => p.tokenizer,
            ModelParams::Dnmf(p) => p.tokenizer,
            ModelParams::Ostc(p) => p.tokenizer,
        };
        assert_eq!(tokenizer, None, "{kind}");
        let tokenizer = match &p {
            ModelParams::L1(p) => p.tokenizer,
            ModelParams::Dnmf(p) => p.tokenizer,
            ModelParams::Ostc(p) => p.tokenizer,
        };
        assert_eq!(tokenizer, Some(TokenizerVersion::Unicode), "{kind}");
        // TOML (`novad params`) names it too, and reads back
        let toml = p.to_toml();
        assert!(toml.contains("tokenizer = \"unicode\""), "{kind}: {toml}");
    }
}

#[test]
fn stored_parameters_round_trip_for_every_model() {
    for kind in ModelKind::ALL {
        let p = ModelParams::defaults(kind);
        let bytes = p.to_bytes();
        assert_eq!(ModelParams::from_bytes(kind, &bytes).unwrap(), p, "{kind}");
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert!(v.is_object(), "{kind}: fields by name");
    }
    let mut p = Params {
        seed: 17,
        ..Params::default()
    };
    p.coding.lambda = 0.2;
    let p = ModelParams::L1(p);
    assert_eq!(
        ModelParams::from_bytes(ModelKind::L1, &p.to_bytes()).unwrap(),
        p
    );
}

#[test]
fn a_field_of_the_wrong_type_is_an_error() {
    let mut v: serde_json::Value = serde_json::from_str(BEFORE).unwrap();
    v["k"] = serde_json::json!("two hundred");
    let err = ModelParams::from_bytes(ModelKind::L1, v.to_string().as_bytes()).unwrap_err();
    assert!(err.to_string().contains("invalid type"), "{err}");
    // postcard bytes (the encoding before format 5) are not JSON
    let old = postcard::to_stdvec(&Params::default()).unwrap();
    assert!(ModelParams::from_bytes(ModelKind::L1, &old).is_err());
    assert_eq!(
        ModelParams::from_postcard(ModelKind::L1, &old).unwrap(),
        ModelParams::L1(Params::default())
    );
}
