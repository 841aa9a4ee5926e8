//! Format 3 → 4: the topic stage gets its own sparsity weight (`topics.lambda`, the λ of
//! DICTCLUST's dictionary R and its codes; before, it shared `coding.lambda`). The parameters of
//! an ℓ1 store are re-encoded with `topics.lambda = coding.lambda`, so an existing store keeps
//! behaving exactly as before; other models' parameters have no topic stage and are untouched.
//!
//! Idempotent: parameters that already decode in the format-4 shape are left alone (the
//! format-3 encoding is one f64 shorter inside `topics`, so it never decodes as format 4
//! with the trailing fields intact — the check below is a full, exact decode).

use serde::{Deserialize, Serialize};

use crate::schema::{KEY_MODEL, KEY_PARAMS, META};
use novad_models::l1::coding::CodingParams;
use novad_models::l1::dictclust::TopicParams;
use novad_models::l1::dictionary::{BootstrapParams, OiadmmParams, RefreshParams};
use novad_models::l1::params::{AdaptParams, Params};
use novad_models::threshold::ThresholdRule;
use novad_models::ModelKind;
use novad_models::TextParams;

/// The topic parameters of format 3.
#[derive(Serialize, Deserialize)]
struct TopicParamsV3 {
    k1: usize,
    min_support: usize,
    top_terms: usize,
    representatives: usize,
    alternations: u32,
    merge_cosine: f64,
}

/// The ℓ1 parameters of format 3 (field for field, `topics` in its old shape).
#[derive(Serialize, Deserialize)]
struct ParamsV3 {
    seed: u64,
    k: usize,
    coding: CodingParams,
    oiadmm: OiadmmParams,
    bootstrap: BootstrapParams,
    refresh: Option<RefreshParams>,
    topics: Option<TopicParamsV3>,
    adapt: Option<AdaptParams>,
    unseen_weight: f64,
    threshold: ThresholdRule,
    text: TextParams,
}

impl ParamsV3 {
    fn upgrade(self) -> Params {
        let lambda = self.coding.lambda;
        Params {
            seed: self.seed,
            k: self.k,
            coding: self.coding,
            oiadmm: self.oiadmm,
            bootstrap: self.bootstrap,
            refresh: self.refresh,
            topics: self.topics.map(|t| TopicParams {
                k1: t.k1,
                min_support: t.min_support,
                top_terms: t.top_terms,
                representatives: t.representatives,
                alternations: t.alternations,
                merge_cosine: t.merge_cosine,
                lambda,
            }),
            adapt: self.adapt,
            unseen_weight: self.unseen_weight,
            threshold: self.threshold,
            text: self.text,
            hybrid: None,
            events: None,
            tokenizer: None,
        }
    }
}

/// Format-4 parameters are today's [`Params`] without its last three fields, `hybrid` (which
/// came with JSON parameters), `events` and `tokenizer`: decode them with postcard's one-byte
/// `None` appended for each.
fn decode_v4(bytes: &[u8]) -> Option<Params> {
    let mut b = bytes.to_vec();
    b.extend([0, 0, 0]);
    exact(&b)
}

/// [`Params`] (without a hybrid detector or events) in the format-4 encoding.
fn encode_v4(p: &Params) -> Result<Vec<u8>, String> {
    if p.hybrid.is_some() || p.events.is_some() || p.tokenizer.is_some() {
        return Err(
            "format-4 parameters have no hybrid detector, no events and the classic tokenizer"
                .into(),
        );
    }
    Ok(novad_models::model::params_image(p, &[true, true, true]))
}

/// Decode `bytes` as exactly one `T` (no trailing bytes).
fn exact<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Option<T> {
    match postcard::take_from_bytes::<T>(bytes) {
        Ok((v, [])) => Some(v),
        _ => None,
    }
}

pub fn apply(db: &sled::Db) -> Result<(), String> {
    let e = |e: sled::Error| e.to_string();
    let meta = db.open_tree(META).map_err(e)?;
    let kind = match meta.get(KEY_MODEL).map_err(e)? {
        Some(v) => {
            postcard::from_bytes::<ModelKind>(&v).map_err(|err| format!("model kind: {err}"))?
        }
        None => ModelKind::L1,
    };
    if kind != ModelKind::L1 {
        return Ok(());
    }
    let Some(bytes) = meta.get(KEY_PARAMS).map_err(e)? else {
        return Ok(());
    };
    if decode_v4(&bytes).is_some() {
        return Ok(());
    }
    let old: ParamsV3 =
        exact(&bytes).ok_or_else(|| "parameters decode neither as format 3 nor 4".to_string())?;
    meta.insert(KEY_PARAMS, encode_v4(&old.upgrade())?)
        .map_err(e)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v3_of(p: &Params) -> ParamsV3 {
        let t = p.topics.as_ref().unwrap();
        ParamsV3 {
            seed: p.seed,
            k: p.k,
            coding: p.coding.clone(),
            oiadmm: p.oiadmm.clone(),
            bootstrap: p.bootstrap.clone(),
            refresh: p.refresh.clone(),
            topics: Some(TopicParamsV3 {
                k1: t.k1,
                min_support: t.min_support,
                top_terms: t.top_terms,
                representatives: t.representatives,
                alternations: t.alternations,
                merge_cosine: t.merge_cosine,
            }),
            adapt: p.adapt.clone(),
            unseen_weight: p.unseen_weight,
            threshold: p.threshold.clone(),
            text: p.text.clone(),
        }
    }

    #[test]
    fn format_3_parameters_gain_the_detectors_lambda_and_nothing_else_changes() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let meta = db.open_tree(META).unwrap();
        // format-4 stores predate the hybrid detector, the events and the tokenizer choice
        let mut want = Params {
            hybrid: None,
            events: None,
            tokenizer: None,
            topics: Some(TopicParams::default()),
            ..Default::default()
        };
        want.coding.lambda = 0.25;
        want.seed = 7;
        let old = postcard::to_stdvec(&v3_of(&want)).unwrap();
        assert!(
            decode_v4(&old).is_none(),
            "format 3 bytes must not pass as format 4"
        );
        meta.insert(KEY_PARAMS, old).unwrap();
        apply(&db).unwrap();
        let got = decode_v4(&meta.get(KEY_PARAMS).unwrap().unwrap()).unwrap();
        want.topics.as_mut().unwrap().lambda = 0.25;
        assert_eq!(got, want);
        // idempotent: a second run leaves the format-4 bytes alone
        let once = meta.get(KEY_PARAMS).unwrap().unwrap();
        apply(&db).unwrap();
        assert_eq!(meta.get(KEY_PARAMS).unwrap().unwrap(), once);
    }

    #[test]
    fn other_models_and_garbage_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let meta = db.open_tree(META).unwrap();
        // a dnmf store's parameters are not ℓ1 parameters: untouched
        meta.insert(KEY_MODEL, postcard::to_stdvec(&ModelKind::Dnmf).unwrap())
            .unwrap();
        meta.insert(KEY_PARAMS, vec![1u8, 2, 3]).unwrap();
        apply(&db).unwrap();
        assert_eq!(
            meta.get(KEY_PARAMS).unwrap().unwrap().as_ref(),
            &[1u8, 2, 3]
        );
        // an ℓ1 store whose parameters decode as neither format is an error, not a rewrite
        meta.insert(KEY_MODEL, postcard::to_stdvec(&ModelKind::L1).unwrap())
            .unwrap();
        let e = apply(&db).unwrap_err();
        assert!(e.contains("neither"), "{e}");
        assert_eq!(
            meta.get(KEY_PARAMS).unwrap().unwrap().as_ref(),
            &[1u8, 2, 3]
        );
    }
}
