use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sprs::CsMat;

use super::ball::{column_sums, Thresholds};
use super::gradient::{live_rows, nonzeros, row_times_codes, Acc, Gram, Inputs, Live};
use super::project::SparseRows;
use super::{Dictionary, Multiplier};
use crate::linalg::{psi_max_codes, soft};
use crate::model::{EngineError, OiadmmStats};
use crate::shard::{shard_of, LOGICAL_SHARDS};

/// Parameters of the OIADMM step (Algorithm 2). Checked by [`crate::Params::validate`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OiadmmParams {
    /// Penalty β (paper: 5). > 0.
    pub beta: f64,
    /// τ = tau_scale / (2 Ψmax(X̂_t)) (paper: tau_scale = 1, from Theorem 4.6). > 0.
    pub tau_scale: f64,
    /// Carry the multiplier Δ from one batch to the next (the paper: column j of Δ_t is reused
    /// for document j of the next batch, although it is a different document). `false` starts
    /// every batch from Δ = 0, which makes Â learn much better on a planted stream (measured in
    /// `tests/dictionary.rs`) and removes Δ from the persisted state.
    pub carry_delta: bool,
}

impl OiadmmParams {
    pub fn paper() -> Self {
        OiadmmParams {
            beta: 5.0,
            tau_scale: 1.0,
            carry_delta: true,
        }
    }
}

/// Â_{t+1}: `a` with its live rows replaced by their projected rows rounded to f32 (every
/// other row holds only ±0, kept as it is, see [`live_rows`]), and (‖Â_{t+1} − Â_t‖²,
/// ‖Â_t‖²) over the live rows, the new values rounded to f32 first. Each row's sums run over the union of its old and new
/// non-zeros by atom (the terms left out are exact zeros) and are computed in parallel, then
/// added in row order, so the figures equal the dense ones bit for bit.
fn write_rows(a: &Dictionary, live: &Live<'_>, rows: &[&[(u32, f32)]]) -> (Dictionary, f64, f64) {
    let parts: Vec<(f64, f64)> = (0..live.rows.len())
        .into_par_iter()
        .map(|c| {
            let (old, new) = (live.a_row(c), rows[c]);
            let (mut diff, mut norm) = (0.0f64, 0.0f64);
            let (mut o, mut n) = (old.iter().peekable(), new.iter().peekable());
            loop {
                let (ov, nv) = match (o.peek(), n.peek()) {
                    (None, None) => break,
                    (Some(&&(jo, _)), Some(&&(jn, _))) if jo == jn => {
                        (o.next().unwrap().1, n.next().unwrap().1)
                    }
                    (Some(&&(jo, _)), Some(&&(jn, _))) if jo < jn => (o.next().unwrap().1, 0.0),
                    (Some(_), None) => (o.next().unwrap().1, 0.0),
                    _ => (0.0, n.next().unwrap().1),
                };
                diff += (nv as f64 - ov as f64).powi(2);
                norm += (ov as f64).powi(2);
            }
            (diff, norm)
        })
        .collect();
    let (diff, norm) = parts
        .iter()
        .fold((0.0, 0.0), |(d, n), &(di, ni)| (d + di, n + ni));
    let next = a.with_rows(&live.rows, |c| rows[c], |v| v);
    (next, diff, norm)
}

/// ‖Â_t‖² over the live rows, added in row order.
fn live_norm(live: &Live<'_>) -> f64 {
    let parts: Vec<f64> = (0..live.rows.len())
        .into_par_iter()
        .map(|c| {
            live.a_row(c)
                .iter()
                .map(|&(_, v)| (v as f64).powi(2))
                .sum::<f64>()
        })
        .collect();
    parts.iter().sum()
}

/// One OIADMM step (Algorithm 2): returns Â_{t+1} and overwrites `delta` (Δ_t) with Δ_{t+1}.
///
/// Shapes: `p` is the batch, m × n CSR (rows = terms); `a` is Â_t, m × k; `delta` is Δ_t,
/// m × n (already resized to this batch), or `None` for Δ_t = 0 — then Δ_{t+1} is not
/// computed; `x` is X̂_t, k × n CSC.
///
/// Cost: one pass over Â_t's rows for its live rows (O(m + non-zeros)), the Gram matrix X̂X̂ᵀ
/// (O(Σ_j nnz(x_j)²) time, k² f64; only for k ≤ 1024), then per live row i
/// O(nnz(Â_i)·k + (nnz(P_i) + nnz(Δ_i))·nnz(code)) through the Gram matrix, or
/// O(nnz((ÂX̂)_i)·nnz(code)) for the few rows whose W can clip off the batch's terms; the
/// projection and the new Â are O(m + non-zeros). Guarantees: Â_{t+1} ∈ 𝒜, all values
/// finite; the result equals the dense transcription of Algorithm 2 up to rounding (tested to
/// 1e-5), and is a deterministic function of the inputs (any number of threads, bit for bit).
///
/// This is [`UpdateJob`] with every logical shard of rows computed here; a cluster computes
/// the shards on different workers and gets the same result, bit for bit.
pub fn oiadmm_step(
    p: &CsMat<f64>,
    a: &Dictionary,
    delta: Option<&mut Multiplier>,
    x: &CsMat<f64>,
    params: &OiadmmParams,
) -> (Dictionary, OiadmmStats) {
    let job = UpdateJob::new(p, a, delta.as_deref(), x, params);
    let parts = project_here(vec![job.run_whole()], a.ncols());
    let mut done = job.project(parts).expect("a job's own rows fit it");
    if let Some(d) = delta {
        done.next_delta(d, p, a);
    }
    (done.dict, done.stats)
}

/// The gradient rows (pass 1) of one logical shard of Â's rows: the live rows of the terms
/// `i` with `i mod LOGICAL_SHARDS == shard`, ascending, each as its positive entries (atom,
/// value) by atom, before the projection. What a worker contributes to the update's round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GradientRows {
    pub shard: u32,
    /// Entries per row, one per live row of the shard.
    pub lens: Vec<u32>,
    /// The rows' entries, row after row.
    pub entries: Vec<(u32, f64)>,
}

/// The `shard` of a part that holds every live row in row order ([`UpdateJob::run_whole`]).
pub const WHOLE: u32 = u32::MAX;

/// Rows of Â_{t+1} of one logical shard of rows, projected onto 𝒜 and rounded to f32: the
/// shard's live rows, ascending, each as its non-zero entries (atom, value) by atom. What a
/// worker contributes to the update's last round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProjectedRows {
    pub shard: u32,
    /// Entries per row, one per live row of the shard.
    pub lens: Vec<u32>,
    /// The rows' entries, row after row.
    pub entries: Vec<(u32, f32)>,
}

/// `parts` (the gradient rows of every shard, or of one worker's shards when the others'
/// sums are its own too) projected onto 𝒜 here: the column thresholds from this worker's
/// sums alone ([`Thresholds`]).
pub fn project_here(parts: Vec<GradientRows>, k: usize) -> Vec<ProjectedRows> {
    let mut th = Thresholds::start(&column_sums(&parts, k));
    let mut cand = th.candidates(&parts);
    while !th.is_done() {
        let t = th.sums_above(&mut cand);
        th.advance(&t).expect("a worker's own sums fit its columns");
    }
    th.apply(parts)
}

/// One OIADMM step split by logical shards of Â's rows (term `i` in shard `i mod 64`), so that
/// several workers share it: each computes the gradient rows of some shards ([`Self::run`],
/// pass 1, O(the rows' entries · k)), the workers find the columns' thresholds together from
/// exact per-column sums ([`Thresholds`], an all-reduce of k pairs a round), each projects its
/// own rows ([`Thresholds::apply`]), and every worker writes Â_{t+1} from every shard's
/// projected rows ([`Self::project`], O(m + non-zeros)). Each row is a function of the row,
/// the batch and the thresholds, and the thresholds do not depend on how the rows are split,
/// so the result is the single worker's, bit for bit, however the shards are dealt.
pub struct UpdateJob<'a> {
    p: &'a CsMat<f64>,
    a: &'a Dictionary,
    delta: Option<&'a Multiplier>,
    x: &'a CsMat<f64>,
    xr: CsMat<f64>,
    live: Live<'a>,
    gram: Option<Gram>,
    tau: f64,
    beta: f64,
    /// Per logical shard, the positions in `live` of its rows, ascending (every shard empty
    /// when the step changes no row: τ = 0 or no atom).
    by_shard: Vec<Vec<usize>>,
}

impl<'a> UpdateJob<'a> {
    /// The step's inputs as [`oiadmm_step`] takes them; computes τ, the live rows and the
    /// Gram matrix (every worker does, O(m + non-zeros + Σ_j nnz(x_j)²)).
    pub fn new(
        p: &'a CsMat<f64>,
        a: &'a Dictionary,
        delta: Option<&'a Multiplier>,
        x: &'a CsMat<f64>,
        params: &OiadmmParams,
    ) -> Self {
        let (m, k) = a.dim();
        let n = p.cols();
        assert_eq!(p.rows(), m, "P rows");
        if let Some(d) = &delta {
            assert_eq!((d.nrows(), d.ncols()), (m, n), "Δ shape");
        }
        assert_eq!(x.rows(), k, "X rows");
        assert_eq!(x.cols(), n, "X cols");
        assert!(p.is_csr() && x.is_csc());
        let psi = psi_max_codes(x);
        let tau = if psi > 0.0 {
            params.tau_scale / (2.0 * psi)
        } else {
            0.0
        };
        let xr = x.to_csr();
        let live = live_rows(p, a, delta);
        let active = tau > 0.0 && k > 0;
        let gram = if active { Gram::for_codes(x, k) } else { None };
        let mut by_shard = vec![Vec::new(); LOGICAL_SHARDS];
        if active {
            for (c, &i) in live.rows.iter().enumerate() {
                by_shard[shard_of(i)].push(c);
            }
        }
        UpdateJob {
            p,
            a,
            delta,
            x,
            xr,
            live,
            gram,
            tau,
            beta: params.beta,
            by_shard,
        }
    }

    /// k, the number of atoms.
    pub fn atoms(&self) -> usize {
        self.a.ncols()
    }

    fn inputs(&self) -> Inputs<'_> {
        Inputs {
            p: self.p,
            a: self.a,
            delta: self.delta,
            x: self.x,
            xr: &self.xr,
        }
    }

    /// The predicted cost of each logical shard's gradient rows, for dealing them out
    /// ([`crate::shard::deal`]): per row, its entries in Â_t times k (the Gram path) plus 16
    /// per explicit position (a term of the batch or a multiplier) and k for the row's pass.
    /// An integer function of the job, so every worker predicts the same costs.
    pub fn shard_costs(&self) -> [u64; LOGICAL_SHARDS] {
        let k = self.a.ncols() as u64;
        let mut costs = [0u64; LOGICAL_SHARDS];
        for (s, rows) in self.by_shard.iter().enumerate() {
            costs[s] = rows
                .iter()
                .map(|&c| {
                    let i = self.live.rows[c];
                    let explicit = self.p.outer_view(i).map_or(0, |r| r.nnz())
                        + self.delta.map_or(0, |d| d.row(i).len());
                    (self.live.a_row(c).len() as u64 + 1) * k + 16 * explicit as u64
                })
                .sum();
        }
        costs
    }

    /// Pass 1 for every live row, in row order, as one part whose shard is [`WHOLE`]: what
    /// one worker alone computes (the rows of every shard, without cutting them apart).
    pub fn run_whole(&self) -> GradientRows {
        let idx: Vec<usize> = if self.by_shard.iter().all(Vec::is_empty) {
            Vec::new()
        } else {
            (0..self.live.rows.len()).collect()
        };
        let rows = if idx.is_empty() {
            SparseRows::default()
        } else {
            self.inputs()
                .gradient_rows(self.beta, self.tau, &self.live, self.gram.as_ref(), &idx)
        };
        GradientRows {
            shard: WHOLE,
            lens: rows.ptr.windows(2).map(|w| (w[1] - w[0]) as u32).collect(),
            entries: rows.entries,
        }
    }

    /// Pass 1 for the rows of `shards` (in parallel on the rayon pool): one part per shard, in
    /// `shards` order.
    pub fn run(&self, shards: &[usize]) -> Vec<GradientRows> {
        let idx: Vec<usize> = shards
            .iter()
            .flat_map(|&s| self.by_shard[s].iter().copied())
            .collect();
        let rows = if idx.is_empty() {
            SparseRows::default()
        } else {
            self.inputs()
                .gradient_rows(self.beta, self.tau, &self.live, self.gram.as_ref(), &idx)
        };
        let mut r = 0;
        shards
            .iter()
            .map(|&s| {
                let count = self.by_shard[s].len();
                let (from, to) = (r, r + count);
                r = to;
                let span = if count == 0 {
                    0..0
                } else {
                    rows.ptr[from]..rows.ptr[to]
                };
                GradientRows {
                    shard: s as u32,
                    lens: (from..to)
                        .map(|c| (rows.ptr[c + 1] - rows.ptr[c]) as u32)
                        .collect(),
                    entries: rows.entries[span].to_vec(),
                }
            })
            .collect()
    }

    /// Every shard's projected rows put back in row order (one slice of `parts` per live row,
    /// none when the step changes no row): fails, naming the shard, when a shard is missing or
    /// repeated or a part does not fit the job (row count, entries out of order or out of
    /// range, a value not finite and positive).
    fn assemble<'p>(
        &self,
        parts: &'p [ProjectedRows],
    ) -> Result<Vec<&'p [(u32, f32)]>, EngineError> {
        let k = self.a.ncols();
        let bad = |s: usize, what: &str| {
            EngineError::Inconsistent(format!("logical shard {s} of the update's rows: {what}"))
        };
        let rows_of = |s: u32| match s {
            WHOLE => self.by_shard.iter().map(Vec::len).sum(),
            s => self.by_shard[s as usize].len(),
        };
        for part in parts {
            let s = part.shard as usize;
            if s >= LOGICAL_SHARDS && part.shard != WHOLE {
                return Err(bad(s, "no such shard"));
            }
            if part.lens.len() != rows_of(part.shard) {
                return Err(bad(s, "not one row per live row"));
            }
            let total: usize = part.lens.iter().map(|&l| l as usize).sum();
            if total != part.entries.len() {
                return Err(bad(s, "entry counts do not add up"));
            }
            let mut at = 0;
            for &l in &part.lens {
                let row = &part.entries[at..at + l as usize];
                at += l as usize;
                let ordered = row.windows(2).all(|w| w[0].0 < w[1].0);
                let fits = row
                    .iter()
                    .all(|&(j, v)| (j as usize) < k && v.is_finite() && v > 0.0);
                if !ordered || !fits {
                    return Err(bad(s, "a row does not fit the dictionary"));
                }
            }
        }
        // one part of every row, in row order: the rows as they are
        if parts.len() == 1 && parts[0].shard == WHOLE {
            let part = &parts[0];
            let mut at = 0;
            return Ok(part
                .lens
                .iter()
                .map(|&l| {
                    at += l as usize;
                    &part.entries[at - l as usize..at]
                })
                .collect());
        }
        let mut slot: Vec<Option<&ProjectedRows>> = vec![None; LOGICAL_SHARDS];
        for part in parts {
            let s = part.shard as usize;
            if part.shard == WHOLE {
                return Err(bad(s, "every row given beside shards"));
            }
            if slot[s].replace(part).is_some() {
                return Err(bad(s, "given twice"));
            }
        }
        if let Some(s) = slot.iter().position(Option::is_none) {
            return Err(bad(s, "missing"));
        }
        if self.by_shard.iter().all(Vec::is_empty) {
            return Ok(Vec::new());
        }
        let parts: Vec<&ProjectedRows> = slot.into_iter().flatten().collect();
        let mut cursor = vec![(0usize, 0usize); LOGICAL_SHARDS];
        let mut out: Vec<&[(u32, f32)]> = Vec::with_capacity(self.live.rows.len());
        for &i in &self.live.rows {
            let s = shard_of(i);
            let (row, at) = &mut cursor[s];
            let l = parts[s].lens[*row] as usize;
            out.push(&parts[s].entries[*at..*at + l]);
            *row += 1;
            *at += l;
        }
        Ok(out)
    }

    /// The projected rows of every shard ([`Thresholds::apply`] of [`Self::run`]'s parts, in
    /// any order) written into Â_{t+1}, with the step's figures. Δ_{t+1}, when Δ is carried,
    /// follows from [`Projected::next_delta`].
    pub fn project(self, parts: Vec<ProjectedRows>) -> Result<Projected, EngineError> {
        let rows = self.assemble(&parts)?;
        // The new Â (every row outside `live` holds only ±0, kept as it is) and its change.
        let (dict, diff, norm) = if rows.is_empty() {
            (self.a.clone(), 0.0, live_norm(&self.live))
        } else {
            write_rows(self.a, &self.live, &rows)
        };
        let relative_change = if norm > 0.0 {
            (diff / norm).sqrt()
        } else {
            0.0
        };
        Ok(Projected {
            dict,
            stats: OiadmmStats {
                tau: self.tau,
                relative_change,
                delta_nnz: 0,
            },
            xr: self.xr,
            beta: self.beta,
        })
    }
}

/// Â_{t+1} of an [`UpdateJob`] and the step's figures.
pub struct Projected {
    pub dict: Dictionary,
    pub stats: OiadmmStats,
    xr: CsMat<f64>,
    beta: f64,
}

impl Projected {
    /// Pass 2: Δ_{t+1} = Δ_t + β (P − Â_{t+1} X̂ − Γ), Γ = soft(P − Â_t X̂ + Δ_t/β, 1/β), in
    /// place of `d` (Δ_t, m × n), for the job's batch `p` and Â_t `a`. Where P_ij = 0 and
    /// (ÂX̂)_ij = 0 before and after, this is Δ_ij ← clip(Δ_ij, −1, 1), so zeros stay zero and
    /// only the candidate positions are visited.
    pub fn next_delta(&mut self, d: &mut Multiplier, p: &CsMat<f64>, a: &Dictionary) {
        let (beta, xr, a_out, n) = (self.beta, &self.xr, &self.dict, p.cols());
        d.rows_mut().par_iter_mut().enumerate().for_each_init(
            || (Acc::new(n), Acc::new(n), Acc::new(n), Acc::new(n)),
            |(ax_old, ax_new, pv, cand), (i, row)| {
                row_times_codes(nonzeros(a.row(i)), xr, ax_old);
                row_times_codes(nonzeros(a_out.row(i)), xr, ax_new);
                for (j, &v) in p.outer_view(i).unwrap().iter() {
                    pv.add(j as u32, v);
                }
                for &(j, dv) in row.iter() {
                    cand.add(j, dv as f64);
                }
                for &j in ax_old
                    .touched
                    .iter()
                    .chain(&ax_new.touched)
                    .chain(&pv.touched)
                {
                    cand.add(j, 0.0);
                }
                let mut next: Vec<(u32, f32)> = Vec::with_capacity(cand.touched.len());
                for &j in &cand.touched {
                    let ju = j as usize;
                    let dv = cand.val[ju];
                    let pij = pv.val[ju];
                    let g = soft(pij - ax_old.val[ju] + dv / beta, 1.0 / beta);
                    let nv = (dv + beta * (pij - ax_new.val[ju] - g)) as f32;
                    if nv != 0.0 {
                        next.push((j, nv));
                    }
                }
                next.sort_unstable_by_key(|e| e.0);
                *row = next;
                ax_old.clear();
                ax_new.clear();
                pv.clear();
                cand.clear();
            },
        );
        self.stats.delta_nnz = d.nnz();
    }
}
