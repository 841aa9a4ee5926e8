//! The models a store can run, behind one interface. A store is created for one model kind
//! ([`ModelKind`], fixed for its lifetime, default ℓ1); the ingest path, the daemon and the store
//! only see an [`Engine`] and the [`ModelParams`] it was created with.
//!
//! Every model implements [`PartsModel`]: its state is a list of named, postcard-encoded parts
//! that the store cuts into 4 KiB chunks and rewrites only where the bytes changed, so the
//! store has one layout for all of them.

use std::collections::BTreeMap;

use thiserror::Error;

use crate::dnmf::{DnmfModel, DnmfParams};
use crate::l1::{Model, Params};
use crate::model::{
    parts_digest_bytes, EngineError, ModelKind, ParamsError, PartsModel, StepOutput,
};
use crate::ostc::{OstcModel, OstcParams};
use crate::text::Vocabulary;

/// A parameter set that does not decode.
#[derive(Debug, Error)]
pub enum ParamsFormatError {
    #[error(transparent)]
    Toml(#[from] toml::de::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Postcard(#[from] postcard::Error),
}

/// The parameters a store is created with, by model.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelParams {
    L1(Params),
    Dnmf(DnmfParams),
    Ostc(OstcParams),
}

impl ModelParams {
    pub fn kind(&self) -> ModelKind {
        match self {
            ModelParams::L1(_) => ModelKind::L1,
            ModelParams::Dnmf(_) => ModelKind::Dnmf,
            ModelParams::Ostc(_) => ModelKind::Ostc,
        }
    }

    /// The defaults of a model kind.
    pub fn defaults(kind: ModelKind) -> ModelParams {
        match kind {
            ModelKind::L1 => ModelParams::L1(Params::default()),
            ModelKind::Dnmf => ModelParams::Dnmf(DnmfParams::default()),
            ModelKind::Ostc => ModelParams::Ostc(OstcParams::default()),
        }
    }

    /// Parse the TOML parameter format of `kind`.
    pub fn from_toml(kind: ModelKind, text: &str) -> Result<ModelParams, ParamsFormatError> {
        Ok(match kind {
            ModelKind::L1 => ModelParams::L1(toml::from_str(text)?),
            ModelKind::Dnmf => ModelParams::Dnmf(toml::from_str(text)?),
            ModelKind::Ostc => ModelParams::Ostc(toml::from_str(text)?),
        })
    }

    /// Parameters of `kind` from their JSON image.
    pub fn from_json(
        kind: ModelKind,
        v: serde_json::Value,
    ) -> Result<ModelParams, ParamsFormatError> {
        Ok(match kind {
            ModelKind::L1 => ModelParams::L1(serde_json::from_value(v)?),
            ModelKind::Dnmf => ModelParams::Dnmf(serde_json::from_value(v)?),
            ModelKind::Ostc => ModelParams::Ostc(serde_json::from_value(v)?),
        })
    }

    pub fn to_toml(&self) -> String {
        match self {
            ModelParams::L1(p) => toml::to_string(p),
            ModelParams::Dnmf(p) => toml::to_string(p),
            ModelParams::Ostc(p) => toml::to_string(p),
        }
        .expect("params serialize")
    }

    /// The bytes a store keeps in `meta/params`: JSON, fields by name, so a field added later
    /// with a serde default (`#[serde(default)]`) decodes from older stores as they are.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.to_json()).expect("params serialize")
    }

    /// Decode [`ModelParams::to_bytes`]; a missing field with a serde default takes it.
    pub fn from_bytes(kind: ModelKind, bytes: &[u8]) -> Result<ModelParams, ParamsFormatError> {
        let v: serde_json::Value = serde_json::from_slice(bytes)?;
        ModelParams::from_json(kind, v)
    }

    /// Decode the postcard encoding stores used for parameters up to format 4 (fields by
    /// position). Only the store migration to format 5 needs it.
    pub fn from_postcard(kind: ModelKind, bytes: &[u8]) -> Result<ModelParams, ParamsFormatError> {
        Ok(match kind {
            ModelKind::L1 => ModelParams::L1(postcard::from_bytes(bytes)?),
            ModelKind::Dnmf => ModelParams::Dnmf(postcard::from_bytes(bytes)?),
            ModelKind::Ostc => ModelParams::Ostc(OstcParams::from_stored(bytes)?),
        })
    }

    pub fn to_json(&self) -> serde_json::Value {
        match self {
            ModelParams::L1(p) => serde_json::to_value(p),
            ModelParams::Dnmf(p) => serde_json::to_value(p),
            ModelParams::Ostc(p) => serde_json::to_value(p),
        }
        .expect("params serialize")
    }

    pub fn validate(&self) -> Result<(), ParamsError> {
        match self {
            ModelParams::L1(p) => p.validate(),
            ModelParams::Dnmf(p) => p.validate(),
            ModelParams::Ostc(p) => p.validate(),
        }
    }
}

impl From<Params> for ModelParams {
    fn from(p: Params) -> Self {
        ModelParams::L1(p)
    }
}

/// A running model of any kind.
#[derive(Debug, Clone)]
pub enum Engine {
    L1(Box<Model>),
    Dnmf(Box<DnmfModel>),
    Ostc(Box<OstcModel>),
}

impl Engine {
    /// A new, empty model.
    pub fn new(params: ModelParams) -> Result<Engine, ParamsError> {
        Ok(match params {
            ModelParams::L1(p) => Engine::L1(Box::new(Model::new(p)?)),
            ModelParams::Dnmf(p) => Engine::Dnmf(Box::new(DnmfModel::new(p)?)),
            ModelParams::Ostc(p) => Engine::Ostc(Box::new(OstcModel::new(p)?)),
        })
    }

    pub fn kind(&self) -> ModelKind {
        match self {
            Engine::L1(_) => ModelKind::L1,
            Engine::Dnmf(_) => ModelKind::Dnmf,
            Engine::Ostc(_) => ModelKind::Ostc,
        }
    }

    pub fn params(&self) -> ModelParams {
        match self {
            Engine::L1(m) => ModelParams::L1(m.params().clone()),
            Engine::Dnmf(m) => ModelParams::Dnmf(m.params().clone()),
            Engine::Ostc(m) => ModelParams::Ostc(m.params().clone()),
        }
    }

    /// One timestep (pure: self is unchanged).
    pub fn step(&self, texts: &[&str]) -> Result<(Engine, StepOutput), EngineError> {
        match self {
            Engine::L1(m) => m.step(texts).map(|(m, o)| (Engine::L1(Box::new(m)), o)),
            Engine::Dnmf(m) => m.step(texts).map(|(m, o)| (Engine::Dnmf(Box::new(m)), o)),
            Engine::Ostc(m) => m.step(texts).map(|(m, o)| (Engine::Ostc(Box::new(m)), o)),
        }
    }

    /// Index the next batch gets.
    pub fn timestep(&self) -> u64 {
        match self {
            Engine::L1(m) => m.timestep(),
            Engine::Dnmf(m) => m.timestep(),
            Engine::Ostc(m) => m.timestep(),
        }
    }

    pub fn vocab(&self) -> &Vocabulary {
        match self {
            Engine::L1(m) => m.vocab(),
            Engine::Dnmf(m) => m.vocab(),
            Engine::Ostc(m) => m.vocab(),
        }
    }

    /// The state as named parts ([`PartsModel::state_parts`]).
    pub fn state_parts(&self) -> Vec<(String, Vec<u8>)> {
        match self {
            Engine::L1(m) => m.state_parts(),
            Engine::Dnmf(m) => m.state_parts(),
            Engine::Ostc(m) => m.state_parts(),
        }
    }

    /// Rebuild a model of `params`' kind from its parts ([`PartsModel::from_state_parts`]).
    pub fn from_state_parts(
        params: ModelParams,
        parts: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Engine, EngineError> {
        Ok(match params {
            ModelParams::L1(p) => Engine::L1(Box::new(Model::from_state_parts(p, parts)?)),
            ModelParams::Dnmf(p) => Engine::Dnmf(Box::new(DnmfModel::from_state_parts(p, parts)?)),
            ModelParams::Ostc(p) => Engine::Ostc(Box::new(OstcModel::from_state_parts(p, parts)?)),
        })
    }

    /// A canonical byte image of the model's logical content (parameters and state, encoded
    /// from the values in memory, not from any store layout): equal bytes ⇔ identical models.
    /// `novad digest` hashes it, so a store migration that keeps the model keeps the digest.
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            Engine::L1(m) => m.to_bytes(),
            Engine::Dnmf(m) => parts_digest_bytes(m.as_ref()),
            Engine::Ostc(m) => parts_digest_bytes(m.as_ref()),
        }
    }

    /// The ℓ1 model, if this is one.
    pub fn as_l1(&self) -> Option<&Model> {
        match self {
            Engine::L1(m) => Some(m),
            _ => None,
        }
    }
}

macro_rules! parts_model {
    ($model:ty, $params:ty, $kind:expr) => {
        impl PartsModel for $model {
            type Params = $params;
            const KIND: ModelKind = $kind;
            fn create(params: $params) -> Result<Self, ParamsError> {
                <$model>::new(params)
            }
            fn step(&self, texts: &[&str]) -> Result<(Self, StepOutput), EngineError> {
                <$model>::step(self, texts)
            }
            fn params(&self) -> &$params {
                <$model>::params(self)
            }
            fn timestep(&self) -> u64 {
                <$model>::timestep(self)
            }
            fn vocab(&self) -> &Vocabulary {
                <$model>::vocab(self)
            }
            fn state_parts(&self) -> Vec<(String, Vec<u8>)> {
                <$model>::state_parts(self)
            }
            fn from_state_parts(
                params: $params,
                parts: &BTreeMap<String, Vec<u8>>,
            ) -> Result<Self, EngineError> {
                <$model>::from_state_parts(params, parts)
            }
        }
    };
}

parts_model!(Model, Params, ModelKind::L1);
parts_model!(DnmfModel, DnmfParams, ModelKind::Dnmf);
parts_model!(OstcModel, OstcParams, ModelKind::Ostc);
