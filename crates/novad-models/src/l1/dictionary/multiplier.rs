use ndarray::Array2;
use serde::{Deserialize, Serialize};

use crate::text::Remap;

/// The OIADMM multiplier Δ (m × n): one row per vocabulary term, one column per document
/// position of the last batch, stored sparsely by rows.
///
/// Δ is mostly zero: an entry only becomes non-zero where a document contained the term or a
/// coded document's reconstruction used it, and untouched entries are only ever clipped to
/// [−1, 1]. Storing the non-zeros keeps memory, store size and the OIADMM step proportional to
/// the data instead of to m · n (a 90 000-term vocabulary × 1 000 documents would be 360 MB
/// dense in f32).
///
/// Invariants: every row is sorted by column, columns are distinct and `< ncols`, values are
/// finite and non-zero.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Multiplier {
    ncols: usize,
    rows: Vec<Vec<(u32, f32)>>,
}

impl Multiplier {
    /// The zero m × n multiplier.
    pub fn zeros(m: usize, n: usize) -> Self {
        Multiplier {
            ncols: n,
            rows: vec![Vec::new(); m],
        }
    }
    pub fn nrows(&self) -> usize {
        self.rows.len()
    }
    pub fn ncols(&self) -> usize {
        self.ncols
    }
    /// Number of stored (non-zero) entries.
    pub fn nnz(&self) -> usize {
        self.rows.iter().map(|r| r.len()).sum()
    }
    /// Row i's non-zeros, sorted by column.
    pub fn row(&self, i: usize) -> &[(u32, f32)] {
        &self.rows[i]
    }
    pub(crate) fn rows_mut(&mut self) -> &mut [Vec<(u32, f32)>] {
        &mut self.rows
    }
    /// All values finite (and the structural invariants hold).
    pub fn is_valid(&self) -> bool {
        self.rows.iter().all(|r| {
            r.windows(2).all(|w| w[0].0 < w[1].0)
                && r.iter()
                    .all(|&(c, v)| (c as usize) < self.ncols && v.is_finite() && v != 0.0)
        })
    }

    /// Apply a vocabulary change to the rows and resize to `n` columns: the first
    /// min(n_prev, n) columns are kept, the others are zero (SPEC §4.3).
    pub fn remap_resize(&self, remap: &Remap, n: usize) -> Multiplier {
        let mut rows = vec![Vec::new(); remap.new_len];
        for (r, row) in self.rows.iter().enumerate().take(remap.old_len) {
            if let Some(nr) = remap.get(r) {
                rows[nr] = row
                    .iter()
                    .copied()
                    .filter(|&(c, _)| (c as usize) < n)
                    .collect();
            }
        }
        Multiplier { ncols: n, rows }
    }

    /// Dense copy (for tests and small inspections).
    pub fn to_dense(&self) -> Array2<f32> {
        let mut a = Array2::zeros((self.nrows(), self.ncols));
        for (i, row) in self.rows.iter().enumerate() {
            for &(c, v) in row {
                a[[i, c as usize]] = v;
            }
        }
        a
    }

    /// Sparse copy of a dense matrix (zeros dropped).
    pub fn from_dense(a: &Array2<f32>) -> Multiplier {
        Multiplier {
            ncols: a.ncols(),
            rows: a
                .rows()
                .into_iter()
                .map(|r| {
                    r.iter()
                        .enumerate()
                        .filter(|(_, &v)| v != 0.0)
                        .map(|(c, &v)| (c as u32, v))
                        .collect()
                })
                .collect(),
        }
    }

    /// Build from rows (checked by [`Multiplier::is_valid`] at the caller's discretion).
    pub fn from_rows(ncols: usize, rows: Vec<Vec<(u32, f32)>>) -> Multiplier {
        Multiplier { ncols, rows }
    }
}
