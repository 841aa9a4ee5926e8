use ndarray::Array2;
use rand::seq::index::sample;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::bootstrap::{spherical_kmeans, top_terms_unit_l1};
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
    dict: &mut Array2<f32>,
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
    clear_columns(dict, cleared);
    for (&v, cent) in victims.iter().zip(&cents) {
        // f32 rounding could push the sum a hair over 1: scale by (1 − 1e-6)
        for (i, w) in top_terms_unit_l1(cent, params.top_terms) {
            dict[[i, v]] = (w * (1.0 - 1e-6)) as f32;
        }
        last_used[v] = timestep;
    }
    victims
}

/// Set columns `cols` of `dict` to +0.0: row by row (a row-major matrix's columns are strided),
/// in parallel, writing only entries that are not already +0.0 (most are), so clean rows are
/// only read.
fn clear_columns(dict: &mut Array2<f32>, cols: &[usize]) {
    let k = dict.ncols();
    match dict.as_slice_mut() {
        Some(a) if k > 0 => a.par_chunks_mut(k).for_each(|row| {
            for &v in cols {
                if row[v].to_bits() != 0 {
                    row[v] = 0.0;
                }
            }
        }),
        _ => {
            for &v in cols {
                dict.column_mut(v).fill(0.0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Clearing row by row leaves the same bits as filling each column with +0.0 (−0.0 and
    /// non-zero entries become +0.0, every other column is untouched), in standard and in
    /// column-major layout.
    #[test]
    fn clearing_columns_equals_filling_them() {
        let mut r = ChaCha8Rng::seed_from_u64(8);
        let mut a = Array2::<f32>::from_shape_fn((300, 17), |_| match r.random_range(0..4) {
            0 => 0.0,
            1 => -0.0,
            _ => r.random::<f32>(),
        });
        let cols = [0, 5, 16, 7];
        let mut want = a.clone();
        for &v in &cols {
            want.column_mut(v).fill(0.0);
        }
        let bits = |m: &Array2<f32>| m.iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
        let mut f = a.clone().reversed_axes().as_standard_layout().into_owned();
        f = f.reversed_axes();
        clear_columns(&mut a, &cols);
        clear_columns(&mut f, &cols);
        assert_eq!(bits(&a), bits(&want));
        assert_eq!(bits(&f), bits(&want));
    }
}
