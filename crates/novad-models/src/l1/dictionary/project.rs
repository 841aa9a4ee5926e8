use ndarray::Array2;

/// Euclidean projection of `v` onto {x ≥ 0, Σ x ≤ 1}, in place.
///
/// Negative entries are clipped to 0; if the clipped vector sums to more than 1 it is projected
/// onto the simplex by the sort-based method of Duchi et al. (2008): x = max(v − θ, 0) with the
/// unique θ > 0 making Σ x = 1. O(s log s) in the number s of positive entries.
pub fn project_nonneg_l1_ball(v: &mut [f64]) {
    let mut sum = 0.0;
    for x in v.iter_mut() {
        if x.is_nan() || *x <= 0.0 {
            *x = 0.0;
        }
        sum += *x;
    }
    if sum <= 1.0 {
        return;
    }
    let theta = simplex_threshold(v.iter().copied().filter(|&x| x > 0.0).collect());
    for x in v.iter_mut() {
        *x = (*x - theta).max(0.0);
    }
}

/// θ such that Σ max(u_i − θ, 0) = 1, for positive `u` with Σ u > 1.
///
/// The sort-based rule ([`sorted_threshold`]) needs only the largest values: [`top_threshold`]
/// narrows `u` to them (its first round drops the values ≤ θ₀ = (Σ u − 1) / n) and sorts only
/// what is left. When the rule stops inside those top values, the result is bit-identical to
/// sorting all of `u` (the same values, summed in the same order); otherwise it falls back to
/// the full sort.
fn simplex_threshold(u: Vec<f64>) -> f64 {
    top_threshold(u.clone(), f64::NEG_INFINITY).unwrap_or_else(|| full_threshold(u))
}

/// Rounds of Michelot's fixed point before the sort: it usually stops dropping values after a
/// few; more rounds only shrink a set that is sorted anyway.
const NARROW_ROUNDS: usize = 16;

/// The sort-based rule over all of `u` (positive, Σ u > 1).
fn full_threshold(u: Vec<f64>) -> f64 {
    sorted_threshold(u, true).expect("the full rule always gives a threshold")
}

/// θ of a column from its largest values: `top`, every value of the column above some level
/// (in any order), and `next`, the largest value of the column not in `top` (−∞ when `top`
/// is the whole column). The top set is first narrowed by Michelot's fixed point — a value
/// ≤ (Σ top − 1) / |top| is at most θ whenever `top` holds every value above θ, so it is
/// dropped (the largest dropped value becomes `next`) — then sorted, and the sort-based rule
/// runs over it followed by `next`. Those are the column's largest values in decreasing
/// order, so when the rule stops among them its θ is the full sort's, bit for bit. `None`
/// when it does not stop among them (possible only through rounding): the caller sorts the
/// whole column. At most [`NARROW_ROUNDS`] rounds narrow the set (the rest is sorted as it is).
fn top_threshold(mut top: Vec<f64>, mut next: f64) -> Option<f64> {
    for _ in 0..NARROW_ROUNDS {
        let sum: f64 = top.iter().sum();
        if top.is_empty() || sum <= 1.0 {
            break;
        }
        let level = (sum - 1.0) / top.len() as f64;
        let before = top.len();
        top.retain(|&v| {
            let keep = v > level;
            if !keep {
                next = next.max(v);
            }
            keep
        });
        if top.len() == before {
            break;
        }
    }
    let complete = next == f64::NEG_INFINITY;
    if !complete {
        top.push(next);
    }
    sorted_threshold(top, complete)
}

/// The sort-based rule of Duchi et al. over `u` sorted in decreasing order: θ from the
/// longest prefix whose smallest value stays above its own θ. `None` when `complete` is false
/// and every value of `u` passed (the prefix may go on among values not in `u`).
fn sorted_threshold(mut u: Vec<f64>, complete: bool) -> Option<f64> {
    u.sort_unstable_by(|a, b| b.total_cmp(a));
    let mut cum = 0.0;
    let mut theta = 0.0;
    for (j, &uj) in u.iter().enumerate() {
        cum += uj;
        let t = (cum - 1.0) / (j as f64 + 1.0);
        if uj - t > 0.0 {
            theta = t;
        } else {
            return Some(theta.max(0.0));
        }
    }
    complete.then(|| theta.max(0.0))
}

/// Project every column of a row-major `m × k` matrix onto {x ≥ 0, Σ x ≤ 1} (Π_𝒜), in place.
/// Columns already inside are left unchanged (bit for bit) apart from clipping negatives.
/// Memory is read row by row (two sequential passes plus one per column that needs a
/// threshold is avoided by gathering those columns in a single pass).
pub fn project_columns(a: &mut Array2<f64>) {
    let k = a.ncols();
    let mut sums = vec![0.0f64; k];
    for mut row in a.rows_mut() {
        for (s, v) in sums.iter_mut().zip(row.iter_mut()) {
            if v.is_nan() || *v <= 0.0 {
                *v = 0.0;
            }
            *s += *v;
        }
    }
    let over: Vec<usize> = (0..k).filter(|&j| sums[j] > 1.0).collect();
    if over.is_empty() {
        return;
    }
    let mut vals: Vec<Vec<f64>> = vec![Vec::new(); over.len()];
    for row in a.rows() {
        for (c, &j) in over.iter().enumerate() {
            let v = row[j];
            if v > 0.0 {
                vals[c].push(v);
            }
        }
    }
    let mut theta = vec![0.0f64; k];
    for (c, &j) in over.iter().enumerate() {
        theta[j] = simplex_threshold(std::mem::take(&mut vals[c]));
    }
    for mut row in a.rows_mut() {
        for &j in &over {
            row[j] = (row[j] - theta[j]).max(0.0);
        }
    }
}

/// A block of rows built apart: the rows' entry counts, then all their entries in row order.
pub type RowBlock<T> = (Vec<usize>, Vec<(u32, T)>);

/// Rows of a matrix given by their non-zero entries: row r is
/// `entries[ptr[r]..ptr[r + 1]]`, (column, value) pairs by column.
#[derive(Debug, Clone, PartialEq)]
pub struct SparseRows<T = f64> {
    pub ptr: Vec<usize>,
    pub entries: Vec<(u32, T)>,
}

impl<T> Default for SparseRows<T> {
    fn default() -> Self {
        SparseRows {
            ptr: Vec::new(),
            entries: Vec::new(),
        }
    }
}

impl<T> SparseRows<T> {
    /// Rows from one list of entries per row.
    pub fn from_rows(rows: impl IntoIterator<Item = Vec<(u32, T)>>) -> Self {
        let mut out = SparseRows {
            ptr: vec![0],
            entries: Vec::new(),
        };
        for r in rows {
            out.entries.extend(r);
            out.ptr.push(out.entries.len());
        }
        out
    }
    /// Rows built in blocks, joined in block order.
    pub fn from_blocks(blocks: Vec<RowBlock<T>>) -> Self {
        let rows = blocks.iter().map(|b| b.0.len()).sum::<usize>();
        let mut out = SparseRows {
            ptr: Vec::with_capacity(rows + 1),
            entries: Vec::with_capacity(blocks.iter().map(|b| b.1.len()).sum()),
        };
        out.ptr.push(0);
        for (lens, ent) in blocks {
            for l in lens {
                out.ptr.push(out.ptr.last().unwrap() + l);
            }
            out.entries.extend(ent);
        }
        out
    }
    pub fn len(&self) -> usize {
        self.ptr.len().saturating_sub(1)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn row(&self, r: usize) -> &[(u32, T)] {
        &self.entries[self.ptr[r]..self.ptr[r + 1]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The shortcut (values above θ₀, narrowed by Michelot's fixed point, then sorted) gives
    /// the full sort's θ bit for bit, on spread-out values (the shortcut drops most of them),
    /// near-equal values, heavy tails and hand-made edge cases (ties at the floor, one value);
    /// θ solves Σ max(u − θ, 0) = 1; the narrowing drops values in most cases.
    #[test]
    fn the_threshold_shortcut_equals_the_full_sort() {
        let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let mut cases: Vec<Vec<f64>> = vec![
            vec![0.9, 0.9, 0.01, 0.01],
            vec![0.6, 0.6, 0.2, 0.2, 0.2],
            vec![2.0],
            vec![0.5; 7],
        ];
        for case in 0..300 {
            let n = 2 + case % 97;
            cases.push(
                (0..n)
                    .map(|_| match case % 3 {
                        0 => r.random::<f64>().powi(6) * 0.5 + 1e-9,
                        1 => 0.5 * (1.0 + r.random::<f64>()) / (1.0 + (case % 5) as f64),
                        _ => (1.0 / (1e-3 + r.random::<f64>())).min(1e4) * 1e-2,
                    })
                    .collect(),
            );
        }
        let mut narrowed = 0;
        for (case, u) in cases.into_iter().enumerate() {
            if u.iter().sum::<f64>() <= 1.0 {
                continue;
            }
            let floor = (u.iter().sum::<f64>() - 1.0) / u.len() as f64;
            let top: Vec<f64> = u.iter().copied().filter(|&v| v > floor).collect();
            let level = (top.iter().sum::<f64>() - 1.0) / top.len() as f64;
            if top.iter().any(|&v| v <= level) {
                narrowed += 1;
            }
            let fast = simplex_threshold(u.clone());
            let full = full_threshold(u.clone());
            assert_eq!(fast.to_bits(), full.to_bits(), "case {case}");
            let mass: f64 = u.iter().map(|&v| (v - fast).max(0.0)).sum();
            assert!((mass - 1.0).abs() < 1e-9, "case {case}: Σ = {mass}");
        }
        assert!(narrowed > 100, "{narrowed}");
    }

    /// The top values settle θ when the rule stops among them (with the largest other value
    /// last), and say so when it does not; a complete top set always settles it.
    #[test]
    fn the_top_values_settle_theta_only_when_the_rule_stops_among_them() {
        // column 0.9, 0.9, 0.8, 0.1: the rule passes 0.9, 0.9, 0.8 (θ = 1.6 / 3) and stops at 0.1
        let column = vec![0.9, 0.1, 0.8, 0.9];
        let full = full_threshold(column.clone());
        assert!((full - 1.6 / 3.0).abs() < 1e-12, "{full}");
        // above 0.85, with 0.8 next: the rule passes 0.8 too, so the top does not settle θ
        assert_eq!(top_threshold(vec![0.9, 0.9], 0.8), None);
        // above 0.5, with 0.1 next: it stops at 0.1, with the full sort's θ
        let t = top_threshold(vec![0.9, 0.8, 0.9], 0.1).unwrap();
        assert_eq!(t.to_bits(), full.to_bits());
        // the whole column, nothing next (the narrowing drops 0.1)
        let t = top_threshold(column.clone(), f64::NEG_INFINITY).unwrap();
        assert_eq!(t.to_bits(), full.to_bits());
        assert_eq!(simplex_threshold(column).to_bits(), full.to_bits());
    }
}
