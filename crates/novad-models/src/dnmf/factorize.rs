//! Rank-one block coordinate descent for the temporally regularised NMF of one timestep
//! (paper §5, Algorithm 1):
//!
//! `min ‖X − WH‖²_F + µ Σ_{i emerging} Σ_j c_j max(0, ν − (Q S w_i)_j)²`
//!
//! over W ≥ 0 (N × K) and H (K × D) whose rows lie on the simplex; the first `k_ev` rows
//! (evolving topics) additionally stay in the box `[max(0, h⁻ − δ), min(h⁻ + δ, 1)]` around
//! last timestep's rows h⁻. S sums document weights per window timestep and Q = D₁F is the
//! HP-trend slope operator ([`super::hp::slope_operator`]).
//!
//! Each sweep updates all columns w_i (H fixed), then all rows h_i (W fixed), using the
//! residual products `R h_i = X h_i − Σ_{j≠i} w_j (h_jᵀh_i)` and `Rᵀw_i = Xᵀw_i − Σ_{j≠i}
//! h_j (w_jᵀw_i)` from the sparse products XHᵀ, XᵀW and the Gram matrices, so R is never
//! formed. Evolving w_i have the closed form `max(0, R h_i / ‖h_i‖²)`; emerging w_i (µ > 0)
//! are found by projected gradient with the paper's (Lin 2007) step rule; h_i are projections
//! ([`super::project`]). All arithmetic is f64, sequential, so results do not depend on the
//! thread count.

use super::project::{project_box_simplex, project_simplex};

/// A sparse row-major matrix (documents × terms), f64 values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Csr {
    pub cols: usize,
    /// Row r holds entries `ptr[r]..ptr[r+1]` of `idx`/`val`.
    pub ptr: Vec<usize>,
    pub idx: Vec<u32>,
    pub val: Vec<f64>,
}

impl Csr {
    pub fn rows(&self) -> usize {
        self.ptr.len().saturating_sub(1)
    }
    /// Entries of row r.
    pub fn row(&self, r: usize) -> impl Iterator<Item = (usize, f64)> + '_ {
        let (a, b) = (self.ptr[r], self.ptr[r + 1]);
        self.idx[a..b]
            .iter()
            .zip(&self.val[a..b])
            .map(|(&j, &x)| (j as usize, x))
    }
    /// ‖X‖²_F.
    pub fn sq_norm(&self) -> f64 {
        self.val.iter().map(|x| x * x).sum()
    }
}

/// Settings of one factorisation.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Box half-width δ ≥ 0 around last timestep's evolving rows (δ ≥ 1: no box).
    pub delta: f64,
    /// Emergence weight µ ≥ 0.
    pub mu: f64,
    /// Hinge margin ν on the trend slope.
    pub nu: f64,
    /// Maximum BCD sweeps.
    pub max_iter: u32,
    /// Stop when the objective's relative decrease falls below this.
    pub tol: f64,
    /// Projected-gradient iterations per emerging w_i update.
    pub pg_iter: u32,
}

/// The temporal structure of the rows of X: `step[r]` ∈ 0..T is the window timestep of row r
/// (0 = oldest); `slope` is Q (T−1 rows of length T) and `weights` the hinge weights c_j.
#[derive(Debug, Clone, PartialEq)]
pub struct Temporal {
    pub step: Vec<usize>,
    pub n_steps: usize,
    pub slope: Vec<Vec<f64>>,
    pub weights: Vec<f64>,
}

/// What a factorisation did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FactorStats {
    pub iterations: u32,
    /// Final objective (reconstruction + µ·regulariser).
    pub objective: f64,
    /// Final ‖X − WH‖²_F / ‖X‖²_F (0 when X = 0).
    pub relative_error: f64,
}

/// Run BCD from the given W (n × k, row-major) and H (k × d, row-major). Rows `0..prev.len()`
/// of H are evolving with previous values `prev` (each of length d); the others are
/// emerging. On return W ≥ 0, every H row is on the simplex, evolving rows in their δ-box,
/// and all values are finite provided the inputs were.
pub fn factorize(
    x: &Csr,
    temporal: &Temporal,
    prev: &[Vec<f64>],
    s: &Settings,
    w: &mut [f64],
    h: &mut [f64],
    k: usize,
) -> FactorStats {
    let n = x.rows();
    let d = x.cols;
    assert_eq!(w.len(), n * k);
    assert_eq!(h.len(), k * d);
    assert!(prev.len() <= k);
    let xx = x.sq_norm();
    let mut last = f64::INFINITY;
    let mut st = FactorStats::default();
    let mut lo = vec![0.0; d];
    let mut hi = vec![0.0; d];
    let mut v = vec![0.0; d];
    let mut eta = vec![1.0; k];
    for it in 0..s.max_iter {
        // ---- W sweep (H fixed)
        let xh = x_ht(x, h, k);
        let hh = gram_rows(h, k, d);
        let rec = reconstruction(xx, w, &xh, &hh, n, k);
        let reg = regulariser_total(w, n, k, prev.len(), temporal, s);
        let obj = rec + s.mu * reg;
        st.objective = obj;
        st.relative_error = if xx > 0.0 { (rec / xx).max(0.0) } else { 0.0 };
        st.iterations = it;
        if last.is_finite() && (last - obj) <= s.tol * last.abs().max(1e-300) {
            break;
        }
        last = obj;
        update_w(
            w,
            &xh,
            &hh,
            n,
            k,
            0..n,
            0..k,
            prev.len(),
            temporal,
            s,
            &mut eta,
        );
        // ---- H sweep (W fixed)
        let xw = xt_w(x, w, k);
        let ww = gram_cols(w, n, k);
        for i in 0..k {
            let wii = ww[i * k + i];
            if wii <= 1e-300 {
                continue; // an unused topic keeps its distribution
            }
            for j in 0..d {
                v[j] = xw[j * k + i];
            }
            for l in 0..k {
                let c = ww[l * k + i];
                if l == i || c == 0.0 {
                    continue;
                }
                let hl = &h[l * d..(l + 1) * d];
                for j in 0..d {
                    v[j] -= c * hl[j];
                }
            }
            for vj in v.iter_mut() {
                *vj /= wii;
            }
            let row = &mut h[i * d..(i + 1) * d];
            if i < prev.len() && s.delta < 1.0 {
                box_bounds(&prev[i], s.delta, &mut lo, &mut hi);
                project_box_simplex(&v, &lo, &hi, row);
            } else {
                project_simplex(&v, row);
            }
        }
        st.iterations = it + 1;
    }
    if st.iterations == s.max_iter {
        let xh = x_ht(x, h, k);
        let hh = gram_rows(h, k, d);
        let rec = reconstruction(xx, w, &xh, &hh, n, k);
        st.objective = rec + s.mu * regulariser_total(w, n, k, prev.len(), temporal, s);
        st.relative_error = if xx > 0.0 { (rec / xx).max(0.0) } else { 0.0 };
    }
    st
}

/// The δ-box of an evolving row: `lo = max(0, p − δ)`, `hi = min(p + δ, 1)`.
pub fn box_bounds(p: &[f64], delta: f64, lo: &mut [f64], hi: &mut [f64]) {
    for j in 0..p.len() {
        lo[j] = (p[j] - delta).max(0.0);
        hi[j] = (p[j] + delta).min(1.0);
    }
}

/// Nonnegative least squares for the rows `rows` and columns `cols` of W with H fixed
/// (`sweeps` HALS sweeps; the regulariser is not applied): the paper's W21 initialisation
/// ("existing topics first reconstruct the new documents").
pub fn nnls_rows(
    x: &Csr,
    h: &[f64],
    w: &mut [f64],
    k: usize,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
    sweeps: u32,
) {
    let d = x.cols;
    let xh = x_ht(x, h, k);
    let hh = gram_rows(h, k, d);
    let s = Settings {
        delta: 1.0,
        mu: 0.0,
        nu: 0.0,
        max_iter: 0,
        tol: 0.0,
        pg_iter: 0,
    };
    let t = Temporal {
        step: vec![],
        n_steps: 0,
        slope: vec![],
        weights: vec![],
    };
    let mut eta = vec![1.0; k];
    for _ in 0..sweeps {
        update_w(
            w,
            &xh,
            &hh,
            x.rows(),
            k,
            rows.clone(),
            cols.clone(),
            k,
            &t,
            &s,
            &mut eta,
        );
    }
}

/// X Hᵀ (n × k).
pub fn x_ht(x: &Csr, h: &[f64], k: usize) -> Vec<f64> {
    let d = x.cols;
    let mut ht = vec![0.0; d * k];
    for i in 0..k {
        for j in 0..d {
            ht[j * k + i] = h[i * d + j];
        }
    }
    let n = x.rows();
    let mut out = vec![0.0; n * k];
    for r in 0..n {
        let o = &mut out[r * k..(r + 1) * k];
        for (j, xv) in x.row(r) {
            let hr = &ht[j * k..(j + 1) * k];
            for i in 0..k {
                o[i] += xv * hr[i];
            }
        }
    }
    out
}

/// Xᵀ W (d × k).
pub fn xt_w(x: &Csr, w: &[f64], k: usize) -> Vec<f64> {
    let mut out = vec![0.0; x.cols * k];
    for r in 0..x.rows() {
        let wr = &w[r * k..(r + 1) * k];
        for (j, xv) in x.row(r) {
            let o = &mut out[j * k..(j + 1) * k];
            for i in 0..k {
                o[i] += xv * wr[i];
            }
        }
    }
    out
}

/// H Hᵀ (k × k) of a row-major k × d matrix.
pub fn gram_rows(h: &[f64], k: usize, d: usize) -> Vec<f64> {
    let mut g = vec![0.0; k * k];
    for a in 0..k {
        let ha = &h[a * d..(a + 1) * d];
        for b in a..k {
            let hb = &h[b * d..(b + 1) * d];
            let s: f64 = ha.iter().zip(hb).map(|(p, q)| p * q).sum();
            g[a * k + b] = s;
            g[b * k + a] = s;
        }
    }
    g
}

/// Wᵀ W (k × k) of a row-major n × k matrix.
pub fn gram_cols(w: &[f64], n: usize, k: usize) -> Vec<f64> {
    let mut g = vec![0.0; k * k];
    for r in 0..n {
        let wr = &w[r * k..(r + 1) * k];
        for a in 0..k {
            if wr[a] == 0.0 {
                continue;
            }
            for b in 0..k {
                g[a * k + b] += wr[a] * wr[b];
            }
        }
    }
    g
}

/// ‖X − WH‖² = ‖X‖² − 2⟨W, XHᵀ⟩ + ⟨WᵀW, HHᵀ⟩.
fn reconstruction(xx: f64, w: &[f64], xh: &[f64], hh: &[f64], n: usize, k: usize) -> f64 {
    let cross: f64 = w.iter().zip(xh).map(|(a, b)| a * b).sum();
    let ww = gram_cols(w, n, k);
    let quad: f64 = ww.iter().zip(hh).map(|(a, b)| a * b).sum();
    (xx - 2.0 * cross + quad).max(0.0)
}

/// Per-timestep sums y_t = (S w)_t of column i.
fn step_sums(w: &[f64], k: usize, i: usize, t: &Temporal) -> Vec<f64> {
    let mut y = vec![0.0; t.n_steps];
    for (r, &st) in t.step.iter().enumerate() {
        y[st] += w[r * k + i];
    }
    y
}

/// L(Sw) = Σ_j c_j max(0, ν − (Q y)_j)² for per-step sums y.
pub fn hinge_loss(y: &[f64], t: &Temporal, nu: f64) -> f64 {
    t.slope
        .iter()
        .zip(&t.weights)
        .map(|(q, &c)| {
            let z: f64 = q.iter().zip(y).map(|(a, b)| a * b).sum();
            c * (nu - z).max(0.0).powi(2)
        })
        .sum()
}

fn regulariser_total(
    w: &[f64],
    n: usize,
    k: usize,
    k_ev: usize,
    t: &Temporal,
    s: &Settings,
) -> f64 {
    if s.mu == 0.0 || t.n_steps < 2 || t.step.len() != n {
        return 0.0;
    }
    (k_ev..k)
        .map(|i| hinge_loss(&step_sums(w, k, i, t), t, s.nu))
        .sum()
}

#[allow(clippy::too_many_arguments)]
fn update_w(
    w: &mut [f64],
    xh: &[f64],
    hh: &[f64],
    n: usize,
    k: usize,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
    k_ev: usize,
    t: &Temporal,
    s: &Settings,
    eta: &mut [f64],
) {
    let mut w0 = vec![0.0; n];
    for i in cols {
        let hii = hh[i * k + i];
        if hii <= 1e-300 {
            continue;
        }
        for r in rows.clone() {
            let wr = &w[r * k..(r + 1) * k];
            let mut v = xh[r * k + i];
            for j in 0..k {
                if j != i {
                    v -= wr[j] * hh[j * k + i];
                }
            }
            w0[r] = v / hii;
        }
        let emerging = i >= k_ev && s.mu > 0.0 && t.n_steps >= 2 && t.step.len() == n;
        if emerging {
            let mut col: Vec<f64> = (0..n).map(|r| w[r * k + i]).collect();
            eta[i] = emerging_w(&mut col, &w0, s.mu / hii, s.nu, t, s.pg_iter, eta[i]);
            for r in rows.clone() {
                w[r * k + i] = col[r];
            }
        } else {
            for r in rows.clone() {
                w[r * k + i] = w0[r].max(0.0);
            }
        }
    }
}

/// J(w) = ‖w − w0‖² + κ L(Sw).
fn j_value(w: &[f64], w0: &[f64], kappa: f64, nu: f64, t: &Temporal) -> f64 {
    let q: f64 = w.iter().zip(w0).map(|(a, b)| (a - b) * (a - b)).sum();
    let mut y = vec![0.0; t.n_steps];
    for (r, &st) in t.step.iter().enumerate() {
        y[st] += w[r];
    }
    q + kappa * hinge_loss(&y, t, nu)
}

/// Projected gradient for `min_{w ≥ 0} ‖w − w0‖² + κ Σ_j c_j max(0, ν − ⟨q_j, w⟩)²` (paper eq.
/// 12) with the step rule of Lin (2007) as the paper uses it: η hot-started from the previous
/// call, accepted when `J(w⁺) − J(w) ≤ σ⟨∇J, w⁺ − w⟩`, increased by 1/β while accepted,
/// decreased by β until accepted (β = 0.1 as in Lin 2007 — the paper prints 0.05 — and σ =
/// 0.01). Starts from
/// `max(0, w)`; returns the last step size.
pub fn emerging_w(
    w: &mut [f64],
    w0: &[f64],
    kappa: f64,
    nu: f64,
    t: &Temporal,
    iters: u32,
    eta0: f64,
) -> f64 {
    const BETA: f64 = 0.1;
    const SIGMA: f64 = 0.01;
    let n = w.len();
    for x in w.iter_mut() {
        *x = x.max(0.0);
    }
    let mut eta = eta0.clamp(1e-12, 1.0);
    let mut cand = vec![0.0; n];
    let mut grad = vec![0.0; n];
    let mut jw = j_value(w, w0, kappa, nu, t);
    for _ in 0..iters {
        // gradient: 2(w − w0) − 2κ Σ_j c_j max(0, ν − z_j) Q[j][step(r)]
        let mut y = vec![0.0; t.n_steps];
        for (r, &st) in t.step.iter().enumerate() {
            y[st] += w[r];
        }
        let mut per_step = vec![0.0; t.n_steps];
        for (q, &c) in t.slope.iter().zip(&t.weights) {
            let z: f64 = q.iter().zip(&y).map(|(a, b)| a * b).sum();
            let m = (nu - z).max(0.0);
            if m > 0.0 {
                for (ps, &qt) in per_step.iter_mut().zip(q) {
                    *ps -= 2.0 * kappa * c * m * qt;
                }
            }
        }
        for r in 0..n {
            grad[r] = 2.0 * (w[r] - w0[r]) + per_step[t.step[r]];
        }
        let try_step = |eta: f64, cand: &mut [f64]| -> (f64, bool) {
            let mut dir_dot = 0.0;
            for r in 0..n {
                cand[r] = (w[r] - eta * grad[r]).max(0.0);
                dir_dot += grad[r] * (cand[r] - w[r]);
            }
            let jc = j_value(cand, w0, kappa, nu, t);
            (jc, jc - jw <= SIGMA * dir_dot)
        };
        let (mut jc, ok) = try_step(eta, &mut cand);
        if ok {
            // grow while accepted (and the step changes something)
            for _ in 0..20 {
                if eta >= 1.0 {
                    break;
                }
                let e2 = (eta / BETA).min(1.0);
                let mut c2 = vec![0.0; n];
                let (j2, ok2) = try_step(e2, &mut c2);
                if !ok2 || j2 > jc {
                    break;
                }
                eta = e2;
                jc = j2;
                cand = c2;
            }
        } else {
            let mut accepted = false;
            for _ in 0..40 {
                eta *= BETA;
                let (j2, ok2) = try_step(eta, &mut cand);
                jc = j2;
                if ok2 {
                    accepted = true;
                    break;
                }
            }
            if !accepted {
                break;
            }
        }
        let change: f64 = cand.iter().zip(w.iter()).map(|(a, b)| (a - b).abs()).sum();
        w.copy_from_slice(&cand);
        jw = jc;
        let scale: f64 = w.iter().sum::<f64>().max(1e-12);
        if change <= 1e-9 * scale {
            break;
        }
    }
    eta
}

/// Relative residual `‖x_r − Σ_{i ∈ cols} w_ri h_i‖² / ‖x_r‖²` of each row in `rows` (1 for a
/// zero row), clamped to [0, 1].
pub fn row_residuals(
    x: &Csr,
    h: &[f64],
    w: &[f64],
    k: usize,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
) -> Vec<f64> {
    let d = x.cols;
    let hh = gram_rows(h, k, d);
    rows.map(|r| {
        let xx: f64 = x.row(r).map(|(_, v)| v * v).sum();
        if xx <= 0.0 {
            return 1.0;
        }
        let wr = &w[r * k..(r + 1) * k];
        let mut cross = 0.0;
        for (j, xv) in x.row(r) {
            for i in cols.clone() {
                cross += xv * wr[i] * h[i * d + j];
            }
        }
        let mut quad = 0.0;
        for a in cols.clone() {
            for b in cols.clone() {
                quad += wr[a] * wr[b] * hh[a * k + b];
            }
        }
        ((xx - 2.0 * cross + quad) / xx).clamp(0.0, 1.0)
    })
    .collect()
}
