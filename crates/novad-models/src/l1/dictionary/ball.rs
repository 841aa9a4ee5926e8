//! The projection of Â's columns onto {a ≥ 0, ‖a‖₁ ≤ 1} when the rows are spread over several
//! workers: each column's threshold θ is found by Michelot's fixed point, whose every round
//! needs only per-column sums and counts — an all-reduce of k pairs — instead of the column's
//! values.
//!
//! For a column whose positive values sum to S > 1, θ solves Σ max(u − θ, 0) = 1. Michelot's
//! iteration starts from the level (S − 1)/n over the n positive values and replaces it by
//! (Σ_{u > level} u − 1)/|{u > level}| until that set stops shrinking; the level is then θ
//! (exactly, in exact arithmetic; Condat 2016, "Fast projection onto the simplex and the ℓ1
//! ball"). The levels never decrease, so the rounds end after at most n.
//!
//! The sums are exact and independent of the order they are taken in: every value is turned
//! into a fixed-point integer (2⁻⁸⁰ units, truncated; values below 2⁻⁸⁰ ≈ 8·10⁻²⁵ count as 0)
//! and the integers are added. So a worker's partial sums added in any order, any number of
//! workers, give the same totals bit for bit, and the same θ as one worker.

use serde::{Deserialize, Serialize};

use super::oiadmm::{GradientRows, ProjectedRows};

/// Fixed-point units per 1.0 of a value in a [`ColumnSum`].
const UNIT: f64 = (1u128 << 80) as f64;

/// Rounds of the fixed point after which a column's level is taken as its θ (the set shrinks
/// every round before; a few rounds are the rule).
const MAX_ROUNDS: usize = 200;

/// A column's exact sum (in 2⁻⁸⁰ units) and count of values, as workers add them up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnSum {
    pub sum: i128,
    pub count: u64,
}

impl ColumnSum {
    fn add(&mut self, v: f64) {
        self.sum = self.sum.saturating_add(fixed(v));
        self.count += 1;
    }
    /// The sum as a number (rounded to the nearest f64).
    fn value(&self) -> f64 {
        self.sum as f64 / UNIT
    }
}

/// `v` in 2⁻⁸⁰ units, truncated towards 0 (saturated at i128's bounds): what `(v * 2⁸⁰) as
/// i128` gives, read off the bits of `v` with integer shifts (the conversion's library call
/// was a tenth of a one-process update). `v` must be positive (not NaN).
fn fixed(v: f64) -> i128 {
    let bits = v.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1u64 << 52) - 1);
    // v = mant × 2^shift − 80 in units of 2⁻⁸⁰
    let (mant, shift) = if exp == 0 {
        (frac, -1074 + 80)
    } else {
        (frac | (1u64 << 52), exp - 1075 + 80)
    };
    if exp == 0x7ff || shift > 127 - 53 {
        return i128::MAX;
    }
    if shift >= 0 {
        (mant as i128) << shift
    } else if shift > -64 {
        (mant >> (-shift)) as i128
    } else {
        0
    }
}

/// Add `theirs` into `totals` element by element (exact, so in any order); fails when the
/// lengths differ.
pub fn add_sums(totals: &mut [ColumnSum], theirs: &[ColumnSum]) -> Result<(), String> {
    if totals.len() != theirs.len() {
        return Err(format!(
            "{} column sums where {} were expected",
            theirs.len(),
            totals.len()
        ));
    }
    for (t, o) in totals.iter_mut().zip(theirs) {
        t.sum = t.sum.saturating_add(o.sum);
        t.count += o.count;
    }
    Ok(())
}

/// Per column of k, the sum and count of the positive values of `parts`' rows.
pub fn column_sums(parts: &[GradientRows], k: usize) -> Vec<ColumnSum> {
    let mut out = vec![ColumnSum::default(); k];
    for &(j, v) in parts.iter().flat_map(|p| &p.entries) {
        if v > 0.0 && (j as usize) < k {
            out[j as usize].add(v);
        }
    }
    out
}

/// The thresholds of the step's columns as the rounds find them.
#[derive(Debug, Clone)]
pub struct Thresholds {
    /// Per column: its level (the threshold once settled); 0 for a column inside the ball.
    level: Vec<f64>,
    /// Per column: the count of the last round.
    count: Vec<u64>,
    /// The columns still moving, ascending.
    active: Vec<u32>,
    /// Columns over the ball (their values are shifted by θ).
    over: Vec<bool>,
    rounds: usize,
}

impl Thresholds {
    /// From the totals of [`column_sums`] over every worker: the columns over the ball start
    /// at level (S − 1)/n.
    pub fn start(totals: &[ColumnSum]) -> Thresholds {
        let k = totals.len();
        let mut th = Thresholds {
            level: vec![0.0; k],
            count: vec![0; k],
            active: Vec::new(),
            over: vec![false; k],
            rounds: 0,
        };
        for (j, t) in totals.iter().enumerate() {
            let s = t.value();
            if s > 1.0 && t.count > 0 {
                th.over[j] = true;
                th.level[j] = (s - 1.0) / t.count as f64;
                th.count[j] = t.count;
                th.active.push(j as u32);
            }
        }
        th
    }

    /// True once every column's θ is settled.
    pub fn is_done(&self) -> bool {
        self.active.is_empty()
    }

    /// Rounds taken so far.
    pub fn rounds(&self) -> usize {
        self.rounds
    }

    /// The entries of `parts` a round can count: those of a column over the ball above its
    /// level, (column, value). Kept by the caller and narrowed by every [`Self::sums_above`]
    /// (a value at or below a column's level is at or below every later one).
    pub fn candidates(&self, parts: &[GradientRows]) -> Vec<(u32, f64)> {
        parts
            .iter()
            .flat_map(|p| &p.entries)
            .filter(|&&(j, v)| {
                self.over.get(j as usize) == Some(&true) && v > self.level[j as usize]
            })
            .copied()
            .collect()
    }

    /// This worker's part of the next round: per active column (ascending), the sum and
    /// count of its values above the column's level. `cand` ([`Self::candidates`]) loses the
    /// entries no later round counts.
    pub fn sums_above(&self, cand: &mut Vec<(u32, f64)>) -> Vec<ColumnSum> {
        let k = self.level.len();
        let mut slot = vec![u32::MAX; k];
        for (c, &j) in self.active.iter().enumerate() {
            slot[j as usize] = c as u32;
        }
        let mut out = vec![ColumnSum::default(); self.active.len()];
        cand.retain(|&(j, v)| {
            let c = slot[j as usize];
            let keep = c != u32::MAX && v > self.level[j as usize];
            if keep {
                out[c as usize].add(v);
            }
            keep
        });
        out
    }

    /// Take the round's totals over every worker ([`Self::sums_above`] added up): a column
    /// whose set of values above its level did not shrink is settled; the others move to
    /// their new level.
    pub fn advance(&mut self, totals: &[ColumnSum]) -> Result<(), String> {
        if totals.len() != self.active.len() {
            return Err(format!(
                "{} column sums for {} columns",
                totals.len(),
                self.active.len()
            ));
        }
        self.rounds += 1;
        let last = self.rounds >= MAX_ROUNDS;
        let mut still = Vec::with_capacity(self.active.len());
        for (&j, t) in self.active.iter().zip(totals) {
            let j = j as usize;
            if t.count == 0 || t.count >= self.count[j] {
                continue;
            }
            self.level[j] = (t.value() - 1.0) / t.count as f64;
            self.count[j] = t.count;
            if !last {
                still.push(j as u32);
            }
        }
        self.active = still;
        Ok(())
    }

    /// The settled θ of column `j` (`None` for a column inside the ball).
    pub fn theta(&self, j: usize) -> Option<f64> {
        self.over[j].then(|| self.level[j].max(0.0))
    }

    /// `parts`' rows projected: every value of a column over the ball lowered by its θ and
    /// clipped at 0, rounded to f32, and the entries that become 0 dropped.
    pub fn apply(&self, parts: Vec<GradientRows>) -> Vec<ProjectedRows> {
        parts
            .into_iter()
            .map(|p| {
                let (mut lens, mut entries) = (Vec::with_capacity(p.lens.len()), Vec::new());
                let mut at = 0;
                for &l in &p.lens {
                    let before = entries.len();
                    for &(j, v) in &p.entries[at..at + l as usize] {
                        let v = match self.theta(j as usize) {
                            Some(t) => (v - t).max(0.0),
                            None => v,
                        } as f32;
                        if v.to_bits() != 0 {
                            entries.push((j, v));
                        }
                    }
                    at += l as usize;
                    lens.push((entries.len() - before) as u32);
                }
                ProjectedRows {
                    shard: p.shard,
                    lens,
                    entries,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The shifts give the conversion's truncation bit for bit, from subnormals to the
    /// saturation.
    #[test]
    fn fixed_point_by_shifts_is_the_conversion() {
        let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(4);
        let mut cases = vec![
            f64::MIN_POSITIVE,
            5e-324,
            1e-30,
            1e-24,
            8.271806125530277e-25,
            0.5,
            1.0,
            3.0,
            1e10,
            1e14,
            1e30,
            f64::MAX,
            f64::INFINITY,
        ];
        for _ in 0..20_000 {
            let e: i32 = r.random_range(-90..40);
            cases.push(r.random::<f64>() * 2f64.powi(e));
        }
        for v in cases {
            assert_eq!(fixed(v), (v * UNIT) as i128, "{v:e}");
        }
    }

    /// One column's values as a part of one row per value.
    fn part(shard: u32, vals: &[f64]) -> GradientRows {
        GradientRows {
            shard,
            lens: vec![1; vals.len()],
            entries: vals.iter().map(|&v| (0, v)).collect(),
        }
    }

    /// θ of the rounds solves Σ max(u − θ, 0) = 1 and equals the sort-based θ up to rounding,
    /// on spread, near-equal and heavy-tailed columns; the same θ, bit for bit, whatever the
    /// split of the values among workers and their order.
    #[test]
    fn the_rounds_find_the_simplex_threshold_whatever_the_split() {
        let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        let mut rounds = 0;
        for case in 0..200 {
            let n = 2 + case % 150;
            let u: Vec<f64> = (0..n)
                .map(|_| match case % 3 {
                    0 => r.random::<f64>().powi(4) * 0.6 + 1e-9,
                    1 => 0.5 * (1.0 + r.random::<f64>()) / (1.0 + (case % 5) as f64),
                    _ => (1.0 / (1e-3 + r.random::<f64>())).min(1e4) * 1e-2,
                })
                .collect();
            let theta = |workers: usize, shuffle: bool| {
                let mut parts: Vec<GradientRows> = (0..workers)
                    .map(|w| {
                        let mine: Vec<f64> = u.iter().skip(w).step_by(workers).copied().collect();
                        part(w as u32, &mine)
                    })
                    .collect();
                if shuffle {
                    parts.reverse();
                }
                let reduce = |each: Vec<Vec<ColumnSum>>| {
                    let mut t = each[0].clone();
                    for o in &each[1..] {
                        add_sums(&mut t, o).unwrap();
                    }
                    t
                };
                let mut th = Thresholds::start(&reduce(
                    parts
                        .iter()
                        .map(|p| column_sums(std::slice::from_ref(p), 1))
                        .collect(),
                ));
                let mut cand: Vec<Vec<(u32, f64)>> = parts
                    .iter()
                    .map(|p| th.candidates(std::slice::from_ref(p)))
                    .collect();
                while !th.is_done() {
                    let t = reduce(cand.iter_mut().map(|c| th.sums_above(c)).collect());
                    th.advance(&t).unwrap();
                }
                (th.theta(0), th.rounds())
            };
            let (one, taken) = theta(1, false);
            rounds = rounds.max(taken);
            for (w, s) in [(2, false), (3, true), (7, true)] {
                assert_eq!(theta(w, s).0.map(f64::to_bits), one.map(f64::to_bits));
            }
            let sum: f64 = u.iter().sum();
            match one {
                None => assert!(sum <= 1.0 + 1e-12, "case {case}"),
                Some(t) => {
                    let mass: f64 = u.iter().map(|&v| (v - t).max(0.0)).sum();
                    assert!((mass - 1.0).abs() < 1e-9, "case {case}: Σ = {mass}");
                    let mut x = u.clone();
                    crate::l1::dictionary::project_nonneg_l1_ball(&mut x);
                    for (a, b) in u.iter().zip(&x) {
                        assert!(((a - t).max(0.0) - b).abs() < 1e-9, "case {case}");
                    }
                }
            }
        }
        assert!(rounds >= 2, "the fixed point took {rounds} rounds at most");
    }
}
