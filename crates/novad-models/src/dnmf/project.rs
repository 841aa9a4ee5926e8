//! Euclidean projection onto the probability simplex intersected with a box,
//! `C = {h : Σ h_j = 1, l_j ≤ h_j ≤ u_j}` (the evolving-topic constraint set of the paper,
//! eqs. (3)–(4)); the plain simplex is the case `l = 0, u = 1`.
//!
//! The projection is `h_j = clamp(v_j − τ, l_j, u_j)` for the unique-up-to-flat-segments τ with
//! `g(τ) = Σ_j clamp(v_j − τ, l_j, u_j) = 1` (KKT conditions of the QP). `g` is continuous,
//! piecewise linear and non-increasing with breakpoints `v_j − u_j` and `v_j − l_j`; τ is found
//! by a randomised-pivot search over the breakpoints in the style of Pardalos & Kovoor (1990):
//! each round evaluates `g` at the median breakpoint of the current bracket (only over the
//! coordinates whose state is still undetermined; the others are kept in running sums) and
//! halves the bracket's breakpoints, so the expected work is O(D). Deterministic (the pivot is
//! the median, found with `select_nth_unstable_by`).

/// Project `v` onto `{h : Σh = 1, l ≤ h ≤ u}` and write the result to `out`.
///
/// Requirements: equal lengths, finite values, `l ≤ u` coordinatewise. When the set is empty
/// the nearest bound vector is returned instead: `l` when `Σl ≥ 1`, `u` when `Σu ≤ 1` (this
/// happens only through rounding, e.g. δ = 0 with an f32-rounded previous topic). The result
/// always satisfies `l ≤ out ≤ u` exactly; its sum is 1 up to rounding when the set is
/// non-empty.
pub fn project_box_simplex(v: &[f64], l: &[f64], u: &[f64], out: &mut [f64]) {
    let d = v.len();
    assert!(
        l.len() == d && u.len() == d && out.len() == d,
        "length mismatch"
    );
    let sl: f64 = l.iter().sum();
    let su: f64 = u.iter().sum();
    if sl >= 1.0 {
        out.copy_from_slice(l);
        return;
    }
    if su <= 1.0 {
        out.copy_from_slice(u);
        return;
    }
    let tau = find_tau(v, l, u);
    for j in 0..d {
        out[j] = (v[j] - tau).clamp(l[j], u[j]);
    }
}

/// Project `v` onto the probability simplex `{h ≥ 0, Σh = 1}`.
pub fn project_simplex(v: &[f64], out: &mut [f64]) {
    let zeros = vec![0.0; v.len()];
    let ones = vec![1.0; v.len()];
    project_box_simplex(v, &zeros, &ones, out);
}

/// τ with g(τ) = 1, assuming Σl < 1 < Σu.
fn find_tau(v: &[f64], l: &[f64], u: &[f64]) -> f64 {
    let mut lo = f64::NEG_INFINITY;
    let mut hi = f64::INFINITY;
    // Coordinates whose state is fixed on (lo, hi): constant part and free part Σv − nf·τ.
    let mut constant = 0.0;
    let mut free_v = 0.0;
    let mut free_n = 0usize;
    let mut active: Vec<usize> = (0..v.len()).collect();
    let mut points: Vec<f64> = Vec::with_capacity(2 * v.len());
    loop {
        points.clear();
        for &j in &active {
            let (a, b) = (v[j] - u[j], v[j] - l[j]);
            if a > lo && a < hi {
                points.push(a);
            }
            if b > lo && b < hi {
                points.push(b);
            }
        }
        if points.is_empty() {
            break;
        }
        let mid = points.len() / 2;
        let (_, &mut p, _) = points.select_nth_unstable_by(mid, |x, y| x.total_cmp(y));
        let g = constant + free_v - free_n as f64 * p
            + active
                .iter()
                .map(|&j| (v[j] - p).clamp(l[j], u[j]))
                .sum::<f64>();
        if g > 1.0 {
            lo = p;
        } else if g < 1.0 {
            hi = p;
        } else {
            return p;
        }
        active.retain(|&j| {
            let (a, b) = (v[j] - u[j], v[j] - l[j]);
            if hi <= a {
                constant += u[j];
                false
            } else if b <= lo {
                constant += l[j];
                false
            } else if a <= lo && hi <= b {
                free_v += v[j];
                free_n += 1;
                false
            } else {
                true
            }
        });
    }
    // Every remaining coordinate is classified on (lo, hi): g(τ) = constant + free_v − nf·τ.
    for &j in &active {
        let (a, b) = (v[j] - u[j], v[j] - l[j]);
        if hi <= a {
            constant += u[j];
        } else if b <= lo {
            constant += l[j];
        } else {
            free_v += v[j];
            free_n += 1;
        }
    }
    if free_n > 0 {
        let t = (constant + free_v - 1.0) / free_n as f64;
        // rounding can push t a hair outside the bracket
        t.clamp(lo, hi)
    } else if lo.is_finite() {
        lo
    } else {
        hi
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simplex_of_a_point_inside_is_itself() {
        let v = [0.2, 0.3, 0.5];
        let mut o = [0.0; 3];
        project_simplex(&v, &mut o);
        for (a, b) in v.iter().zip(&o) {
            assert!((a - b).abs() < 1e-12);
        }
    }

    #[test]
    fn shift_is_uniform_on_the_free_coordinates() {
        let v = [1.0, 1.0, -5.0];
        let mut o = [0.0; 3];
        project_simplex(&v, &mut o);
        assert!((o[0] - 0.5).abs() < 1e-12 && (o[1] - 0.5).abs() < 1e-12 && o[2] == 0.0);
    }

    #[test]
    fn infeasible_box_returns_the_nearest_bound() {
        let v = [0.0, 0.0];
        let mut o = [0.0; 2];
        project_box_simplex(&v, &[0.6, 0.6], &[0.7, 0.7], &mut o);
        assert_eq!(o, [0.6, 0.6]);
        project_box_simplex(&v, &[0.1, 0.1], &[0.4, 0.4], &mut o);
        assert_eq!(o, [0.4, 0.4]);
    }
}
