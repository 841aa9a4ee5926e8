//! The checked parameter set of a model. A [`Params`] value is plain data (serde, TOML);
//! [`Params::validate`] checks every field once, and a [`crate::Model`] can only be built from
//! parameters that pass.

use serde::{Deserialize, Serialize};

use crate::events::EventParams;
use crate::l1::coding::CodingParams;
use crate::l1::dictclust::TopicParams;
use crate::l1::dictionary::{AtomInit, BootstrapParams, OiadmmParams, RefreshParams};
use crate::memory::HybridParams;
use crate::model::{check, check_nonneg, ParamsError, TextParams};
use crate::text::{Tokenizer, TokenizerVersion};
use crate::threshold::ThresholdRule;

/// Adaptive dictionary size (CIKM 2011 names it an open problem): emerging topics of a
/// timestep are appended to Â as new atoms (k grows, up to `max_atoms`), and atoms unused for
/// more than `retire_after` timesteps are removed (k shrinks, down to `min_atoms`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdaptParams {
    pub inject: bool,
    /// Timesteps without use before an atom is retired (0 = never retire).
    pub retire_after: u64,
    pub min_atoms: usize,
    pub max_atoms: usize,
}

/// Every parameter of a novelty model. Fixed when a store is created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// Seed of every random choice (atom initialisation). Same seed + same input → same state.
    pub seed: u64,
    /// Number of dictionary atoms k. 1 ≤ k ≤ 100 000.
    pub k: usize,
    pub coding: CodingParams,
    pub oiadmm: OiadmmParams,
    pub bootstrap: BootstrapParams,
    /// Refresh of the least-used atoms per timestep (None = off, the paper).
    #[serde(default)]
    pub refresh: Option<RefreshParams>,
    /// Emerging topics from each timestep's novel documents (DICTCLUST; None = off).
    #[serde(default)]
    pub topics: Option<TopicParams>,
    /// Adaptive dictionary size: inject topics as atoms, retire unused atoms (None = fixed k).
    #[serde(default)]
    pub adapt: Option<AdaptParams>,
    /// Weight α of the document's mass on never-seen terms in the score:
    /// score = (l(p, Â) + α · unseen mass) / (1 + α), still in [0, 1]. 0 = the paper's score.
    #[serde(default)]
    pub unseen_weight: f64,
    pub threshold: ThresholdRule,
    pub text: TextParams,
    /// The hybrid detector: the model's score fused with a bounded memory of past documents
    /// (None = the model's own score decides, as in the paper). Stores created before it
    /// existed decode with None and keep their behaviour. Keep it the last field: legacy
    /// postcard parameters decode by appending its `None` byte, and the digest image drops
    /// that byte ([`crate::model::params_image`]), so `novad digest` of a store without the
    /// detector is what it was before the field existed.
    #[serde(default)]
    pub hybrid: Option<HybridParams>,
    /// Emerging topics as events ([`crate::events`]): when set, they are the store's topics
    /// and DICTCLUST (`topics`) is not run. Stores created before it existed decode with None
    /// and keep DICTCLUST. Keep it after `hybrid`, for the same reason: the digest image drops
    /// its trailing `None` byte.
    #[serde(default)]
    pub events: Option<EventParams>,
    /// The tokenizer's rules ([`TokenizerVersion`]; None = the classic tokenizer). Stores
    /// created before it existed decode with None and keep their tokens. Keep it the last
    /// field: the digest image drops its trailing `None` byte, and stored postcard parameters
    /// decode by appending it.
    #[serde(default)]
    pub tokenizer: Option<TokenizerVersion>,
}

impl Params {
    /// The configuration of the NIPS 2012 paper: k = 200, λ = 0.1, φ = 5, γ = 1.89,
    /// κ = 1/Ψmax(Â), β = 5, τ = 1/(2Ψmax(X̂)), atoms from random documents, symmetric ℓ1 loss.
    /// SPEC §4.8: on short real text its scores saturate at the ceiling. The classic tokenizer,
    /// as the replicated figures were measured with it.
    pub fn paper() -> Self {
        Params {
            seed: 0,
            k: 200,
            coding: CodingParams::paper(),
            oiadmm: OiadmmParams::paper(),
            bootstrap: BootstrapParams::paper(),
            refresh: None,
            topics: Some(TopicParams::default()),
            adapt: None,
            unseen_weight: 0.0,
            threshold: ThresholdRule::default_adaptive(),
            text: TextParams::default(),
            hybrid: None,
            events: None,
            tokenizer: None,
        }
    }

    /// The tokenizer of these parameters: [`TextParams`] with the rules of `tokenizer`.
    pub fn tokenizer(&self) -> Tokenizer {
        self.text.tokenizer(self.tokenizer)
    }

    /// These parameters with k atoms; adaptive size bounds that would not contain k move to
    /// ¾k..1½k (the defaults' ratios), bounds that do are kept.
    pub fn with_k(mut self, k: usize) -> Params {
        self.k = k;
        if let Some(a) = &mut self.adapt {
            if a.min_atoms > k || a.max_atoms < k {
                a.min_atoms = (k * 3).div_ceil(4).max(1);
                a.max_atoms = k + k / 2;
            }
        }
        self
    }

    /// Which trailing `None` tags the digest image drops ([`crate::model::params_image`]):
    /// the tokenizer's when absent, then the events', then the hybrid detector's.
    pub fn image_drops(&self) -> [bool; 3] {
        [
            self.tokenizer.is_none(),
            self.events.is_none(),
            HybridParams::image_drops_trailing_none(&self.hybrid),
        ]
    }

    /// The allowed number of atoms: exactly k, or the adaptive bounds.
    pub fn atom_bounds(&self) -> (usize, usize) {
        match &self.adapt {
            None => (self.k, self.k),
            Some(a) => (a.min_atoms, a.max_atoms),
        }
    }

    /// Check every field; the error names the field and the accepted range.
    pub fn validate(&self) -> Result<(), ParamsError> {
        if let Some(h) = &self.hybrid {
            h.validate()?;
        }
        if let Some(e) = &self.events {
            e.validate()?;
        }
        let c = &self.coding;
        check(
            (1..=100_000).contains(&self.k),
            "k",
            "an integer in 1..=100000",
            self.k.to_string(),
        )?;
        check_nonneg(c.lambda, "coding.lambda")?;
        check(
            c.phi.is_finite() && c.phi > 0.0,
            "coding.phi",
            "a finite number > 0",
            c.phi.to_string(),
        )?;
        check(
            c.gamma > 0.0 && c.gamma < 2.0,
            "coding.gamma",
            "a number in (0, 2)",
            c.gamma.to_string(),
        )?;
        check(
            c.tol.is_finite() && c.tol > 0.0,
            "coding.tol",
            "a finite number > 0",
            c.tol.to_string(),
        )?;
        check(
            c.max_iter >= 1 && c.max_iter <= 1_000_000,
            "coding.max_iter",
            "an integer in 1..=1000000",
            c.max_iter.to_string(),
        )?;
        check(
            c.absent_weight > 0.0 && c.absent_weight <= 1.0,
            "coding.absent_weight",
            "a number in (0, 1]",
            c.absent_weight.to_string(),
        )?;
        check(
            c.residual_terms <= 100,
            "coding.residual_terms",
            "an integer ≤ 100",
            c.residual_terms.to_string(),
        )?;
        let o = &self.oiadmm;
        check(
            o.beta.is_finite() && o.beta > 0.0,
            "oiadmm.beta",
            "a finite number > 0",
            o.beta.to_string(),
        )?;
        check(
            o.tau_scale.is_finite() && o.tau_scale > 0.0,
            "oiadmm.tau_scale",
            "a finite number > 0",
            o.tau_scale.to_string(),
        )?;
        let b = &self.bootstrap;
        check(
            b.alternations <= 100,
            "bootstrap.alternations",
            "an integer ≤ 100",
            b.alternations.to_string(),
        )?;
        check(
            b.a_step_iter <= 10_000,
            "bootstrap.a_step_iter",
            "an integer ≤ 10000",
            b.a_step_iter.to_string(),
        )?;
        if let AtomInit::KMeans {
            top_terms,
            iterations,
        } = &b.init
        {
            check(
                *top_terms >= 1,
                "bootstrap.init.top_terms",
                "an integer ≥ 1",
                top_terms.to_string(),
            )?;
            check(
                *iterations <= 1000,
                "bootstrap.init.iterations",
                "an integer ≤ 1000",
                iterations.to_string(),
            )?;
        }
        if let Some(r) = &self.refresh {
            check(
                r.atoms <= 100_000,
                "refresh.atoms",
                "an integer ≤ 100000 (at most k are replaced)",
                r.atoms.to_string(),
            )?;
            check(
                r.top_terms >= 1,
                "refresh.top_terms",
                "an integer ≥ 1",
                r.top_terms.to_string(),
            )?;
            check(
                r.pool_fraction > 0.0 && r.pool_fraction <= 1.0,
                "refresh.pool_fraction",
                "a number in (0, 1]",
                r.pool_fraction.to_string(),
            )?;
            check(
                r.iterations <= 1000,
                "refresh.iterations",
                "an integer ≤ 1000",
                r.iterations.to_string(),
            )?;
        }
        if let Some(t) = &self.topics {
            check(
                (1..=1000).contains(&t.k1),
                "topics.k1",
                "an integer in 1..=1000",
                t.k1.to_string(),
            )?;
            check(
                t.min_support >= 1,
                "topics.min_support",
                "an integer ≥ 1",
                t.min_support.to_string(),
            )?;
            check(
                t.alternations <= 100,
                "topics.alternations",
                "an integer ≤ 100",
                t.alternations.to_string(),
            )?;
            check_nonneg(t.lambda, "topics.lambda")?;
            check(
                (0.0..=1.0).contains(&t.merge_cosine),
                "topics.merge_cosine",
                "a number in [0, 1]",
                t.merge_cosine.to_string(),
            )?;
        }
        check(
            self.unseen_weight.is_finite() && (0.0..=100.0).contains(&self.unseen_weight),
            "unseen_weight",
            "a number in [0, 100]",
            self.unseen_weight.to_string(),
        )?;
        if let Some(a) = &self.adapt {
            check(
                a.min_atoms >= 1 && a.min_atoms <= self.k,
                "adapt.min_atoms",
                "an integer in 1..=k",
                a.min_atoms.to_string(),
            )?;
            check(
                a.max_atoms >= self.k && a.max_atoms <= 100_000,
                "adapt.max_atoms",
                "an integer in k..=100000",
                a.max_atoms.to_string(),
            )?;
            check(
                a.inject || a.retire_after > 0 || a.min_atoms == a.max_atoms,
                "adapt",
                "inject = true or retire_after > 0",
                "neither".into(),
            )?;
        }
        match &self.threshold {
            ThresholdRule::Fixed { zeta } => check(
                zeta.is_finite(),
                "threshold.zeta",
                "a finite number",
                zeta.to_string(),
            )?,
            ThresholdRule::TopFraction { fraction } => check(
                *fraction >= 0.0 && *fraction <= 1.0,
                "threshold.fraction",
                "a number in [0, 1]",
                fraction.to_string(),
            )?,
            ThresholdRule::Adaptive {
                quantile,
                half_life,
            } => {
                check(
                    *quantile >= 0.0 && *quantile <= 1.0,
                    "threshold.quantile",
                    "a number in [0, 1]",
                    quantile.to_string(),
                )?;
                check(
                    half_life.is_finite() && *half_life >= 0.0,
                    "threshold.half_life",
                    "a finite number ≥ 0 (0 = never forget)",
                    half_life.to_string(),
                )?;
            }
        }
        self.text.validate(["text.max_terms", "text.min_token_len"])
    }
}

impl Params {
    /// novad's default detector, chosen by `novad eval` on the 20NG CIKM protocol (seed 0;
    /// seeds 1 and 2 held out; docs/RESULTS.md, "Detection quality"): the paper's ADMM and OIADMM with
    /// - an asymmetric ℓ1 loss (predicted-but-absent mass charged w = 0.05), so atoms that
    ///   cover part of a document help instead of being screened out;
    /// - atoms from spherical k-means centroids cut to their top 5 terms, no batch A-step
    ///   (it spread the atoms and lost AUC);
    /// - per-atom ADMM steps with φ = 10 and tolerance 3e-4 (as accurate as per-document steps
    ///   at 1e-4, under half the iterations; `coding_steps`); Δ restarted per batch (carrying
    ///   it stalls learning);
    /// - the 20 least-used atoms replaced each timestep by k-means centroids of the
    ///   worst-explained quarter of the batch;
    /// - the score mixes the ℓ1 objective with the mass on never-seen terms (α = 0.5).
    pub fn novad_default() -> Self {
        let mut p = Params::paper();
        p.coding.step = crate::l1::coding::StepSize::PerAtom;
        p.coding.absent_weight = 0.05;
        p.coding.phi = 10.0;
        p.coding.tol = 3e-4;
        p.oiadmm.carry_delta = false;
        p.bootstrap.alternations = 0;
        p.bootstrap.init = AtomInit::KMeans {
            top_terms: 5,
            iterations: 10,
        };
        p.refresh = Some(RefreshParams {
            atoms: 20,
            top_terms: 5,
            pool_fraction: 0.25,
            iterations: 10,
        });
        p.unseen_weight = 0.5;
        // The hybrid detector: on 20NG (`novad-lab eval`, seeds 0–4) it beats exact
        // nearest-neighbour detection on every seed, where the model's own score does not.
        p.hybrid = Some(HybridParams::default());
        // The calibrated hybrid's rule: the 0.75-quantile of past scores, held in its band. On
        // 20NG (seeds 0–4) its verdicts reach 0.93–0.98 of the best F1 any fixed threshold
        // reaches in hindsight; the 0.9-quantile only 0.51–0.70 (docs/RESULTS.md).
        p.threshold = ThresholdRule::hybrid_adaptive();
        // Emerging topics as events instead of DICTCLUST: on 20NG (`novad-lab eval
        // --compare-dictclust`, seeds 0–4) 66 of 69 emerging topics are events against 90 of
        // 265, 59 of 70 new groups found against 49, keyword precision@5 0.83–0.94 against
        // 0.16–0.39 (docs/RESULTS.md, "Emerging topics as events").
        p.topics = None;
        p.events = Some(EventParams::default());
        // Adaptive dictionary size stays off: on 20NG (`novad eval --methods l1-online`,
        // seeds 0/1/2) injecting topics (retire after 3, 150 ≤ k ≤ 300) moved ℓ1-online AUC
        // only from 0.7832 / 0.7932 / 0.7439 to 0.7840 / 0.7938 / 0.7472, while OIADMM took
        // 0.57 s instead of 0.28 s per 1 000-document step (`bench_engine … default`).
        // Words in every script (NFKC, UAX #29 and dictionary segmentation); on ASCII text
        // its tokens are the classic ones.
        p.tokenizer = Some(TokenizerVersion::Unicode);
        p
    }
}

impl Default for Params {
    /// [`Params::novad_default`]. The paper's configuration is [`Params::paper`].
    fn default() -> Self {
        Params::novad_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The digest image of a parameter set whose hybrid has no calibration is the image it had
    /// before the field existed: the encoding of the hybrid's four older fields, no more.
    #[test]
    fn an_uncalibrated_hybrid_keeps_its_digest_image() {
        use crate::memory::{Fusion, MemoryParams};
        #[derive(Serialize)]
        struct Before {
            memory: MemoryParams,
            fusion: Fusion,
            nn_weight: f64,
            half_life: f64,
        }
        let p = Params {
            hybrid: Some(HybridParams::quantiles()),
            events: None,
            tokenizer: None,
            ..Params::default()
        };
        let h = p.hybrid.clone().unwrap();
        let mut want = {
            let mut q = p.clone();
            q.hybrid = None;
            let mut b = postcard::to_stdvec(&q).unwrap();
            assert_eq!(b.pop(), Some(0), "the tokenizer's None");
            assert_eq!(b.pop(), Some(0), "the events' None");
            assert_eq!(b.pop(), Some(0), "the hybrid's None");
            b
        };
        want.push(1);
        want.extend(
            postcard::to_stdvec(&Before {
                memory: h.memory,
                fusion: h.fusion,
                nn_weight: h.nn_weight,
                half_life: h.half_life,
            })
            .unwrap(),
        );
        assert_eq!(crate::model::params_image(&p, &p.image_drops()), want);
        // calibrated: the whole encoding
        let d = Params::default();
        assert!(d.hybrid.as_ref().unwrap().calibration.is_some());
        assert_eq!(
            crate::model::params_image(&d, &d.image_drops()),
            postcard::to_stdvec(&d).unwrap()
        );
    }

    /// Without a tokenizer choice (the classic tokenizer) the digest image is the image the set
    /// had before the field existed, and such an image decodes as stores held it; with one the
    /// image is the whole encoding, ending with the choice.
    #[test]
    fn the_classic_tokenizer_keeps_the_digest_image() {
        /// The paper's set as encoded before the field existed: its fields up to `events`.
        #[derive(Serialize)]
        struct Before<'a> {
            seed: u64,
            k: usize,
            coding: &'a CodingParams,
            oiadmm: &'a OiadmmParams,
            bootstrap: &'a BootstrapParams,
            refresh: &'a Option<RefreshParams>,
            topics: &'a Option<TopicParams>,
            adapt: &'a Option<AdaptParams>,
            unseen_weight: f64,
            threshold: &'a ThresholdRule,
            text: &'a TextParams,
            hybrid: &'a Option<HybridParams>,
            events: &'a Option<EventParams>,
        }
        let before = |p: &Params| {
            postcard::to_stdvec(&Before {
                seed: p.seed,
                k: p.k,
                coding: &p.coding,
                oiadmm: &p.oiadmm,
                bootstrap: &p.bootstrap,
                refresh: &p.refresh,
                topics: &p.topics,
                adapt: &p.adapt,
                unseen_weight: p.unseen_weight,
                threshold: &p.threshold,
                text: &p.text,
                hybrid: &p.hybrid,
                events: &p.events,
            })
            .unwrap()
        };
        let image = |p: &Params| crate::model::params_image(p, &p.image_drops());
        // the paper's set: no hybrid, no events, classic tokens
        let paper = Params::paper();
        assert_eq!(paper.tokenizer, None);
        let mut old = before(&paper);
        assert_eq!(old.pop(), Some(0), "the events' None");
        assert_eq!(old.pop(), Some(0), "the hybrid's None");
        assert_eq!(image(&paper), old);
        // the default set with the classic tokenizer: events and a calibrated hybrid
        let classic = Params {
            tokenizer: None,
            ..Params::default()
        };
        assert_eq!(image(&classic), before(&classic));
        // the default set names the Unicode tokenizer: the whole encoding, `Some(Unicode)` last
        let d = Params::default();
        assert_eq!(d.tokenizer, Some(TokenizerVersion::Unicode));
        let mut want = before(&d);
        want.extend([1, 0]);
        assert_eq!(image(&d), want);
        assert_ne!(image(&d), image(&classic));
    }

    #[test]
    fn paper_params_are_valid_and_bad_ones_name_the_field() {
        Params::paper().validate().unwrap();
        Params::default().validate().unwrap();
        let mut p = Params::paper();
        p.coding.absent_weight = 0.0;
        let e = p.validate().unwrap_err().to_string();
        assert!(e.contains("coding.absent_weight"), "{e}");
        for bad in [f64::NAN, -0.1, 1.5] {
            let mut p = Params::paper();
            p.topics.as_mut().unwrap().merge_cosine = bad;
            let e = p.validate().unwrap_err().to_string();
            assert!(e.contains("topics.merge_cosine"), "{e}");
        }
        let mut p = Params::paper();
        p.coding.gamma = f64::NAN;
        assert!(p
            .validate()
            .unwrap_err()
            .to_string()
            .contains("coding.gamma"));
        let mut p = Params::paper();
        p.k = 0;
        assert!(p.validate().is_err());
    }

    #[test]
    fn with_k_keeps_the_adaptive_bounds_valid() {
        let adaptive = Params {
            adapt: Some(AdaptParams {
                inject: true,
                retire_after: 3,
                min_atoms: 150,
                max_atoms: 300,
            }),
            ..Params::default()
        };
        adaptive.validate().unwrap();
        assert!(Params::default().with_k(7).adapt.is_none());
        for k in [1, 7, 60, 200, 1000] {
            let p = adaptive.clone().with_k(k);
            p.validate().unwrap();
            let a = p.adapt.as_ref().unwrap();
            assert!(a.min_atoms <= k && k <= a.max_atoms, "k = {k}");
        }
        // bounds that contain k are kept
        let p = adaptive.with_k(250);
        let a = p.adapt.unwrap();
        assert_eq!((a.min_atoms, a.max_atoms), (150, 300));
    }

    #[test]
    fn params_round_trip_through_toml() {
        let mut p = Params::paper();
        p.bootstrap.init = AtomInit::KMeans {
            top_terms: 5,
            iterations: 10,
        };
        p.threshold = ThresholdRule::TopFraction { fraction: 0.1 };
        let s = toml::to_string(&p).unwrap();
        let q: Params = toml::from_str(&s).unwrap();
        assert_eq!(p, q);
    }
}
