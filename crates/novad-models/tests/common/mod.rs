//! Shared helpers for the integration tests: seeded random instances and an exact LP oracle;
//! `ostc`: the planted corpora, parameters and state map of the OSTC tests.
#![allow(dead_code)]

pub mod ostc;

use ndarray::Array2;
use novad_models::text::SparseDoc;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// A random m × k dictionary in 𝒜: sparse non-negative columns with ℓ1 norm in (0.5, 1].
pub fn random_dict(r: &mut ChaCha8Rng, m: usize, k: usize, density: f64) -> Array2<f32> {
    let mut a = Array2::<f32>::zeros((m, k));
    for j in 0..k {
        let mut s = 0.0;
        for i in 0..m {
            if r.random::<f64>() < density {
                let v = r.random::<f32>();
                a[[i, j]] = v;
                s += v;
            }
        }
        if s == 0.0 {
            let i = r.random_range(0..m);
            a[[i, j]] = 1.0;
            s = 1.0;
        }
        let target = 0.5 + 0.5 * r.random::<f32>();
        for i in 0..m {
            a[[i, j]] *= target / s;
        }
    }
    a
}

/// A random non-negative unit-ℓ1 sparse document over m terms with about `nnz` entries.
pub fn random_doc(r: &mut ChaCha8Rng, m: usize, nnz: usize) -> SparseDoc {
    let mut ids: Vec<u32> = (0..nnz).map(|_| r.random_range(0..m as u32)).collect();
    ids.sort_unstable();
    ids.dedup();
    let vals: Vec<f64> = ids.iter().map(|_| 0.05 + r.random::<f64>()).collect();
    let s: f64 = vals.iter().sum();
    SparseDoc {
        ids,
        vals: vals.into_iter().map(|v| v / s).collect(),
    }
}

/// A document that mixes atoms of `a` (so the dictionary can explain it) plus some noise mass.
pub fn doc_from_atoms(
    r: &mut ChaCha8Rng,
    a: &Array2<f32>,
    atoms: &[usize],
    noise: f64,
) -> SparseDoc {
    let m = a.nrows();
    let mut dense = vec![0.0f64; m];
    for &j in atoms {
        let w = 0.5 + r.random::<f64>();
        for i in 0..m {
            dense[i] += w * a[[i, j]] as f64;
        }
    }
    for _ in 0..3 {
        let i = r.random_range(0..m);
        dense[i] += noise * r.random::<f64>();
    }
    let s: f64 = dense.iter().sum();
    let mut ids = Vec::new();
    let mut vals = Vec::new();
    for (i, &v) in dense.iter().enumerate() {
        if v > 0.0 {
            ids.push(i as u32);
            vals.push(v / s);
        }
    }
    SparseDoc { ids, vals }
}

/// The exact optimum of min_{x≥0} Σ_i L_w(p_i − (Ax)_i) + λ Σ x_j as an LP:
/// variables x ≥ 0 (cost λ), u ≥ 0 (cost 1), v ≥ 0 (cost w); Ax + u − v = p.
pub fn lp_optimum(a: &Array2<f32>, p: &[f64], lambda: f64, w: f64) -> f64 {
    use microlp::{ComparisonOp, OptimizationDirection, Problem};
    let (m, k) = a.dim();
    let mut pr = Problem::new(OptimizationDirection::Minimize);
    let xs: Vec<_> = (0..k)
        .map(|_| pr.add_var(lambda, (0.0, f64::INFINITY)))
        .collect();
    let us: Vec<_> = (0..m)
        .map(|_| pr.add_var(1.0, (0.0, f64::INFINITY)))
        .collect();
    let vs: Vec<_> = (0..m)
        .map(|_| pr.add_var(w, (0.0, f64::INFINITY)))
        .collect();
    for i in 0..m {
        let mut row: Vec<(microlp::Variable, f64)> = Vec::new();
        for j in 0..k {
            let v = a[[i, j]] as f64;
            if v != 0.0 {
                row.push((xs[j], v));
            }
        }
        row.push((us[i], 1.0));
        row.push((vs[i], -1.0));
        pr.add_constraint(&row, ComparisonOp::Eq, p[i]);
    }
    pr.solve()
        .expect("LP solves")
        .into_solution()
        .expect("LP optimal")
        .objective()
}

pub fn dense(doc: &SparseDoc, m: usize) -> Vec<f64> {
    let mut p = vec![0.0; m];
    for (&i, &v) in doc.ids.iter().zip(&doc.vals) {
        p[i as usize] = v;
    }
    p
}
