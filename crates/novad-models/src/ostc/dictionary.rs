//! The topic dictionary β of OSTC: K topics, each a distribution over the vocabulary (a point of
//! the simplex P = {x ≥ 0, Σx = 1}), stored term-major as an N × K `f32` matrix (row n = β_{·n},
//! the K topic weights of term n, which is what coding a document reads). Arithmetic is in `f64`
//! and rounded to `f32` once per update; each stored topic sums to 1 within 1e-4 (checked with
//! [`SIMPLEX_TOL`] on load).
//!
//! Online update (WWW'13 Eq. 12): β_k ← Π_P(β_k − α_t ĝ_k), ĝ = (1/M) Σ_d ∇_β ℓ(s_d, β) with
//! ∂ℓ/∂β_kn = Σ_{d: n ∈ I_d} s_dnk (1 − w_dn/ν_dn), and α_t = τ₀/(t + τ).
//!
//! The default step ([`StepRule::Em`], [`update_em`]) replaces the raw gradient by the
//! stochastic-EM / natural-gradient direction (β moves towards the batch's normalised expected
//! topic-term counts); the raw rule is kept as [`StepRule::Raw`]. Why (20NG, K = 60): with the
//! raw or preconditioned gradient the codes' SVM accuracy stayed at 0.06–0.16; with the EM step
//! (and PLSA-started word codes, see [`crate::ostc::coding::init_codes`]) it is 0.66.

use std::collections::BTreeMap;

use ndarray::Array2;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::ostc::coding::DocCode;
use crate::text::Remap;

/// Allowed |Σ_n β_kn − 1| of a stored (f32) topic.
pub const SIMPLEX_TOL: f64 = 1e-3;

/// The learning rate α_t = τ₀ / (t + τ) of mini-batch update t (t = 0 for the first). Satisfies
/// Σα_t = ∞, Σα_t² < ∞ (Theorem 2) for τ₀ > 0, τ > 0.
pub fn learning_rate(t: u64, tau0: f64, tau: f64) -> f64 {
    tau0 / (t as f64 + tau)
}

/// Euclidean projection of `v` onto the simplex {x ≥ 0, Σx = 1}, in place (Michelot 1986: the
/// threshold τ with x = max(v − τ, 0) is found by repeatedly dropping entries ≤ τ; each round
/// is O(n), the active set only shrinks, so it ends after at most n rounds, typically < 10).
/// An empty slice is left alone. Non-finite input gives non-finite output (callers check).
pub fn project_simplex(v: &mut [f64]) {
    if v.is_empty() {
        return;
    }
    let mut active: Vec<usize> = (0..v.len()).collect();
    let mut tau = (v.iter().sum::<f64>() - 1.0) / v.len() as f64;
    loop {
        let before = active.len();
        active.retain(|&i| v[i] > tau);
        if active.is_empty() {
            // only possible through rounding: put the mass on the largest entry
            let i = (0..v.len())
                .max_by(|&a, &b| v[a].total_cmp(&v[b]).then(b.cmp(&a)))
                .unwrap_or(0);
            v.iter_mut().for_each(|x| *x = 0.0);
            v[i] = 1.0;
            return;
        }
        tau = (active.iter().map(|&i| v[i]).sum::<f64>() - 1.0) / active.len() as f64;
        if active.len() == before {
            break;
        }
    }
    v.iter_mut().for_each(|x| *x = (*x - tau).max(0.0));
}

/// A fresh dictionary over `n` terms: each topic a random positive vector (uniform in
/// [0.5, 1.5) plus `data_weight` × the given term frequencies `tf` normalised), on the simplex.
pub fn init_dictionary(
    n: usize,
    k: usize,
    tf: &[f64],
    data_weight: f64,
    rng: &mut ChaCha8Rng,
) -> Array2<f32> {
    let tot: f64 = tf.iter().sum::<f64>().max(1e-300);
    let mut b = Array2::<f32>::zeros((n, k));
    for j in 0..k {
        let mut col: Vec<f64> = (0..n)
            .map(|i| {
                let u: f64 = rng.random_range(0.5..1.5);
                u / n as f64 + data_weight * u * tf.get(i).copied().unwrap_or(0.0) / tot
            })
            .collect();
        let s: f64 = col.iter().sum();
        col.iter_mut().for_each(|x| *x /= s);
        for (i, x) in col.into_iter().enumerate() {
            b[[i, j]] = x as f32;
        }
    }
    b
}

/// A fresh dictionary seeded from documents (the NMF / k-means++-style initialisation from data
/// columns): topic j mixes `bg` × the corpus term frequencies `tf` (each entry jittered by a
/// uniform factor in [0.5, 1.5)) with (1 − `bg`) × the pooled normalised counts of
/// `per_topic` documents drawn at random from `docs` (lists of (id, count)). Seeding topics
/// from co-occurring terms breaks the symmetry that a near-uniform start leaves to the word
/// codes (each term's codes would otherwise follow the same topic in every document). With no
/// non-empty document it is [`init_dictionary`] with data weight 5.
pub fn init_dictionary_from_docs(
    n: usize,
    k: usize,
    tf: &[f64],
    docs: &[&[(u32, u32)]],
    per_topic: usize,
    bg: f64,
    rng: &mut ChaCha8Rng,
) -> Array2<f32> {
    let nonempty: Vec<&[(u32, u32)]> = docs.iter().copied().filter(|d| !d.is_empty()).collect();
    if nonempty.is_empty() || n == 0 {
        return init_dictionary(n, k, tf, 5.0, rng);
    }
    let tot: f64 = tf.iter().sum::<f64>();
    let bg = bg.clamp(0.0, 1.0);
    let mut out = Array2::<f64>::zeros((n, k));
    for j in 0..k {
        let mut col: Vec<f64> = (0..n)
            .map(|i| {
                let u: f64 = rng.random_range(0.5..1.5);
                let p = if tot > 0.0 {
                    tf.get(i).copied().unwrap_or(0.0) / tot
                } else {
                    0.0
                };
                u * (bg * p + 1e-3 / n as f64)
            })
            .collect();
        let mut seed = vec![0.0f64; n];
        for _ in 0..per_topic.max(1) {
            let d = nonempty[rng.random_range(0..nonempty.len())];
            let m: f64 = d.iter().map(|c| c.1 as f64).sum();
            for &(id, c) in d {
                if (id as usize) < n {
                    seed[id as usize] += c as f64 / m;
                }
            }
        }
        let sm: f64 = seed.iter().sum();
        for (c, s) in col.iter_mut().zip(&seed) {
            *c += (1.0 - bg) * s / sm;
        }
        for (i, c) in col.into_iter().enumerate() {
            out[[i, j]] = c;
        }
    }
    normalise_columns(out)
}

/// Scale every column to sum 1; a column with no (finite, positive) mass becomes uniform.
fn normalise_columns_in_place(out: &mut Array2<f64>) {
    let n = out.nrows();
    for mut col in out.columns_mut() {
        let s: f64 = col.sum();
        if s > 0.0 && s.is_finite() {
            col.mapv_inplace(|x| x / s);
        } else if n > 0 {
            col.fill(1.0 / n as f64);
        }
    }
}

/// Apply a vocabulary change to β: surviving rows move to their new ids, evicted rows are
/// dropped, new rows get `new_mass` / new_len each, then every topic is renormalised to sum 1.
/// With no topic mass left (all rows evicted) a topic becomes uniform.
pub fn remap_dictionary(beta: &Array2<f32>, remap: &Remap, new_mass: f64) -> Array2<f32> {
    let k = beta.ncols();
    let n = remap.new_len;
    let mut filled = vec![false; n];
    let mut out = Array2::<f64>::zeros((n, k));
    for r in 0..remap.old_len.min(beta.nrows()) {
        if let Some(nr) = remap.get(r) {
            filled[nr] = true;
            for j in 0..k {
                out[[nr, j]] = beta[[r, j]] as f64;
            }
        }
    }
    let fresh = new_mass / n.max(1) as f64;
    for (i, f) in filled.iter().enumerate() {
        if !f {
            out.row_mut(i).fill(fresh);
        }
    }
    normalise_columns(out)
}

fn normalise_columns(mut out: Array2<f64>) -> Array2<f32> {
    normalise_columns_in_place(&mut out);
    out.mapv(|x| x as f32)
}

/// The mini-batch gradient ĝ = (1/M) Σ_d ∇_β ℓ(s_d, β), only on the batch's terms: a map
/// term id → K-vector. `docs` pairs each document's term ids with its counts and codes.
pub fn gradient(docs: &[(&[u32], &[f64], &DocCode)], k: usize) -> BTreeMap<u32, Vec<f64>> {
    let mut g: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    let m = docs.len().max(1) as f64;
    for (ids, w, code) in docs {
        for (n, &id) in ids.iter().enumerate() {
            let f = (1.0 - w[n] / code.nu[n]) / m;
            let row = g.entry(id).or_insert_with(|| vec![0.0; k]);
            for (r, &s) in row.iter_mut().zip(&code.s[n * k..(n + 1) * k]) {
                *r += s * f;
            }
        }
    }
    g
}

/// How a mini-batch gradient becomes a step (all followed by the simplex projection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepRule {
    /// The paper's β_k − α ĝ_k. The Poisson gradient s(1 − w/ν) scales like 1/β, so on a real
    /// vocabulary a fixed τ₀ is either inert or collapses a topic onto a few terms.
    Raw,
    /// β_k − α ĝ_k / ‖ĝ_k‖₁: α is the ℓ1 mass one step may move.
    Normalised,
    /// Diagonally preconditioned by β (d_kn = β_kn ĝ_kn, a scale-free direction: the additive
    /// form of the KL-NMF multiplicative update), then ℓ1-normalised like `Normalised`.
    Preconditioned,
    /// Stochastic EM (natural-gradient) step, see [`update_em`]: each topic moves towards the
    /// mini-batch's normalised expected topic-term counts, β_k ← (1 − a_k) β_k + a_k ĉ_k.
    Em,
    /// Online EM on sufficient statistics, see [`update_stats`]: the model keeps each topic's
    /// running mass (expected tokens per document), so a step weighs the mini-batch against
    /// everything learnt so far, as batch EM weighs the whole corpus.
    Stats,
}

impl StepRule {
    pub const ALL: [StepRule; 5] = [
        StepRule::Raw,
        StepRule::Normalised,
        StepRule::Preconditioned,
        StepRule::Em,
        StepRule::Stats,
    ];

    /// The kebab-case name (as in TOML and on the command line).
    pub fn name(self) -> &'static str {
        match self {
            StepRule::Raw => "raw",
            StepRule::Normalised => "normalised",
            StepRule::Preconditioned => "preconditioned",
            StepRule::Em => "em",
            StepRule::Stats => "stats",
        }
    }
}

impl std::str::FromStr for StepRule {
    type Err = crate::model::UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        StepRule::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| {
                crate::model::UnknownName::new("step rule", s, StepRule::ALL.map(StepRule::name))
            })
    }
}

/// Expected topic-term counts of a mini-batch: c_kn = Σ_d w_dn s_dnk β_kn / ν_dn (the share of
/// each word's Poisson mean that topic k supplies, times its count), only on the batch's terms.
pub fn topic_term_counts(
    docs: &[(&[u32], &[f64], &DocCode)],
    beta: &Array2<f32>,
) -> BTreeMap<u32, Vec<f64>> {
    let k = beta.ncols();
    let mut c: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for (ids, w, code) in docs {
        for (n, &id) in ids.iter().enumerate() {
            let f = w[n] / code.nu[n];
            let b = beta.row(id as usize);
            let row = c.entry(id).or_insert_with(|| vec![0.0; k]);
            for ((r, &s), &bv) in row
                .iter_mut()
                .zip(&code.s[n * k..(n + 1) * k])
                .zip(b.iter())
            {
                *r += f * s * bv as f64;
            }
        }
    }
    c
}

/// The stochastic-EM dictionary step. For fixed word codes the Poisson loss's β-subproblem is
/// solved by the EM / KL-NMF fixed point β_kn ∝ c_kn (expected topic-term counts, see
/// [`topic_term_counts`]); online, each topic takes a convex step towards the mini-batch's
/// normalised counts ĉ_k = c_k / C_k (C_k = Σ_n c_kn):
///
/// β_k ← (1 − a_k) β_k + a_k ĉ_k, a_k = α C_k / (C_k + C̄), C̄ = Σ_k C_k / K,
///
/// so a topic that explains few of the batch's tokens moves little (its ĉ_k is noisy); ĉ_k is
/// smoothed as (1 − σ) c_k / C_k + σ/N (σ = `smooth`, a Dirichlet-like floor so that terms absent
/// from recent batches keep some mass and held-out words stay explainable). A convex
/// combination of simplex points stays on the simplex (renormalised against rounding): this is
/// the projected step Π_P(β − α_k(β − ĉ)) of the paper's family with the natural-gradient
/// direction (Hoffman et al. 2010) in place of the raw Poisson gradient. α ∈ [0, 1] (clamped).
pub fn update_em(
    beta: &Array2<f32>,
    counts: &BTreeMap<u32, Vec<f64>>,
    alpha: f64,
    smooth: f64,
) -> Array2<f32> {
    let (n, k) = beta.dim();
    let alpha = alpha.clamp(0.0, 1.0);
    let smooth = smooth.clamp(0.0, 1.0);
    let mut tot = vec![0.0f64; k];
    for row in counts.values() {
        for (t, &v) in tot.iter_mut().zip(row) {
            *t += v;
        }
    }
    let mean = tot.iter().sum::<f64>() / k.max(1) as f64;
    let step: Vec<f64> = (0..k)
        .map(|j| {
            if tot[j] > 0.0 && tot[j].is_finite() {
                alpha * tot[j] / (tot[j] + mean)
            } else {
                0.0
            }
        })
        .collect();
    let flat: Vec<f64> = step.iter().map(|a| a * smooth / n.max(1) as f64).collect();
    // row-major passes (β is term-major): scale, add the batch estimate, renormalise; each pass
    // computes in f64 and stores f32
    let mut out = beta.clone();
    for mut row in out.rows_mut() {
        for (j, v) in row.iter_mut().enumerate() {
            *v = ((1.0 - step[j]) * *v as f64 + flat[j]) as f32;
        }
    }
    for (&id, row) in counts {
        let mut r = out.row_mut(id as usize);
        for (j, v) in r.iter_mut().enumerate() {
            if step[j] > 0.0 {
                *v = (*v as f64 + step[j] * (1.0 - smooth) * row[j] / tot[j]) as f32;
            }
        }
    }
    let mut sums = vec![0.0f64; k];
    for row in out.rows() {
        for (s, &v) in sums.iter_mut().zip(row.iter()) {
            *s += v as f64;
        }
    }
    for mut row in out.rows_mut() {
        for (v, &s) in row.iter_mut().zip(&sums) {
            *v = if s > 0.0 && s.is_finite() {
                (*v as f64 / s) as f32
            } else {
                1.0 / n as f32
            };
        }
    }
    out
}

/// The online-EM step on sufficient statistics (Cappé & Moulines 2009; the stochastic
/// variational form of Hoffman et al. 2010) for a mini-batch of `m` documents with expected
/// topic-term counts `counts` (see [`topic_term_counts`]), in the units of one document:
///
/// S_k = T_k β̃_k ← (1 − ρ) S_k + ρ c_k / m,  β_k = (1 − σ) β̃_k + σ / N,
///
/// where β̃_k is topic k without its uniform floor σ/N (recovered from β, clamped at 0) and
/// `mass` holds T_k = Σ_n S_kn (updated in place: T_k ← (1 − ρ) T_k + ρ C_k / m). So S
/// estimates the expected topic-term counts of an average document, each mini-batch entering
/// with weight ρ; with ρ = 1 and the whole corpus as one batch it is the batch M-step
/// β̃_k ∝ c_k. Guarantees: every topic on the simplex, entries ≥ σ/N (up to f32 rounding),
/// T_k ≥ 0 and finite. ρ is clamped to [0, 1], σ to [0, 1] (σ = 1: every topic uniform).
/// `mass.len()` must be K.
pub fn update_stats(
    beta: &Array2<f32>,
    counts: &BTreeMap<u32, Vec<f64>>,
    mass: &mut [f64],
    rho: f64,
    m: usize,
    smooth: f64,
) -> Array2<f32> {
    let (n, k) = beta.dim();
    assert_eq!(mass.len(), k, "one mass per topic");
    let rho = rho.clamp(0.0, 1.0);
    let smooth = smooth.clamp(0.0, 1.0);
    let floor = smooth / n.max(1) as f64;
    let m = m.max(1) as f64;
    let mut tot = vec![0.0f64; k];
    for row in counts.values() {
        for (t, &v) in tot.iter_mut().zip(row) {
            *t += v;
        }
    }
    // β̃ = (β − σ/N)/(1 − σ), clamped and renormalised per topic
    let mut tilde = beta.mapv(|v| ((v as f64 - floor) / (1.0 - smooth).max(1e-12)).max(0.0));
    normalise_columns_in_place(&mut tilde);
    let old: Vec<f64> = mass.iter().map(|&t| (1.0 - rho) * t.max(0.0)).collect();
    for (j, t) in mass.iter_mut().enumerate() {
        let new = old[j] + rho * tot[j] / m;
        *t = if new.is_finite() { new } else { old[j] };
    }
    // S'_k / T'_k: old statistics scaled, the batch's counts added
    for mut row in tilde.rows_mut() {
        for (j, v) in row.iter_mut().enumerate() {
            if mass[j] > 0.0 {
                *v *= old[j] / mass[j];
            }
        }
    }
    for (&id, row) in counts {
        let mut r = tilde.row_mut(id as usize);
        for (j, v) in r.iter_mut().enumerate() {
            if mass[j] > 0.0 {
                *v += rho * row[j] / m / mass[j];
            }
        }
    }
    let mut out = tilde.mapv(|v| ((1.0 - smooth) * v + floor) as f32);
    // renormalise against rounding (each topic's S'/T' sums to 1 up to it)
    for mut col in out.columns_mut() {
        let s: f64 = col.iter().map(|&v| v as f64).sum();
        if s > 0.0 && s.is_finite() {
            col.mapv_inplace(|x| (x as f64 / s) as f32);
        } else if n > 0 {
            col.fill(1.0 / n as f32);
        }
    }
    out
}

/// One dictionary step from a mini-batch of coded documents (term ids, counts, codes) with
/// rate α, by `rule`: the projected gradient step [`update`], the EM step [`update_em`] or the
/// online-EM step [`update_stats`]. `smooth` is the EM steps' σ (unused by the gradient rules).
///
/// `mass` is the per-topic mass T of [`StepRule::Stats`] (left alone by the other rules): when
/// it does not hold K values it starts at (tokens per document of this mini-batch) / K each,
/// so the initial dictionary weighs as much as the statistics of an average document (which S
/// estimates) and is forgotten at the rate ρ_t.
pub fn step(
    beta: &Array2<f32>,
    docs: &[(&[u32], &[f64], &DocCode)],
    alpha: f64,
    (rule, smooth): (StepRule, f64),
    mass: &mut Vec<f64>,
) -> Array2<f32> {
    let k = beta.ncols();
    match rule {
        StepRule::Em => update_em(beta, &topic_term_counts(docs, beta), alpha, smooth),
        StepRule::Stats => {
            if mass.len() != k {
                let tokens: f64 = docs.iter().map(|d| d.1.iter().sum::<f64>()).sum();
                let per_doc = tokens / docs.len().max(1) as f64;
                *mass = vec![per_doc / k.max(1) as f64; k];
            }
            let counts = topic_term_counts(docs, beta);
            update_stats(beta, &counts, mass, alpha, docs.len(), smooth)
        }
        _ => update(beta, &gradient(docs, k), alpha, rule),
    }
}

/// One projected-gradient step β ← Π_P(β − α ĝ) on every topic, shaped by `rule`. Returns the
/// new dictionary.
pub fn update(
    beta: &Array2<f32>,
    grad: &BTreeMap<u32, Vec<f64>>,
    alpha: f64,
    rule: StepRule,
) -> Array2<f32> {
    let (n, k) = beta.dim();
    let mut out = beta.clone();
    let mut col = vec![0.0f64; n];
    for j in 0..k {
        for (i, c) in col.iter_mut().enumerate() {
            *c = beta[[i, j]] as f64;
        }
        let dir = |id: u32, g: &[f64]| match rule {
            StepRule::Preconditioned => g[j] * beta[[id as usize, j]] as f64,
            _ => g[j],
        };
        let scale = if rule == StepRule::Raw {
            1.0
        } else {
            let l1: f64 = grad.iter().map(|(&id, g)| dir(id, g).abs()).sum();
            if l1 > 0.0 && l1.is_finite() {
                1.0 / l1
            } else {
                0.0
            }
        };
        for (&id, g) in grad {
            col[id as usize] -= alpha * scale * dir(id, g);
        }
        project_simplex(&mut col);
        for (i, &c) in col.iter().enumerate() {
            out[[i, j]] = c as f32;
        }
    }
    out
}

/// Check a stored dictionary: finite, ≥ 0, each topic summing to 1 within [`SIMPLEX_TOL`].
/// Returns a description of the first violation.
pub fn check_dictionary(beta: &Array2<f32>) -> Result<(), String> {
    if beta.iter().any(|v| !v.is_finite()) {
        return Err("non-finite".into());
    }
    if beta.iter().any(|&v| v < 0.0) {
        return Err("a negative entry".into());
    }
    if beta.nrows() == 0 {
        return Ok(());
    }
    for (j, col) in beta.columns().into_iter().enumerate() {
        let s: f64 = col.iter().map(|&v| v as f64).sum();
        if (s - 1.0).abs() > SIMPLEX_TOL {
            return Err(format!("topic {j} sums to {s}, not 1"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projection_of_a_simplex_point_is_identity() {
        let mut v = vec![0.2, 0.3, 0.5];
        project_simplex(&mut v);
        assert!((v[0] - 0.2).abs() < 1e-15 && (v[2] - 0.5).abs() < 1e-15);
    }
}
