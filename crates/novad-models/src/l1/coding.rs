//! ℓ1 sparse coding of documents over a non-negative dictionary — the novelty score.
//!
//! For a document p (unit ℓ1, non-negative) and dictionary A ∈ 𝒜 the score is
//! `l(p, A) = min_{x ≥ 0} L_w(p − A x) + λ ‖x‖₁` where `L_w` is the ℓ1 loss with residual
//! mass the atoms predict but the document lacks charged `w` (the paper: `w = 1`).
//!
//! Exact reductions make coding cheap (each is tested against the full problem):
//! 1. **Support reduction** (SPEC §4.1). Rows outside the document's support S have
//!    `p_i = 0` and `(A x)_i ≥ 0`, so they contribute `w · Σ_j c_j x_j` with
//!    `c_j = ‖A_j‖₁ − Σ_{i∈S} A_ij`; the problem shrinks to |S| rows with a per-atom linear term
//!    `λ + w c_j`.
//! 2. **Atom screening.** The one-sided derivative of the objective along `x_j` is at least
//!    `λ + w c_j − s_j` everywhere (`s_j = Σ_{i∈S} A_ij`), so an atom with
//!    `s_j ≤ λ + w c_j` is zero in some optimal code and is dropped before solving. This is the
//!    "(1+λ)/2 of the atom's mass on the document's words" rule of SPEC §4.8.
//! 3. **Covered rows** (with per-atom steps). A row of S that no remaining atom touches has
//!    `(Ax)_i = 0` for every x: it adds the constant `p_i` and is left out of the ADMM.
//!
//! The reduced problem is solved by the paper's ADMM (Algorithm 5): linearised x-step with
//! step κ, multiplier step γ, penalty φ. The returned score is the objective recomputed
//! exactly at the returned code (the best iterate seen; x = 0, score ‖p‖₁, is the start).

use ndarray::ArrayView2;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use std::borrow::Cow;

use crate::l1::dictionary::Dictionary;
use crate::linalg::{loss_asym, prox_asym, psi_max_rows, SparseCols};
use crate::model::Code;
use crate::text::SparseDoc;

/// How the ADMM step κ is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepSize {
    /// κ = 1/Ψmax(Â) for every document (the paper).
    Global,
    /// κ = 1/Ψmax(Â_{S,K}) of the document's reduced problem: larger steps, faster
    /// convergence, same optimum.
    PerDocument,
    /// One step per atom of the document's reduced problem, κ_j = 1/(Â_{S,K}ᵀ Â_{S,K} 1)_j
    /// ([`per_atom_steps`]): a diagonal preconditioner, same optimum, about half the
    /// iterations of [`StepSize::PerDocument`] on 20NG. (Appended last: stored parameter sets
    /// name the earlier rules by position.)
    PerAtom,
}

/// Parameters of sparse coding. Checked by [`crate::Params::validate`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CodingParams {
    /// ℓ1 weight λ on the code (paper: 0.1). ≥ 0.
    pub lambda: f64,
    /// ADMM penalty φ (paper: 5). > 0.
    pub phi: f64,
    /// Multiplier step γ (paper: 1.89, from Yang & Zhang's linearised ADMM analysis). In (0, 2).
    pub gamma: f64,
    /// Stop when the primal residual ‖p − Ax − e‖∞ and the change of e (times φ) are both ≤ tol
    /// (the paper's test), and with [`StepSize::PerAtom`] also the x-step's gradient mapping
    /// max_j |Δx_j| / κ_j: with its larger steps e can track Ax before x has converged
    /// (without that test, φ = 10 stopped 0.047 above the LP optimum on a small random
    /// instance). The global and per-document rules keep the paper's test, so stores created
    /// with them code as before.
    pub tol: f64,
    /// Iteration cap.
    pub max_iter: u32,
    pub step: StepSize,
    /// Weight w of predicted-but-absent mass in the loss (paper: 1, symmetric). In (0, 1].
    pub absent_weight: f64,
    /// How many top residual terms ("why novel") to report per document.
    pub residual_terms: usize,
}

impl CodingParams {
    /// The paper's configuration (Appendix A).
    pub fn paper() -> Self {
        CodingParams {
            lambda: 0.1,
            phi: 5.0,
            gamma: 1.89,
            tol: 1e-5,
            max_iter: 2000,
            step: StepSize::Global,
            absent_weight: 1.0,
            residual_terms: 8,
        }
    }
}

/// A dictionary prepared for coding: the atoms (m × k held by rows, rows = terms) and derived
/// quantities computed once per timestep.
pub struct CodingDict<'a> {
    atoms: Cow<'a, Dictionary>,
    col_l1: Vec<f64>,
    global_psi: Option<f64>,
}

impl<'a> CodingDict<'a> {
    /// Prepare `atoms` (m × k, every entry finite and ≥ 0): O(non-zeros), and Ψmax(Â) only
    /// when the step rule needs it.
    pub fn new(atoms: &'a Dictionary, step: StepSize) -> Self {
        Self::prepare(Cow::Borrowed(atoms), step)
    }

    /// [`Self::new`] for a dense m × k matrix (converted once, O(m·k)).
    pub fn from_dense(atoms: ArrayView2<'_, f32>, step: StepSize) -> CodingDict<'static> {
        CodingDict::prepare(Cow::Owned(Dictionary::from_dense(atoms)), step)
    }

    fn prepare(atoms: Cow<'a, Dictionary>, step: StepSize) -> Self {
        let col_l1 = atoms.col_l1();
        let global_psi = (step == StepSize::Global)
            .then(|| psi_max_rows(atoms.ncols(), (0..atoms.nrows()).map(|i| atoms.row(i))));
        CodingDict {
            atoms,
            col_l1,
            global_psi,
        }
    }
    pub fn n_terms(&self) -> usize {
        self.atoms.nrows()
    }
    pub fn n_atoms(&self) -> usize {
        self.atoms.ncols()
    }
    /// ℓ1 norms of the atoms.
    pub fn col_l1(&self) -> &[f64] {
        &self.col_l1
    }
}

/// Solution of a dense ℓ1 coding problem (see [`solve`]).
#[derive(Debug, Clone)]
pub struct Solution {
    pub x: Vec<f64>,
    pub objective: f64,
    pub iterations: u32,
}

/// Objective `Σ_i L_w(p_i − (Ax)_i) + Σ_j lin_j x_j`.
pub fn objective(a: &SparseCols, p: &[f64], x: &[f64], lin: &[f64], w: f64) -> f64 {
    let mut ax = vec![0.0; a.rows];
    a.mul(x, &mut ax);
    let loss: f64 = p
        .iter()
        .zip(&ax)
        .map(|(&pi, &q)| loss_asym(pi - q, w))
        .sum();
    loss + lin.iter().zip(x).map(|(l, x)| l * x).sum::<f64>()
}

/// The per-atom steps' margin: κ_j is 1/(1.01 (AᵀA 1)_j), as Ψmax carries a 1 % margin.
pub const STEP_MARGIN: f64 = 1.01;

/// Per-atom ADMM steps κ_j = 1 / Σ_i A_ij r_i with r_i = Σ_l A_il (row sums of A): a
/// diagonal step matrix K with K⁻¹ ⪰ AᵀA, so the linearised x-step stays a majorisation (for
/// a non-negative A, diag(AᵀA 1) − AᵀA is diagonally dominant, hence positive semidefinite —
/// the Schur test), strictly with the margin [`STEP_MARGIN`] (along the all-ones direction the
/// bound is tight). Atoms that share few rows with others get steps near 1/‖A_j‖², far larger
/// than the one κ = 1/Ψmax(A) the heaviest direction allows. An empty column gets κ_j = 0
/// (its x_j stays 0).
pub fn per_atom_steps(a: &SparseCols) -> Vec<f64> {
    let mut row_sum = vec![0.0f64; a.rows];
    for j in 0..a.cols() {
        let (ri, rv) = a.col(j);
        for (&r, &v) in ri.iter().zip(rv) {
            row_sum[r as usize] += v;
        }
    }
    (0..a.cols())
        .map(|j| {
            let (ri, rv) = a.col(j);
            let d: f64 = ri
                .iter()
                .zip(rv)
                .map(|(&r, &v)| v * row_sum[r as usize])
                .sum();
            if d > 0.0 {
                1.0 / (STEP_MARGIN * d)
            } else {
                0.0
            }
        })
        .collect()
}

/// Solve `min_{x ≥ 0} Σ_i L_w(p_i − (Ax)_i) + Σ_j lin_j x_j` by the ADMM of Algorithm 5 with a
/// per-coordinate linear term, for a sparse non-negative matrix A (`a.rows` = `p.len()`,
/// `a.cols()` = `lin.len()`).
///
/// `kappa` must satisfy κ ≤ 1/Ψmax(A); pass `None` to derive the steps from A by
/// `params.step`: [`StepSize::PerAtom`] gives [`per_atom_steps`], any other rule κ = 1/Ψmax(A).
/// Guarantees: the returned x is ≥ 0 and finite, `objective` is the exact objective at x, and
/// it is never above the objective of x = 0.
pub fn solve(
    a: &SparseCols,
    p: &[f64],
    lin: &[f64],
    params: &CodingParams,
    kappa: Option<f64>,
) -> Solution {
    let rows = a.rows;
    let cols = a.cols();
    debug_assert_eq!(p.len(), rows);
    debug_assert_eq!(lin.len(), cols);
    let w = params.absent_weight;
    let zero_obj: f64 = p.iter().map(|&pi| loss_asym(pi, w)).sum();
    let kappa = match kappa {
        Some(k) => vec![k; cols],
        None if params.step == StepSize::PerAtom => per_atom_steps(a),
        None => {
            let psi = a.psi_max();
            vec![if psi > 0.0 { 1.0 / psi } else { 0.0 }; cols]
        }
    };
    let mut best = Solution {
        x: vec![0.0; cols],
        objective: zero_obj,
        iterations: 0,
    };
    if cols == 0
        || rows == 0
        || kappa.iter().all(|&k| k == 0.0)
        || kappa.iter().any(|k| !k.is_finite() || *k < 0.0)
    {
        return best;
    }
    let phi = params.phi;
    let inv_phi = 1.0 / phi;
    // the stopping test on x belongs to the per-atom rule (see `CodingParams::tol`)
    let check_x = params.step == StepSize::PerAtom;
    let gamma = params.gamma;
    let mut x = vec![0.0; cols];
    let mut ax = vec![0.0; rows];
    let mut e: Vec<f64> = p.to_vec();
    let mut rho = vec![0.0; rows];
    let mut u = vec![0.0; rows];
    let mut it = 0u32;
    while it < params.max_iter {
        it += 1;
        let mut de = 0.0f64;
        for i in 0..rows {
            let v = p[i] - ax[i] + rho[i] * inv_phi;
            let en = prox_asym(v, inv_phi, w);
            de = de.max((en - e[i]).abs());
            e[i] = en;
            u[i] = ax[i] + en - p[i] - rho[i] * inv_phi;
        }
        let mut dx = 0.0f64;
        for j in 0..cols {
            let g = a.tmul_col(j, &u);
            let xn = (x[j] - kappa[j] * (g + lin[j] * inv_phi)).max(0.0);
            if check_x && kappa[j] > 0.0 {
                dx = dx.max((xn - x[j]).abs() / kappa[j]);
            }
            x[j] = xn;
        }
        a.mul(&x, &mut ax);
        let mut primal = 0.0f64;
        let mut loss = 0.0;
        for i in 0..rows {
            let r = p[i] - ax[i];
            let pr = r - e[i];
            primal = primal.max(pr.abs());
            rho[i] += gamma * phi * pr;
            loss += loss_asym(r, w);
        }
        let obj = loss + lin.iter().zip(&x).map(|(l, x)| l * x).sum::<f64>();
        if obj < best.objective {
            best.objective = obj;
            best.x.copy_from_slice(&x);
        }
        if primal <= params.tol && de * phi <= params.tol && (!check_x || dx <= params.tol) {
            break;
        }
    }
    best.iterations = it;
    // Recompute exactly at the returned point (the loop value is the same arithmetic, but a
    // fresh evaluation keeps the guarantee independent of the loop's bookkeeping).
    best.objective = objective(a, p, &best.x, lin, w).min(zero_obj);
    if best.objective >= zero_obj {
        best.x.iter_mut().for_each(|v| *v = 0.0);
        best.objective = zero_obj;
    }
    best
}

/// Code one document over the dictionary with the exact support reduction and atom screening.
///
/// `doc` must have sorted, distinct term ids `< dict.n_terms()` and non-negative values (ids
/// beyond the dictionary are treated as rows of zeros). The score of an empty document is 0.
pub fn code_document(dict: &CodingDict<'_>, doc: &SparseDoc, params: &CodingParams) -> Code {
    let w = params.absent_weight;
    let lambda = params.lambda;
    let k = dict.n_atoms();
    let m = dict.n_terms();
    let ceiling: f64 = doc.vals.iter().sum();
    let p: Vec<f64> = doc.vals.clone();
    // s_j = Σ_{i∈S} A_ij
    let mut s = vec![0.0f64; k];
    for &id in &doc.ids {
        if (id as usize) < m {
            for &(j, a) in dict.atoms.row(id as usize) {
                s[j as usize] += a as f64;
            }
        }
    }
    let mut active: Vec<usize> = Vec::new();
    let mut lin: Vec<f64> = Vec::new();
    for (j, (&sj, &l1)) in s.iter().zip(&dict.col_l1).enumerate() {
        let c = (l1 - sj).max(0.0);
        let l = lambda + w * c;
        if sj > l {
            active.push(j);
            lin.push(l);
        }
    }
    let cols = active.len();
    // A_{S,K} by columns: gather the document's rows once, then split by atom. With per-atom
    // steps only the covered rows are kept: a row no active atom touches has (Ax)_i = 0 for
    // every x, so it adds the constant p_i to the objective and nothing to the x-step; in the
    // ADMM it would only hold the stopping test back, so it is added to the score afterwards.
    // (The other step rules keep every row: their arithmetic, hence stored models built with
    // them, stay exactly as they were.)
    let reduce_rows = params.step == StepSize::PerAtom;
    let mut covered: Vec<usize> = Vec::new();
    // Σ L_w(p_i) over the rows left out
    let mut free = 0.0f64;
    let mut gathered: Vec<Vec<(u32, f64)>> = vec![Vec::new(); cols];
    // the position of every atom among the active ones (u32::MAX: not active)
    let mut pos = vec![u32::MAX; k];
    for (c, &j) in active.iter().enumerate() {
        pos[j] = c as u32;
    }
    for (r, &id) in doc.ids.iter().enumerate() {
        let at = covered.len() as u32;
        let mut any = false;
        if (id as usize) < m && cols > 0 {
            for &(j, v) in dict.atoms.row(id as usize) {
                let c = pos[j as usize];
                if c != u32::MAX && v != 0.0 {
                    gathered[c as usize].push((at, v as f64));
                    any = true;
                }
            }
        }
        if any || !reduce_rows {
            covered.push(r);
        } else {
            free += loss_asym(p[r], w);
        }
    }
    let mut a = SparseCols::new(covered.len());
    for g in gathered {
        a.push_col(g);
    }
    let pc: Vec<f64> = covered.iter().map(|&r| p[r]).collect();
    let kappa = match dict.global_psi {
        Some(psi) if psi > 0.0 => Some(1.0 / psi),
        Some(_) => Some(0.0),
        None => None,
    };
    let sol = solve(&a, &pc, &lin, params, kappa);
    // residual p − A_S x on the support (zero Ax off the covered rows)
    let mut axc = vec![0.0; covered.len()];
    a.mul(&sol.x, &mut axc);
    let mut resid = p.clone();
    for (&r, &q) in covered.iter().zip(&axc) {
        resid[r] -= q;
    }
    let objective = if reduce_rows {
        sol.objective + free
    } else {
        sol.objective
    };
    let mut top: Vec<(u32, f64)> = doc
        .ids
        .iter()
        .zip(&resid)
        .filter(|(_, &r)| r > 0.0)
        .map(|(&id, &r)| (id, r))
        .collect();
    top.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
    top.truncate(params.residual_terms);
    let (atoms, weights): (Vec<u32>, Vec<f64>) = active
        .iter()
        .zip(&sol.x)
        .filter(|(_, &x)| x > 0.0)
        .map(|(&j, &x)| (j as u32, x))
        .unzip();
    Code {
        atoms,
        weights,
        score: objective.clamp(0.0, ceiling.max(0.0)),
        ceiling,
        iterations: sol.iterations,
        active_atoms: cols as u32,
        residual: top,
    }
}

/// Code every document of a batch in parallel (rayon). The result is independent of the thread
/// count: each document is coded on its own.
pub fn code_batch(dict: &CodingDict<'_>, docs: &[SparseDoc], params: &CodingParams) -> Vec<Code> {
    docs.par_iter()
        .map(|d| code_document(dict, d, params))
        .collect()
}

/// The full (unreduced) problem for one document: all m rows, all k atoms, linear term λ.
/// Used as the reference the reductions are tested against; never on the hot path.
pub fn code_document_full(
    atoms: ArrayView2<'_, f32>,
    doc: &SparseDoc,
    params: &CodingParams,
) -> Solution {
    let (m, k) = atoms.dim();
    let mut a = vec![0.0f64; m * k];
    for i in 0..m {
        for j in 0..k {
            a[j * m + i] = atoms[[i, j]] as f64;
        }
    }
    let mut p = vec![0.0f64; m];
    for (&id, &v) in doc.ids.iter().zip(&doc.vals) {
        p[id as usize] = v;
    }
    let lin = vec![params.lambda; k];
    let a = SparseCols::from_colmajor(&a, m, k);
    let kappa = match params.step {
        StepSize::Global => {
            let psi = a.psi_max();
            Some(if psi > 0.0 { 1.0 / psi } else { 0.0 })
        }
        StepSize::PerDocument | StepSize::PerAtom => None,
    };
    solve(&a, &p, &lin, params, kappa)
}
