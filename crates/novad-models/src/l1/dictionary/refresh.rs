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

/// What a refresh does to Â (see [`plan_refresh`]): the replaced atoms and their new entries.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RefreshPlan {
    /// The atoms chosen to be replaced, in victim order (those past `filled` had no centroid
    /// and keep their columns).
    pub victims: Vec<u32>,
    /// How many of the first victims get a centroid (their columns are cleared and rewritten).
    pub filled: usize,
    /// The new entries (row, atom, value) of the filled victims' columns.
    pub writes: Vec<(usize, u32, f32)>,
}

impl RefreshPlan {
    /// True when the plan fits an m × k dictionary and keeps it in 𝒜: distinct victims `< k`,
    /// `filled` of them at most, writes to distinct entries of rows `< m` of filled victims
    /// only, values in [+0, 1] and each filled column's sum ≤ 1 (added in f64).
    pub fn fits(&self, m: usize, k: usize) -> bool {
        let mut slot = vec![usize::MAX; k];
        for (c, &v) in self.victims.iter().enumerate() {
            match slot.get_mut(v as usize) {
                Some(s) if *s == usize::MAX => *s = c,
                _ => return false,
            }
        }
        if self.filled > self.victims.len() {
            return false;
        }
        let mut sums = vec![0.0f64; self.filled];
        for &(i, j, w) in &self.writes {
            let c = slot.get(j as usize).copied().unwrap_or(usize::MAX);
            if i >= m || c >= self.filled || !(0.0..=1.0).contains(&w) || w.is_sign_negative() {
                return false;
            }
            sums[c] += w as f64;
        }
        let mut entries: Vec<(usize, u32)> = self.writes.iter().map(|&(i, j, _)| (i, j)).collect();
        entries.sort_unstable();
        entries.windows(2).all(|e| e[0] != e[1]) && sums.iter().all(|&s| s <= 1.0)
    }

    /// Apply the plan: the filled victims' columns cleared and rewritten, their last use set
    /// to `timestep`. The plan must fit `dict` ([`Self::fits`]).
    pub fn apply(&self, dict: &mut Dictionary, last_used: &mut [u64], timestep: u64) {
        let filled: Vec<usize> = self.victims[..self.filled]
            .iter()
            .map(|&v| v as usize)
            .collect();
        for &v in &filled {
            last_used[v] = timestep;
        }
        dict.rewrite_columns(&filled, &self.writes);
    }
}

/// The refresh of up to `params.atoms` of the k atoms (m terms) by k-means centroids of the
/// worst-explained documents. `usage[j]` is how many documents of this batch used atom j,
/// `last_used[j]` the last timestep atom j was used. Victims are chosen by (usage in this
/// batch, last use, index), ascending. Needs only the batch and the atoms' use, not Â, so it
/// can be planned before the step's update and applied after it ([`RefreshPlan::apply`]).
/// Deterministic in (`seed`, `timestep`); the new atoms are unit-ℓ1 and non-negative, so Â
/// stays in 𝒜.
#[allow(clippy::too_many_arguments)]
pub fn plan_refresh(
    (m, k): (usize, usize),
    last_used: &[u64],
    usage: &[u32],
    docs: &[SparseDoc],
    scores: &[f64],
    params: &RefreshParams,
    seed: u64,
    timestep: u64,
) -> RefreshPlan {
    let mut pool: Vec<usize> = (0..docs.len()).filter(|&j| !docs[j].is_empty()).collect();
    if pool.is_empty() || params.atoms == 0 || k == 0 {
        return RefreshPlan::default();
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
    let mut writes = Vec::new();
    for (&v, cent) in victims.iter().zip(&cents) {
        // f32 rounding could push the sum a hair over 1: scale by (1 − 1e-6)
        for (i, w) in top_terms_unit_l1(cent, params.top_terms) {
            writes.push((i, v as u32, (w * (1.0 - 1e-6)) as f32));
        }
    }
    RefreshPlan {
        filled: cents.len().min(c),
        victims: victims.into_iter().map(|v| v as u32).collect(),
        writes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// 60 documents over 40 terms, L1-normalised, and a 40 × 12 dictionary in 𝒜.
    fn data(seed: u64) -> (Vec<SparseDoc>, Vec<f64>, Dictionary) {
        let mut r = ChaCha8Rng::seed_from_u64(seed);
        let docs: Vec<SparseDoc> = (0..60)
            .map(|_| {
                let mut ids: Vec<u32> = (0..6).map(|_| r.random_range(0..40)).collect();
                ids.sort_unstable();
                ids.dedup();
                let w: Vec<f64> = ids.iter().map(|_| 0.1 + r.random::<f64>()).collect();
                let s: f64 = w.iter().sum();
                SparseDoc {
                    ids,
                    vals: w.iter().map(|v| v / s).collect(),
                }
            })
            .collect();
        let scores: Vec<f64> = (0..60).map(|_| r.random::<f64>()).collect();
        let a = ndarray::Array2::from_shape_fn((40, 12), |_| r.random::<f32>() / 80.0);
        (docs, scores, Dictionary::from_dense(a.view()))
    }

    fn params() -> RefreshParams {
        RefreshParams {
            atoms: 3,
            top_terms: 4,
            pool_fraction: 0.25,
            iterations: 5,
        }
    }

    /// The plan replaces the atoms with the smallest (usage, last use, index), gives each a
    /// non-negative column of ℓ1 norm ≤ 1 on at most `top_terms` terms, marks them used now,
    /// and leaves every other column as it was; it survives the wire unchanged.
    #[test]
    fn a_planned_refresh_replaces_the_least_used_atoms_and_stays_in_the_set() {
        let (docs, scores, a) = data(1);
        let usage: Vec<u32> = vec![5, 0, 3, 0, 9, 1, 0, 2, 2, 7, 4, 0];
        let last_used: Vec<u64> = vec![9, 8, 9, 3, 9, 9, 8, 9, 9, 9, 9, 2];
        let plan = plan_refresh(
            (40, 12),
            &last_used,
            &usage,
            &docs,
            &scores,
            &params(),
            7,
            10,
        );
        // unused atoms 11 (last used 2), 3 (3), then 1 and 6 (8) by index
        assert_eq!(plan.victims, vec![11, 3, 1]);
        assert_eq!(plan.filled, 3);
        assert!(plan.fits(40, 12));
        let wire: RefreshPlan = postcard::from_bytes(&postcard::to_stdvec(&plan).unwrap()).unwrap();
        assert_eq!(wire, plan);
        let (mut b, mut lu) = (a.clone(), last_used.clone());
        plan.apply(&mut b, &mut lu, 10);
        let l1 = b.col_l1();
        for j in 0..12 {
            let replaced = plan.victims.contains(&(j as u32));
            assert_eq!(lu[j], if replaced { 10 } else { last_used[j] }, "atom {j}");
            let terms = (0..40).filter(|&i| b.get(i, j) > 0.0).count();
            if replaced {
                assert!(
                    l1[j] <= 1.0 && l1[j] > 0.99 && terms <= 4,
                    "atom {j}: {} {terms}",
                    l1[j]
                );
            } else {
                assert!(
                    (0..40).all(|i| b.get(i, j) == a.get(i, j)),
                    "atom {j} changed"
                );
            }
            assert!((0..40).all(|i| b.get(i, j) >= 0.0));
        }
    }

    /// A plan that does not fit the dictionary is refused: a repeated or out-of-range victim,
    /// more filled victims than victims, a write to a row past m, to an atom not filled, to
    /// the same entry twice, a value outside [+0, 1], or a column summing to more than 1.
    #[test]
    fn a_plan_that_does_not_fit_is_refused() {
        let (docs, scores, _) = data(2);
        let plan = plan_refresh(
            (40, 12),
            &[0; 12],
            &[0; 12],
            &docs,
            &scores,
            &params(),
            3,
            4,
        );
        assert!(plan.fits(40, 12) && !plan.writes.is_empty());
        type Spoil = Box<dyn Fn(&mut RefreshPlan)>;
        let bad: Vec<Spoil> = vec![
            Box::new(|p| p.victims[1] = p.victims[0]),
            Box::new(|p| p.victims[0] = 12),
            Box::new(|p| p.filled = 4),
            Box::new(|p| p.writes[0].0 = 40),
            Box::new(|p| {
                let v = p.victims[2];
                p.writes.retain(|w| w.1 != v);
                p.filled = 2;
                p.writes.push((0, v, 0.5));
            }),
            Box::new(|p| p.writes[0].2 = f32::NAN),
            Box::new(|p| p.writes[0].2 = 1.5),
            Box::new(|p| p.writes[0].2 = -0.0),
            Box::new(|p| p.writes.push(p.writes[0])),
            // every value fits, the column's sum does not
            Box::new(|p| {
                let v = p.victims[0];
                p.writes.retain(|w| w.1 != v);
                p.writes.extend((0..4).map(|i| (i, v, 0.5)));
            }),
        ];
        for (case, spoil) in bad.iter().enumerate() {
            let mut p = plan.clone();
            spoil(&mut p);
            assert!(!p.fits(40, 12), "case {case}");
        }
    }
}
