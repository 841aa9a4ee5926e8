//! Small dense/sparse kernels shared by coding and dictionary learning.
//!
//! Conventions: a "column-major" matrix is a `&[f64]` of `rows * cols` values where column `j`
//! occupies `[j * rows, (j + 1) * rows)`. Code matrices are `sprs` CSC matrices (k × n, one
//! column per document).

use sprs::CsMat;

/// Cut `entries` (distinct ids) to their `max` heaviest, heaviest first, ties to the lower id:
/// what a full sort by (weight descending, id ascending) keeps, with only those sorted (a
/// selection first). All of them, sorted alike, when there are no more.
pub fn heaviest_first<I: Ord + Copy>(entries: &mut Vec<(I, f64)>, max: usize) {
    let order = |a: &(I, f64), b: &(I, f64)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if max < entries.len() {
        entries.select_nth_unstable_by(max, order);
        entries.truncate(max);
    }
    entries.sort_unstable_by(order);
}

/// soft(r, t) = sign(r) · max(|r| − t, 0), the proximal map of t·|·|.
#[inline]
pub fn soft(r: f64, t: f64) -> f64 {
    if r > t {
        r - t
    } else if r < -t {
        r + t
    } else {
        0.0
    }
}

/// Proximal map of the asymmetric ℓ1 loss `L_w(r) = max(r, 0) + w · max(−r, 0)` scaled by `1/φ`:
/// argmin_e L_w(e) + (φ/2)(e − v)². With `w = 1` this is `soft(v, 1/φ)`.
///
/// Branch-free (the sign of the ADMM's residuals flips unpredictably, and this runs once per
/// row and iteration): `max(v − 1/φ, 0) + min(v + w/φ, 0)` is the three-case formula value for
/// value, since a difference of floats is > 0 exactly when the exact difference is.
#[inline]
pub fn prox_asym(v: f64, inv_phi: f64, w: f64) -> f64 {
    (v - inv_phi).max(0.0) + (v + w * inv_phi).min(0.0)
}

/// The asymmetric ℓ1 loss `L_w(r)`: residual mass the model fails to explain (r > 0) counts 1,
/// mass it predicts but the document lacks (r < 0) counts `w`.
/// Branch-free: `max(r, −w r)` (w ∈ (0, 1]), the same value (up to the sign of a zero).
#[inline]
pub fn loss_asym(r: f64, w: f64) -> f64 {
    r.max(-w * r)
}

/// A sparse matrix stored by columns (CSC), `f64`: the reduced coding problem's A_{S,K}.
/// Atoms are often far sparser than a document's support (k-means atoms have a handful of
/// terms), so products cost O(nnz) instead of O(|S|·|K|).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SparseCols {
    pub rows: usize,
    /// Column j occupies `idx[ptr[j]..ptr[j+1]]` / `val[..]`.
    pub ptr: Vec<usize>,
    pub idx: Vec<u32>,
    pub val: Vec<f64>,
}

impl SparseCols {
    pub fn new(rows: usize) -> Self {
        SparseCols {
            rows,
            ptr: vec![0],
            idx: Vec::new(),
            val: Vec::new(),
        }
    }
    /// Append a column given as (row, value) pairs; zeros are dropped.
    pub fn push_col(&mut self, entries: impl IntoIterator<Item = (u32, f64)>) {
        for (r, v) in entries {
            if v != 0.0 {
                self.idx.push(r);
                self.val.push(v);
            }
        }
        self.ptr.push(self.idx.len());
    }
    /// From a dense column-major `rows × cols` matrix.
    pub fn from_colmajor(a: &[f64], rows: usize, cols: usize) -> Self {
        let mut s = SparseCols::new(rows);
        for j in 0..cols {
            s.push_col((0..rows).map(|i| (i as u32, a[j * rows + i])));
        }
        s
    }
    pub fn cols(&self) -> usize {
        self.ptr.len() - 1
    }
    #[inline]
    pub fn col(&self, j: usize) -> (&[u32], &[f64]) {
        let (a, b) = (self.ptr[j], self.ptr[j + 1]);
        (&self.idx[a..b], &self.val[a..b])
    }
    /// out = A x (out has `rows` entries; overwritten).
    #[inline]
    pub fn mul(&self, x: &[f64], out: &mut [f64]) {
        out.iter_mut().for_each(|v| *v = 0.0);
        for (j, &xj) in x.iter().enumerate() {
            if xj != 0.0 {
                let (ri, rv) = self.col(j);
                for (&r, &v) in ri.iter().zip(rv) {
                    out[r as usize] += v * xj;
                }
            }
        }
    }
    /// (Aᵀ u)_j.
    #[inline]
    pub fn tmul_col(&self, j: usize, u: &[f64]) -> f64 {
        let (ri, rv) = self.col(j);
        ri.iter().zip(rv).map(|(&r, &v)| v * u[r as usize]).sum()
    }
    /// Ψmax (largest eigenvalue of AᵀA) with the guarantees of [`psi_max_colmajor`].
    pub fn psi_max(&self) -> f64 {
        let frob: f64 = self.val.iter().map(|v| v * v).sum();
        let mut av = vec![0.0; self.rows];
        power_iteration(self.cols(), frob, |v, out| {
            self.mul(v, &mut av);
            for (j, o) in out.iter_mut().enumerate() {
                *o = self.tmul_col(j, &av);
            }
            av.iter().map(|x| x * x).sum()
        })
    }
}

const POWER_ITERS: usize = 200;
const POWER_TOL: f64 = 1e-7;

/// Power iteration for Ψmax(Z) = largest eigenvalue of ZᵀZ, for a Z with `cols` columns and
/// squared Frobenius norm `frob`. `step(v, out)` must write ZᵀZ v into `out` and return ‖Z v‖².
/// Starts from the all-ones vector (the Perron vector of a non-negative Z is non-negative, so
/// it converges from below); the estimate is returned inflated by 1 % and capped by ‖Z‖_F² (a
/// true upper bound), so a step 1/Ψmax computed from it is safe. 0 for a zero matrix.
fn power_iteration(cols: usize, frob: f64, mut step: impl FnMut(&[f64], &mut [f64]) -> f64) -> f64 {
    if frob == 0.0 || cols == 0 {
        return 0.0;
    }
    let mut v = vec![1.0 / (cols as f64).sqrt(); cols];
    let mut w = vec![0.0; cols];
    let mut est = 0.0;
    for _ in 0..POWER_ITERS {
        let new_est = step(&v, &mut w);
        let norm = w.iter().map(|x| x * x).sum::<f64>().sqrt();
        if norm == 0.0 {
            break;
        }
        for (vi, wi) in v.iter_mut().zip(&w) {
            *vi = wi / norm;
        }
        let done = (new_est - est).abs() <= POWER_TOL * new_est;
        est = new_est;
        if done {
            break;
        }
    }
    (est * 1.01).min(frob)
}

/// Ψmax of a column-major `rows × cols` matrix Z (largest eigenvalue of ZᵀZ = ‖Z‖₂²), with
/// the guarantees of [`power_iteration`].
pub fn psi_max_colmajor(z: &[f64], rows: usize, cols: usize) -> f64 {
    if rows == 0 {
        return 0.0;
    }
    let frob: f64 = z.iter().map(|v| v * v).sum();
    let mut zv = vec![0.0; rows];
    power_iteration(cols, frob, |v, out| {
        zv.iter_mut().for_each(|x| *x = 0.0);
        for (j, &vj) in v.iter().enumerate() {
            for (o, &a) in zv.iter_mut().zip(&z[j * rows..(j + 1) * rows]) {
                *o += a * vj;
            }
        }
        for (j, o) in out.iter_mut().enumerate() {
            *o = z[j * rows..(j + 1) * rows]
                .iter()
                .zip(&zv)
                .map(|(a, b)| a * b)
                .sum();
        }
        zv.iter().map(|x| x * x).sum()
    })
}

/// Ψmax of an `m × k` f32 matrix A (largest eigenvalue of AᵀA) given by its rows' stored
/// entries (atom, value), atoms ascending (zeros may be among them). Works on the non-zero
/// entries only, so its cost is O(nnz(A)) per power iteration (a dictionary over a large
/// vocabulary is mostly zero rows). Guarantees of [`power_iteration`].
pub fn psi_max_rows<'r>(k: usize, rows: impl Iterator<Item = &'r [(u32, f32)]>) -> f64 {
    // CSR copy of the non-zeros
    let mut ptr = vec![0usize];
    let mut idx: Vec<u32> = Vec::new();
    let mut val: Vec<f64> = Vec::new();
    for row in rows {
        for &(j, v) in row {
            if v != 0.0 {
                idx.push(j);
                val.push(v as f64);
            }
        }
        if idx.len() > *ptr.last().unwrap() {
            ptr.push(idx.len());
        }
    }
    let frob: f64 = val.iter().map(|v| v * v).sum();
    power_iteration(k, frob, |v, out| {
        out.iter_mut().for_each(|x| *x = 0.0);
        let mut est = 0.0;
        for r in ptr.windows(2) {
            let (ri, rv) = (&idx[r[0]..r[1]], &val[r[0]..r[1]]);
            let av: f64 = ri.iter().zip(rv).map(|(&j, &x)| x * v[j as usize]).sum();
            est += av * av;
            for (&j, &x) in ri.iter().zip(rv) {
                out[j as usize] += x * av;
            }
        }
        est
    })
}

/// Ψmax(Xᵀ) for a k × n CSC code matrix X: the largest eigenvalue of X Xᵀ (k × k Gram).
/// Guarantees of [`power_iteration`].
pub fn psi_max_codes(x: &CsMat<f64>) -> f64 {
    let frob: f64 = x.data().iter().map(|v| v * v).sum();
    power_iteration(x.rows(), frob, |v, out| {
        out.iter_mut().for_each(|o| *o = 0.0);
        let mut est = 0.0;
        for col in x.outer_iterator() {
            let t: f64 = col.iter().map(|(i, &val)| val * v[i]).sum();
            est += t * t;
            if t != 0.0 {
                for (i, &val) in col.iter() {
                    out[i] += val * t;
                }
            }
        }
        est
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soft_and_prox() {
        assert_eq!(soft(3.0, 1.0), 2.0);
        assert_eq!(soft(-3.0, 1.0), -2.0);
        assert_eq!(soft(0.5, 1.0), 0.0);
        assert_eq!(prox_asym(-0.3, 0.2, 1.0), soft(-0.3, 0.2));
        // with w = 0.5 the negative side shrinks by w/φ only
        assert!((prox_asym(-0.3, 0.2, 0.5) - (-0.2)).abs() < 1e-12);
        assert_eq!(prox_asym(-0.05, 0.2, 0.5), 0.0);
    }

    #[test]
    fn prox_minimises_its_objective() {
        for &(v, phi, w) in &[
            (0.7, 5.0, 1.0),
            (-0.7, 5.0, 0.05),
            (0.1, 5.0, 0.3),
            (-2.0, 1.0, 2.0),
        ] {
            let e = prox_asym(v, 1.0 / phi, w);
            let f = |e: f64| loss_asym(e, w) + phi / 2.0 * (e - v) * (e - v);
            for d in [-1e-3, 1e-3, -0.1, 0.1] {
                assert!(f(e) <= f(e + d) + 1e-12, "v={v} w={w}");
            }
        }
    }

    #[test]
    fn psi_max_matches_a_known_spectrum() {
        // Z = diag(3, 1) padded: ZᵀZ eigenvalues 9, 1.
        let z = vec![3.0, 0.0, 0.0, 0.0, 1.0, 0.0];
        let p = psi_max_colmajor(&z, 3, 2);
        assert!((9.0..=9.0 * 1.0101).contains(&p), "{p}");
        assert_eq!(psi_max_colmajor(&[0.0; 4], 2, 2), 0.0);
        // rank one: Z = u vᵀ with ‖u‖=√2, ‖v‖=√2 → Ψmax = 4, capped by ‖Z‖_F² = 4.
        let z = vec![1.0, 1.0, 1.0, 1.0];
        assert!((psi_max_colmajor(&z, 2, 2) - 4.0).abs() < 1e-9);
    }
}

#[cfg(test)]
mod sparse_tests {
    use super::*;

    #[test]
    fn sparse_columns_agree_with_dense_products() {
        let a = vec![0.5, 0.0, 0.25, 0.0, 0.0, 0.75, 0.1, 0.2, 0.0];
        let s = SparseCols::from_colmajor(&a, 3, 3);
        assert_eq!(s.val.len(), 5, "zeros dropped");
        let x = [1.0, 2.0, 3.0];
        let mut ax = vec![0.0; 3];
        s.mul(&x, &mut ax);
        for i in 0..3 {
            let want: f64 = (0..3).map(|j| a[j * 3 + i] * x[j]).sum();
            assert!((ax[i] - want).abs() < 1e-12);
        }
        let u = [1.0, -1.0, 2.0];
        for j in 0..3 {
            let want: f64 = (0..3).map(|i| a[j * 3 + i] * u[i]).sum();
            assert!((s.tmul_col(j, &u) - want).abs() < 1e-12);
        }
        let (d, sp) = (psi_max_colmajor(&a, 3, 3), s.psi_max());
        assert!((d - sp).abs() <= 1e-9 * d, "{d} vs {sp}");
    }
}
