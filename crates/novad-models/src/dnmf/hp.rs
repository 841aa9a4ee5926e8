//! Hodrick–Prescott trend filtering (paper §4.1) and the trend-slope operator of the
//! emergence regulariser (§4.2).
//!
//! The HP trend of a series `y` (length T) is `x = argmin ½‖y − x‖² + λ Σ_t (x_{t+1} − 2x_t +
//! x_{t−1})² = (I + 2λ D₂ᵀD₂)⁻¹ y`, where D₂ is the (T−2) × T second-difference matrix. The
//! system matrix is symmetric positive definite and pentadiagonal; it is solved here by a
//! banded Cholesky factorisation in O(T). All arithmetic is f64.

/// The HP trend of `y` with smoothing `lambda ≥ 0`. Series shorter than 3 points have no
/// second difference and are returned unchanged.
pub fn hp_trend(y: &[f64], lambda: f64) -> Vec<f64> {
    let t = y.len();
    if t < 3 || lambda == 0.0 {
        return y.to_vec();
    }
    // A = I + 2λ D₂ᵀD₂, stored as three diagonals (main, first and second super-diagonal).
    let mut a0 = vec![1.0; t];
    let mut a1 = vec![0.0; t];
    let mut a2 = vec![0.0; t];
    let s = 2.0 * lambda;
    for r in 0..t - 2 {
        // row r of D₂ has (1, −2, 1) at columns r, r+1, r+2
        let c = [1.0, -2.0, 1.0];
        for i in 0..3 {
            a0[r + i] += s * c[i] * c[i];
            if i + 1 < 3 {
                a1[r + i] += s * c[i] * c[i + 1];
            }
            if i + 2 < 3 {
                a2[r + i] += s * c[i] * c[i + 2];
            }
        }
    }
    // Banded Cholesky A = LLᵀ, L lower with bandwidth 2: l0 (diag), l1 (sub 1), l2 (sub 2).
    let mut l0 = vec![0.0; t];
    let mut l1 = vec![0.0; t];
    let mut l2 = vec![0.0; t];
    for i in 0..t {
        if i >= 2 {
            l2[i] = a2[i - 2] / l0[i - 2];
        }
        if i >= 1 {
            let mut v = a1[i - 1];
            if i >= 2 {
                v -= l2[i] * l1[i - 1];
            }
            l1[i] = v / l0[i - 1];
        }
        let d = a0[i] - l1[i] * l1[i] - l2[i] * l2[i];
        l0[i] = d.sqrt();
    }
    // forward: L z = y
    let mut z = vec![0.0; t];
    for i in 0..t {
        let mut v = y[i];
        if i >= 1 {
            v -= l1[i] * z[i - 1];
        }
        if i >= 2 {
            v -= l2[i] * z[i - 2];
        }
        z[i] = v / l0[i];
    }
    // backward: Lᵀ x = z
    let mut x = vec![0.0; t];
    for i in (0..t).rev() {
        let mut v = z[i];
        if i + 1 < t {
            v -= l1[i + 1] * x[i + 1];
        }
        if i + 2 < t {
            v -= l2[i + 2] * x[i + 2];
        }
        x[i] = v / l0[i];
    }
    x
}

/// The (T−1) × T matrix `Q = D₁ F`: row j gives the slope `x_{j+1} − x_j` of the HP trend
/// `x = F y` as a linear function of `y` (D₁ is the forward difference). Rows are returned
/// as dense vectors; T ≤ 1 gives no rows.
pub fn slope_operator(t: usize, lambda: f64) -> Vec<Vec<f64>> {
    if t < 2 {
        return Vec::new();
    }
    // F is symmetric, so its columns (F e_k) are its rows.
    let f: Vec<Vec<f64>> = (0..t)
        .map(|k| {
            let mut e = vec![0.0; t];
            e[k] = 1.0;
            hp_trend(&e, lambda)
        })
        .collect();
    (0..t - 1)
        .map(|j| (0..t).map(|k| f[k][j + 1] - f[k][j]).collect())
        .collect()
}

/// Weights c_j of the hinge terms (j = 0 … T−2, slope between timesteps j and j+1): the paper
/// reports that weights increasing with j work best; here `c_j = (j + 1) / (T − 1)`, so the
/// newest slope has weight 1.
pub fn hinge_weights(t: usize) -> Vec<f64> {
    if t < 2 {
        return Vec::new();
    }
    (0..t - 1)
        .map(|j| (j + 1) as f64 / (t - 1) as f64)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_straight_line_is_its_own_trend() {
        let y: Vec<f64> = (0..7).map(|i| 2.0 + 0.5 * i as f64).collect();
        let x = hp_trend(&y, 10.0);
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() < 1e-10, "{x:?}");
        }
    }

    #[test]
    fn slope_of_a_line_is_its_gradient() {
        let q = slope_operator(4, 10.0);
        let y = [1.0, 3.0, 5.0, 7.0];
        for row in &q {
            let s: f64 = row.iter().zip(&y).map(|(a, b)| a * b).sum();
            assert!((s - 2.0).abs() < 1e-10);
        }
    }
}
