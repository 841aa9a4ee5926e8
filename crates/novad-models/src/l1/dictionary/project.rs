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
