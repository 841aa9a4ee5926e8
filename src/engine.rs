//! The models a store can run, behind one interface. A store is created for one model kind
//! ([`ModelKind`], fixed for its lifetime, default ℓ1); the ingest path, the daemon and the store
//! only see an [`Engine`].
//!
//! The ℓ1 detector ([`Model`]) has its own chunked layout in the store (vocabulary, Â, Δ trees,
//! unchanged since format 1). Every other model implements [`PartsModel`]: its state is a list of
//! named, postcard-encoded parts that the store cuts into 4 KiB chunks and rewrites only where
//! the bytes changed.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::detector::{EngineError, Model, StepOutput};
use crate::params::{Params, ParamsError};
use crate::text::Vocabulary;

/// The model a store runs.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    /// Online ℓ1 dictionary learning (NIPS 2012) with DICTCLUST emerging topics (CIKM 2011).
    #[default]
    L1,
    /// Dynamic NMF with temporal regularisation: evolving and emerging topics (WSDM 2012).
    Dnmf,
    /// Online sparse topical coding (WWW 2013).
    Ostc,
}

impl ModelKind {
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::L1 => "l1",
            ModelKind::Dnmf => "dnmf",
            ModelKind::Ostc => "ostc",
        }
    }
}

impl std::fmt::Display for ModelKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A streaming model whose state is persisted as named parts.
///
/// Contract: `step` is pure (self unchanged); `from_state_parts(p, state_parts())` rebuilds a
/// model whose next step is identical; a part whose content did not change between two steps
/// encodes to identical bytes (the store then leaves its chunks alone); part names contain no
/// NUL byte.
pub trait PartsModel: Sized + Clone {
    type Params: Clone + PartialEq + std::fmt::Debug + Serialize + DeserializeOwned + Default;
    const KIND: ModelKind;
    fn create(params: Self::Params) -> Result<Self, ParamsError>;
    fn check_params(params: &Self::Params) -> Result<(), ParamsError>;
    fn step(&self, texts: &[&str]) -> Result<(Self, StepOutput), EngineError>;
    fn params(&self) -> &Self::Params;
    /// Index the next batch gets (0 before the first).
    fn timestep(&self) -> u64;
    fn vocab(&self) -> &Vocabulary;
    fn state_parts(&self) -> Vec<(String, Vec<u8>)>;
    fn from_state_parts(
        params: Self::Params,
        parts: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Self, EngineError>;
}

/// The parameters a store is created with, by model.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelParams {
    L1(Params),
}

impl ModelParams {
    pub fn kind(&self) -> ModelKind {
        match self {
            ModelParams::L1(_) => ModelKind::L1,
        }
    }

    /// The defaults of a model kind.
    pub fn defaults(kind: ModelKind) -> Result<ModelParams, EngineError> {
        match kind {
            ModelKind::L1 => Ok(ModelParams::L1(Params::default())),
            other => Err(unavailable(other)),
        }
    }

    /// Parse the TOML parameter format of `kind`.
    pub fn from_toml(kind: ModelKind, text: &str) -> Result<ModelParams, String> {
        match kind {
            ModelKind::L1 => toml::from_str::<Params>(text)
                .map(ModelParams::L1)
                .map_err(|e| e.to_string()),
            other => Err(unavailable(other).to_string()),
        }
    }

    /// Parameters of `kind` from their JSON image.
    pub fn from_json(kind: ModelKind, v: serde_json::Value) -> Result<ModelParams, String> {
        match kind {
            ModelKind::L1 => serde_json::from_value::<Params>(v)
                .map(ModelParams::L1)
                .map_err(|e| e.to_string()),
            other => Err(unavailable(other).to_string()),
        }
    }

    pub fn to_toml(&self) -> String {
        match self {
            ModelParams::L1(p) => toml::to_string(p).expect("params serialize"),
        }
    }

    /// postcard bytes as stored in `meta/params`.
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            ModelParams::L1(p) => postcard::to_stdvec(p).expect("params serialize"),
        }
    }

    pub fn from_bytes(kind: ModelKind, bytes: &[u8]) -> Result<ModelParams, String> {
        match kind {
            ModelKind::L1 => postcard::from_bytes::<Params>(bytes)
                .map(ModelParams::L1)
                .map_err(|e| e.to_string()),
            other => Err(unavailable(other).to_string()),
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        match self {
            ModelParams::L1(p) => serde_json::to_value(p).expect("params serialize"),
        }
    }

    pub fn validate(&self) -> Result<(), ParamsError> {
        match self {
            ModelParams::L1(p) => p.validate(),
        }
    }
}

impl From<Params> for ModelParams {
    fn from(p: Params) -> Self {
        ModelParams::L1(p)
    }
}

fn unavailable(kind: ModelKind) -> EngineError {
    EngineError::Inconsistent(format!("model `{kind}` is not built into this novad"))
}

/// A running model of any kind.
#[derive(Debug, Clone)]
pub enum Engine {
    L1(Box<Model>),
}

impl Engine {
    /// A new, empty model.
    pub fn new(params: ModelParams) -> Result<Engine, ParamsError> {
        match params {
            ModelParams::L1(p) => Ok(Engine::L1(Box::new(Model::new(p)?))),
        }
    }

    pub fn kind(&self) -> ModelKind {
        match self {
            Engine::L1(_) => ModelKind::L1,
        }
    }

    pub fn params(&self) -> ModelParams {
        match self {
            Engine::L1(m) => ModelParams::L1(m.params().clone()),
        }
    }

    /// One timestep (pure: self is unchanged).
    pub fn step(&self, texts: &[&str]) -> Result<(Engine, StepOutput), EngineError> {
        match self {
            Engine::L1(m) => m.step(texts).map(|(m, o)| (Engine::L1(Box::new(m)), o)),
        }
    }

    /// Index the next batch gets.
    pub fn timestep(&self) -> u64 {
        match self {
            Engine::L1(m) => m.timestep(),
        }
    }

    pub fn vocab(&self) -> &Vocabulary {
        match self {
            Engine::L1(m) => m.vocab(),
        }
    }

    /// A canonical byte image of the whole state: equal bytes ⇔ identical models.
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            Engine::L1(m) => m.to_bytes(),
        }
    }

    /// The ℓ1 model, if this is one.
    pub fn as_l1(&self) -> Option<&Model> {
        match self {
            Engine::L1(m) => Some(m),
        }
    }
}

/// Canonical bytes of a parts model: its kind, params and every part, length-prefixed.
pub fn parts_digest_bytes<M: PartsModel>(m: &M) -> Vec<u8> {
    let mut out = M::KIND.name().as_bytes().to_vec();
    let p = postcard::to_stdvec(m.params()).expect("params serialize");
    out.extend((p.len() as u64).to_le_bytes());
    out.extend(p);
    for (name, bytes) in m.state_parts() {
        out.extend((name.len() as u64).to_le_bytes());
        out.extend(name.as_bytes());
        out.extend((bytes.len() as u64).to_le_bytes());
        out.extend(bytes);
    }
    out
}
