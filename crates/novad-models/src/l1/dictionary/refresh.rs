use rand::seq::index::sample;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::bootstrap::{spherical_kmeans, top_terms_unit_l1};
use super::Dictionary;
use crate::text::SparseDoc;

/// Refreshing the least-used atoms each timestep (SPEC §4.8): the worst-explained documents of
/// the batch are clustered (spherical k-means) and the centroids, cut to their top terms,
/// replace the atoms that have gone unused longest. k stays fixed. Off in the paper's
/// configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefreshParams {
    /// Atoms replaced per timestep (at most; never more than k).
    pub atoms: usize,
    /// Terms kept per new atom.
    pub top_terms: usize,
    /// Share of the batch (highest scores first) clustered into new atoms, in (0, 1].
    pub pool_fraction: f64,
    /// k-means iterations.
    pub iterations: u32,
}

/// Replace up to `params.atoms` atoms of `dict` (m × k) by k-means centroids of the
/// worst-explained documents. `usage[j]` is how many documents of this batch used atom j,
/// `last_used[j]` the last timestep atom j was used (updated for replaced atoms). Victims are
/// chosen by (usage in this batch, last use, index), ascending. Returns the replaced atoms.
/// Deterministic in (`seed`, `timestep`); the result stays in 𝒜 (unit-ℓ1 non-negative atoms).
#[allow(clippy::too_many_arguments)]
pub fn refresh_atoms(
    dict: &mut Dictionary,
    last_used: &mut [u64],
    usage: &[u32],
    docs: &[SparseDoc],
    scores: &[f64],
    params: &RefreshParams,
    seed: u64,
    timestep: u64,
) -> Vec<usize> {
    let (m, k) = dict.dim();
    let mut pool: Vec<usize> = (0..docs.len()).filter(|&j| !docs[j].is_empty()).collect();
    if pool.is_empty() || params.atoms == 0 || k == 0 {
        return Vec::new();
    }
    pool.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    let keep = ((params.pool_fraction * pool.len() as f64).ceil() as usize)
        .max(params.atoms)
        .min(pool.len());
    pool.truncate(keep);
    pool.sort_unstable();
    let c = params.atoms.min(pool.len()).min(k);
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ timestep.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut seeds: Vec<usize> = sample(&mut rng, pool.len(), c)
        .into_iter()
        .map(|i| pool[i])
        .collect();
    seeds.sort_unstable();
    let cents = spherical_kmeans(docs, &pool, &seeds, m, params.iterations);
    let mut victims: Vec<usize> = (0..k).collect();
    victims.sort_by_key(|&j| (usage[j], last_used[j], j));
    victims.truncate(c);
    let cleared = &victims[..cents.len().min(c)];
    let mut writes = Vec::new();
    for (&v, cent) in victims.iter().zip(&cents) {
        // f32 rounding could push the sum a hair over 1: scale by (1 − 1e-6)
        for (i, w) in top_terms_unit_l1(cent, params.top_terms) {
            writes.push((i, v as u32, (w * (1.0 - 1e-6)) as f32));
        }
        last_used[v] = timestep;
    }
    dict.rewrite_columns(cleared, &writes);
    victims
}
