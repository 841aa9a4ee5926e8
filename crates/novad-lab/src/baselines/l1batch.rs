//! ℓ1-batch: Algorithm 7 (BATCH-IMPL) of the NIPS 2012 paper, the quality reference the online
//! detector is compared to.
//!
//! Per timestep t: score the batch against A_t with the engine's coding (Algorithm 5, same
//! [`code_batch`] as the daemon), then re-learn the dictionary on *all* documents so far:
//! k grows by η, the warm-start codes are X_[t] = [X_[t-1] | x_1..x_n ; 0], and the loop
//! alternates the A-step (Algorithm 6, [`a_step`], warm-started at the previous A) and the
//! X-step (Algorithm 5 on all documents) until the SRE stops improving (relative change below
//! `tol`) or `alternations` rounds were run.
//!
//! New atoms: the paper does not say how the η new columns start; zero columns would never be
//! used (the A-step gives a column without code mass no gradient, and the X-step never picks a
//! zero atom), so they are initialised like the paper's bootstrap atoms — η seeded random
//! documents of the newest batch ([`init_atoms`] with [`AtomInit::RandomDocuments`]).
//!
//! The SRE of the re-learned dictionary over P_[t] is the mean score of the final X-step, so it
//! comes for free.

use ndarray::{s, Array2};

use novad_models::l1::coding::{code_batch, CodingDict, CodingParams};
use novad_models::l1::dictionary::{
    a_step, codes_to_csc, docs_to_csr, init_atoms, remap_rows, AtomInit,
};
use novad_models::model::Code;
use novad_models::text::{SparseDoc, VocabChange};

/// Knobs of the batch baselines (ℓ1 and ℓ2).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BatchParams {
    /// Atoms added per timestep (paper: η = 10).
    pub eta: usize,
    /// Maximum alternations (A-step, X-step) per timestep.
    pub alternations: u32,
    /// Stop alternating when the training objective improves by less than this (relative).
    pub tol: f64,
    /// Iterations of each A-step.
    pub a_step_iter: u32,
    /// Refuse an A-step whose dense E and ρ (8 · m · n_coded bytes for ℓ1) would exceed this
    /// many bytes (the engine's A-step carries one dense column per coded document).
    pub max_bytes: u64,
}

/// What one re-learning did.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct LearnStats {
    pub alternations: u32,
    /// Mean training objective over all documents so far after the last X-step (for ℓ1: the
    /// SRE of the new dictionary).
    pub objective: f64,
    pub k: usize,
    pub docs: usize,
    /// Documents with a non-zero code after the last X-step.
    pub coded_docs: usize,
}

/// State of the ℓ1-batch baseline.
pub struct L1Batch {
    coding: CodingParams,
    params: BatchParams,
    seed: u64,
    /// A_t, m × k_t (row-major, f32 like the engine's dictionary).
    dict: Array2<f32>,
    /// X_[t-1]: codes of every document learnt on, aligned with the caller's `seen` list.
    codes: Vec<Code>,
}

impl L1Batch {
    /// Start from the bootstrap dictionary (shared with ℓ1-online: the same Algorithm 5/6
    /// alternation on the same batch) and the codes of the bootstrap batch's non-empty
    /// documents over it.
    pub fn new(
        dict: Array2<f32>,
        boot_codes: Vec<Code>,
        coding: &CodingParams,
        params: BatchParams,
        seed: u64,
    ) -> Self {
        let mut coding = coding.clone();
        coding.residual_terms = 0;
        L1Batch {
            coding,
            params,
            seed,
            dict: dict.as_standard_layout().to_owned(),
            codes: boot_codes,
        }
    }

    pub fn k(&self) -> usize {
        self.dict.ncols()
    }

    pub fn dictionary(&self) -> &Array2<f32> {
        &self.dict
    }

    /// Follow a vocabulary change (new terms: zero rows; evicted terms: rows dropped).
    pub fn remap(&mut self, change: &VocabChange) {
        self.dict = remap_rows(&self.dict, &change.remap);
    }

    /// The novel-document detection step: code the batch over A_t.
    pub fn detect(&self, docs: &[SparseDoc]) -> Vec<Code> {
        let cd = CodingDict::from_dense(self.dict.view(), self.coding.step);
        code_batch(&cd, docs, &self.coding)
    }

    /// The batch dictionary-learning step. `seen` holds every non-empty document so far, the
    /// newest batch last; `new_codes` are the detection codes of the newest batch's non-empty
    /// documents (in `seen` order); `timestep` seeds the choice of new atoms.
    ///
    /// Fails (leaving the state unusable for further timesteps) when an A-step would need more
    /// than `max_bytes` of dense work space.
    pub fn learn(
        &mut self,
        seen: &[SparseDoc],
        new_codes: Vec<Code>,
        timestep: u64,
    ) -> Result<LearnStats, String> {
        let n_new = new_codes.len();
        self.codes.extend(new_codes);
        assert_eq!(self.codes.len(), seen.len(), "codes aligned with documents");
        let m = self.dict.nrows();
        let batch = &seen[seen.len() - n_new..];
        self.dict = grow(&self.dict, batch, self.params.eta, self.seed, timestep);
        let k = self.dict.ncols();
        let p = docs_to_csr(seen, m);
        let mut prev = f64::INFINITY;
        let mut stats = LearnStats {
            k,
            docs: seen.len(),
            ..Default::default()
        };
        for _ in 0..self.params.alternations.max(1) {
            let coded = self.codes.iter().filter(|c| !c.atoms.is_empty()).count() as u64;
            let bytes = 8 * m as u64 * coded;
            if bytes > self.params.max_bytes {
                return Err(format!(
                    "the ℓ1-batch A-step at timestep {timestep} would need {:.1} GiB of dense work \
                     space ({m} terms × {coded} coded documents × 8 bytes), above the limit of \
                     {:.1} GiB (--batch-max-gib); run fewer or smaller phases, or leave l1-batch \
                     out of --methods",
                    bytes as f64 / (1u64 << 30) as f64,
                    self.params.max_bytes as f64 / (1u64 << 30) as f64
                ));
            }
            let x = codes_to_csc(&self.codes, k);
            self.dict = a_step(
                &p,
                &x,
                &self.dict,
                self.coding.phi,
                self.coding.gamma,
                self.params.a_step_iter,
            );
            let cd = CodingDict::from_dense(self.dict.view(), self.coding.step);
            self.codes = code_batch(&cd, seen, &self.coding);
            stats.alternations += 1;
            let obj = mean(self.codes.iter().map(|c| c.score));
            stats.objective = obj;
            let done = prev.is_finite() && (prev - obj) <= self.params.tol * prev.abs();
            prev = obj;
            if done {
                break;
            }
        }
        stats.coded_docs = self.codes.iter().filter(|c| !c.atoms.is_empty()).count();
        Ok(stats)
    }
}

/// Append η atoms (seeded random non-empty documents of `batch`, unit ℓ1, so in 𝒜) to `dict`.
fn grow(
    dict: &Array2<f32>,
    batch: &[SparseDoc],
    eta: usize,
    seed: u64,
    timestep: u64,
) -> Array2<f32> {
    let (m, k) = dict.dim();
    if eta == 0 {
        return dict.clone();
    }
    let fresh = init_atoms(
        batch,
        m,
        eta,
        &AtomInit::RandomDocuments,
        growth_seed(seed, timestep),
    );
    let mut out = Array2::<f32>::zeros((m, k + eta));
    out.slice_mut(s![.., ..k]).assign(dict);
    out.slice_mut(s![.., k..]).assign(&fresh);
    out
}

/// The seed of the atoms added at `timestep` (shared by the ℓ1 and ℓ2 batch baselines, so both
/// grow from the same documents).
pub(crate) fn growth_seed(seed: u64, timestep: u64) -> u64 {
    seed ^ 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(timestep + 1)
}

pub(crate) fn mean(it: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = it.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    if n == 0 {
        0.0
    } else {
        s / n as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use novad_models::l1::dictionary::{bootstrap, BootstrapParams};

    /// Documents over a 20-term vocabulary: topic 0 uses terms 0..10, topic 1 terms 10..20.
    fn topic_docs(topic: u32, n: usize, seed: u64) -> Vec<SparseDoc> {
        let mut st = seed;
        let mut next = move || {
            st = st
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (st >> 33) as u32
        };
        (0..n)
            .map(|_| {
                let mut ids: Vec<u32> = (0..4).map(|_| topic * 10 + next() % 10).collect();
                ids.sort_unstable();
                ids.dedup();
                let vals: Vec<f64> = ids.iter().map(|_| 1.0 + (next() % 3) as f64).collect();
                let s: f64 = vals.iter().sum();
                SparseDoc {
                    ids,
                    vals: vals.into_iter().map(|v| v / s).collect(),
                }
            })
            .collect()
    }

    #[test]
    fn batch_learns_a_new_topic_and_grows_k() {
        let coding = CodingParams::paper();
        let boot = topic_docs(0, 40, 1);
        let dict = bootstrap(&boot, 20, 4, &coding, &BootstrapParams::paper(), 7);
        let cd = CodingDict::from_dense(dict.view(), coding.step);
        let boot_codes = code_batch(&cd, &boot, &coding);
        let params = BatchParams {
            eta: 3,
            alternations: 3,
            tol: 1e-4,
            a_step_iter: 30,
            max_bytes: 1 << 30,
        };
        let mut b = L1Batch::new(dict, boot_codes, &coding, params, 7);
        let new = topic_docs(1, 30, 2);
        let before = b.detect(&new);
        // topic 1 shares no term with the bootstrap atoms: every score at the ceiling
        assert!(before.iter().all(|c| c.at_ceiling()));
        let mut seen = boot.clone();
        seen.extend(new.iter().cloned());
        let st = b.learn(&seen, before, 1).unwrap();
        assert_eq!(st.k, 4 + 3);
        assert_eq!(b.k(), 7);
        assert!(st.alternations >= 1 && st.alternations <= 3);
        assert_eq!(st.docs, 70);
        assert!(novad_models::l1::dictionary::in_dictionary_set(
            b.dictionary(),
            1e-4
        ));
        // the re-learned dictionary explains the new topic: scores drop below the ceiling
        let after = b.detect(&topic_docs(1, 30, 3));
        let mean_after = mean(after.iter().map(|c| c.score));
        assert!(
            mean_after < 0.9,
            "mean score of the learnt topic {mean_after}"
        );
        assert!(st.objective < 1.0);
        // the memory guard refuses an A-step above the limit
        let mut tiny = L1Batch::new(
            b.dictionary().clone(),
            b.codes.clone(),
            &coding,
            BatchParams {
                max_bytes: 8,
                ..b.params.clone()
            },
            7,
        );
        let more = topic_docs(1, 5, 4);
        seen.extend(more.iter().cloned());
        let codes = tiny.detect(&more);
        assert!(tiny.learn(&seen, codes, 2).unwrap_err().contains("GiB"));
    }
}
