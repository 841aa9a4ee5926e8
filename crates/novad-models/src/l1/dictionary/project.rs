use ndarray::Array2;
use rayon::prelude::*;

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
fn simplex_threshold(mut u: Vec<f64>) -> f64 {
    u.sort_unstable_by(|a, b| b.total_cmp(a));
    let mut cum = 0.0;
    let mut theta = 0.0;
    for (j, &uj) in u.iter().enumerate() {
        cum += uj;
        let t = (cum - 1.0) / (j as f64 + 1.0);
        if uj - t > 0.0 {
            theta = t;
        } else {
            break;
        }
    }
    theta.max(0.0)
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

/// Rows of a matrix given by their non-zero entries: row r is
/// `entries[ptr[r]..ptr[r + 1]]`, (column, value) pairs by column.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SparseRows {
    pub ptr: Vec<usize>,
    pub entries: Vec<(u32, f64)>,
}

impl SparseRows {
    /// Rows from one list of entries per row.
    pub fn from_rows(rows: impl IntoIterator<Item = Vec<(u32, f64)>>) -> Self {
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
    pub fn len(&self) -> usize {
        self.ptr.len().saturating_sub(1)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn row(&self, r: usize) -> &[(u32, f64)] {
        &self.entries[self.ptr[r]..self.ptr[r + 1]]
    }
}

/// [`project_columns`] for a matrix given by its rows' positive entries (every other entry
/// is ≤ 0 or NaN, which the projection sets to 0): the result, with the zeros it makes
/// dropped, is bit-identical to projecting the dense matrix, in O(non-zeros) — column sums and
/// the values a threshold is taken over are visited in the same (row) order.
pub fn project_sparse_rows(rows: &mut SparseRows, k: usize) {
    let mut sums = vec![0.0f64; k];
    for &(j, v) in &rows.entries {
        sums[j as usize] += v;
    }
    let mut slot = vec![usize::MAX; k];
    let mut vals: Vec<Vec<f64>> = Vec::new();
    for (j, &s) in sums.iter().enumerate() {
        if s > 1.0 {
            slot[j] = vals.len();
            vals.push(Vec::new());
        }
    }
    if vals.is_empty() {
        return;
    }
    for &(j, v) in &rows.entries {
        if let Some(c) = vals.get_mut(slot[j as usize]) {
            c.push(v);
        }
    }
    // each column's threshold from its own values: in parallel, the same thresholds
    let over: Vec<f64> = vals.into_par_iter().map(simplex_threshold).collect();
    let mut theta = vec![0.0f64; k];
    for (j, &c) in slot.iter().enumerate() {
        if c != usize::MAX {
            theta[j] = over[c];
        }
    }
    // apply the thresholds and drop the zeros they make, compacting in place
    let mut w = 0;
    let mut start = 0;
    for r in 0..rows.len() {
        let end = rows.ptr[r + 1];
        for e in start..end {
            let (j, mut v) = rows.entries[e];
            if slot[j as usize] != usize::MAX {
                v = (v - theta[j as usize]).max(0.0);
            }
            if v != 0.0 {
                rows.entries[w] = (j, v);
                w += 1;
            }
        }
        start = end;
        rows.ptr[r + 1] = w;
    }
    rows.entries.truncate(w);
}
