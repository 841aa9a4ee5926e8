//! Â held by rows: per vocabulary term, the stored entries (atom, value) of its row, by atom.
//!
//! On text Â is well under 1 % dense (20 Newsgroups: about 117,000 non-zero entries of
//! 90,000 × 200 after 12,000 posts), so every whole-matrix operation of a timestep — the
//! vocabulary remap, the atoms' ℓ1 norms, the finiteness check, the OIADMM update's live rows,
//! the refresh of atoms, the stored image — costs O(m + non-zeros) instead of O(m·k).
//!
//! An entry is stored when its bit pattern is not `+0.0` (so `-0.0` and non-finite values
//! survive a round trip, as they would in a dense matrix; the checks reject non-finite and
//! negative values).
//! [`Dictionary::to_dense`] and [`Dictionary::from_dense`] convert losslessly, bit for bit, and
//! the serde form is the dense matrix's (`ndarray`'s: version, shape, every entry row by row),
//! so the model digest does not depend on the layout.

use ndarray::{Array2, ArrayView2};
use serde::ser::{SerializeSeq, SerializeStruct};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::text::Remap;

/// `ndarray`'s serde format version (the first field of its image).
const DENSE_FORMAT: u8 = 1;

/// An m × k dictionary held by rows (see the module documentation).
///
/// Invariants: `ptr.len() == m + 1`, `ptr` non-decreasing from 0 to `entries.len()`; within a
/// row atoms are strictly ascending and `< k`; no stored value has the bits of `+0.0`.
#[derive(Debug, Clone, PartialEq)]
pub struct Dictionary {
    k: usize,
    ptr: Vec<usize>,
    entries: Vec<(u32, f32)>,
}

/// True when `v` is stored (its bits are not those of `+0.0`).
#[inline]
fn stored(v: f32) -> bool {
    v.to_bits() != 0
}

impl Dictionary {
    /// The m × k zero dictionary.
    pub fn zeros(m: usize, k: usize) -> Dictionary {
        Dictionary {
            k,
            ptr: vec![0; m + 1],
            entries: Vec::new(),
        }
    }

    /// From a dense m × k matrix (any layout), bit for bit.
    pub fn from_dense(a: ArrayView2<'_, f32>) -> Dictionary {
        let (m, k) = a.dim();
        let mut out = Dictionary::builder(k, m, 0);
        for row in a.rows() {
            out.entries.extend(
                row.iter()
                    .enumerate()
                    .filter(|(_, &v)| stored(v))
                    .map(|(j, &v)| (j as u32, v)),
            );
            out.ptr.push(out.entries.len());
        }
        out
    }

    /// [`Self::from_dense`] for a matrix read from outside: a shape with rows but no atoms is
    /// refused (its image holds no entries, so its row count is not bounded by the image's
    /// size, and no model has k = 0).
    pub fn try_from_dense(a: ArrayView2<'_, f32>) -> Result<Dictionary, String> {
        match a.dim() {
            (m, 0) if m > 0 => Err(format!("{m} rows but no atoms")),
            _ => Ok(Dictionary::from_dense(a)),
        }
    }

    /// The dense m × k matrix (row-major), bit for bit.
    pub fn to_dense(&self) -> Array2<f32> {
        let mut a = Array2::<f32>::zeros((self.nrows(), self.k));
        for (i, mut row) in a.rows_mut().into_iter().enumerate() {
            for &(j, v) in self.row(i) {
                row[j as usize] = v;
            }
        }
        a
    }

    /// An empty dictionary of k atoms to which `rows` rows of about `entries` entries in all
    /// are appended ([`Self::push_row`]): its buffers sized for them, so that writing a
    /// dictionary of millions of entries does not move them again each time they fill.
    fn builder(k: usize, rows: usize, entries: usize) -> Dictionary {
        let mut ptr = Vec::with_capacity(rows + 1);
        ptr.push(0);
        Dictionary {
            k,
            ptr,
            entries: Vec::with_capacity(entries),
        }
    }

    /// Append a row given by its entries, atoms ascending and `< k`; `+0.0` values are dropped.
    pub(crate) fn push_row(&mut self, row: impl IntoIterator<Item = (u32, f32)>) {
        self.entries
            .extend(row.into_iter().filter(|&(_, v)| stored(v)));
        self.ptr.push(self.entries.len());
        debug_assert!(self
            .row(self.nrows() - 1)
            .windows(2)
            .all(|w| w[0].0 < w[1].0));
        debug_assert!(self
            .row(self.nrows() - 1)
            .last()
            .is_none_or(|&(j, _)| (j as usize) < self.k));
    }

    /// m, the number of rows (terms).
    pub fn nrows(&self) -> usize {
        self.ptr.len() - 1
    }
    /// k, the number of columns (atoms).
    pub fn ncols(&self) -> usize {
        self.k
    }
    /// (m, k).
    pub fn dim(&self) -> (usize, usize) {
        (self.nrows(), self.k)
    }
    /// Number of stored entries.
    pub fn nnz(&self) -> usize {
        self.entries.len()
    }
    /// The stored entries of row `i` (atom, value), atoms ascending.
    pub fn row(&self, i: usize) -> &[(u32, f32)] {
        &self.entries[self.ptr[i]..self.ptr[i + 1]]
    }
    /// Entry (i, j) (0 when not stored).
    pub fn get(&self, i: usize, j: usize) -> f32 {
        let row = self.row(i);
        row.binary_search_by_key(&(j as u32), |e| e.0)
            .map_or(0.0, |p| row[p].1)
    }

    /// The ℓ1 norm of every atom (column), summed in f64 in row order — the dense column sums
    /// bit for bit (the entries left out are zeros).
    pub fn col_l1(&self) -> Vec<f64> {
        let mut s = vec![0.0f64; self.k];
        for &(j, v) in &self.entries {
            s[j as usize] += v as f64;
        }
        s
    }

    /// True when every entry is finite.
    pub fn all_finite(&self) -> bool {
        self.entries.iter().all(|e| e.1.is_finite())
    }

    /// True when Â ∈ 𝒜 up to `tol`: every entry finite and ≥ 0, every column's ℓ1 norm
    /// ≤ 1 + `tol`.
    pub fn in_set(&self, tol: f64) -> bool {
        self.entries.iter().all(|e| e.1.is_finite() && e.1 >= 0.0)
            && self.col_l1().iter().all(|&s| s <= 1.0 + tol)
    }

    /// Per atom, whether any entry is > 0.
    pub fn positive_columns(&self) -> Vec<bool> {
        let mut out = vec![false; self.k];
        for &(j, v) in &self.entries {
            if v > 0.0 {
                out[j as usize] = true;
            }
        }
        out
    }

    /// Apply a vocabulary change: rows move per `remap`, evicted rows are dropped, rows of new
    /// terms are zero. The result has `remap.new_len` rows. O(m + non-zeros).
    pub fn remap(&self, remap: &Remap) -> Dictionary {
        if remap.map.is_none() && remap.old_len == self.nrows() && remap.new_len >= remap.old_len {
            // every id kept, the new ones after them: the rows as they are, then empty rows
            let mut ptr = Vec::with_capacity(remap.new_len + 1);
            ptr.extend_from_slice(&self.ptr);
            ptr.resize(remap.new_len + 1, self.entries.len());
            return Dictionary {
                k: self.k,
                ptr,
                entries: self.entries.clone(),
            };
        }
        // the old row of every new row (u32::MAX: a new term, zero)
        let mut from = vec![u32::MAX; remap.new_len];
        for r in 0..remap.old_len.min(self.nrows()) {
            if let Some(nr) = remap.get(r) {
                from[nr] = r as u32;
            }
        }
        let mut out = Dictionary::builder(self.k, remap.new_len, self.nnz());
        for &r in &from {
            if r != u32::MAX {
                out.entries.extend_from_slice(self.row(r as usize));
            }
            out.ptr.push(out.entries.len());
        }
        out
    }

    /// A copy of `self` with row `rows[c]` replaced by `values(c)` (`rows` strictly ascending,
    /// `< m`); every other row is kept as it is. O(m + non-zeros).
    pub(crate) fn with_rows<'r, T: Copy + 'r>(
        &self,
        rows: &[usize],
        values: impl Fn(usize) -> &'r [(u32, T)],
        to_f32: impl Fn(T) -> f32,
    ) -> Dictionary {
        debug_assert!(rows.windows(2).all(|w| w[0] < w[1]));
        let replaced: usize = rows.iter().map(|&i| self.row(i).len()).sum();
        let written: usize = (0..rows.len()).map(|c| values(c).len()).sum();
        let mut out = Dictionary::builder(self.k, self.nrows(), self.nnz() - replaced + written);
        let mut next = rows.iter().enumerate().peekable();
        for i in 0..self.nrows() {
            match next.peek() {
                Some(&(c, &r)) if r == i => {
                    out.push_row(values(c).iter().map(|&(j, v)| (j, to_f32(v))));
                    next.next();
                }
                _ => out.push_row(self.row(i).iter().copied()),
            }
        }
        out
    }

    /// Set the atoms `cleared` to zero, then write `writes` (row, atom, value), later writes to
    /// the same entry winning — as the same assignments to a dense matrix would. Writes with a
    /// row ≥ m are ignored; atoms must be `< k`. O(m + non-zeros + writes · log writes).
    pub fn rewrite_columns(&mut self, cleared: &[usize], writes: &[(usize, u32, f32)]) {
        let mut gone = vec![false; self.k];
        for &j in cleared {
            gone[j] = true;
        }
        // the last write of each entry, by (row, atom)
        let mut w: Vec<(usize, u32, usize)> = writes
            .iter()
            .enumerate()
            .map(|(n, &(i, j, _))| (i, j, n))
            .collect();
        w.sort_unstable();
        w.dedup_by(|later, earlier| {
            let same = (later.0, later.1) == (earlier.0, earlier.1);
            if same {
                earlier.2 = earlier.2.max(later.2);
            }
            same
        });
        let mut out = Dictionary::builder(self.k, self.nrows(), self.nnz() + w.len());
        let mut at = 0usize;
        for i in 0..self.nrows() {
            let start = at;
            while at < w.len() && w[at].0 == i {
                at += 1;
            }
            let new = &w[start..at];
            let old = self.row(i).iter().filter(|e| !gone[e.0 as usize]).copied();
            if new.is_empty() {
                out.entries.extend(old);
                out.ptr.push(out.entries.len());
                continue;
            }
            let mut merged: Vec<(u32, f32)> = old
                .filter(|e| new.binary_search_by_key(&e.0, |x| x.1).is_err())
                .chain(new.iter().map(|&(_, j, n)| (j, writes[n].2)))
                .collect();
            merged.sort_unstable_by_key(|e| e.0);
            out.push_row(merged);
        }
        *self = out;
    }

    /// Append atoms, each given by its entries (row, value); a later entry for the same row
    /// wins. O(m + non-zeros).
    pub fn push_columns(&mut self, cols: &[Vec<(u32, f32)>]) {
        let k0 = self.k;
        self.k += cols.len();
        let writes: Vec<(usize, u32, f32)> = cols
            .iter()
            .enumerate()
            .flat_map(|(c, col)| {
                col.iter()
                    .map(move |&(i, v)| (i as usize, (k0 + c) as u32, v))
            })
            .collect();
        self.rewrite_columns(&[], &writes);
    }

    /// Keep only the atoms `keep` (ascending), renumbered 0.. in that order. O(m + non-zeros).
    pub fn select_columns(&self, keep: &[usize]) -> Dictionary {
        let mut to = vec![u32::MAX; self.k];
        for (n, &j) in keep.iter().enumerate() {
            to[j] = n as u32;
        }
        let mut out = Dictionary::builder(keep.len(), self.nrows(), self.nnz());
        for i in 0..self.nrows() {
            out.entries.extend(
                self.row(i)
                    .iter()
                    .filter(|e| to[e.0 as usize] != u32::MAX)
                    .map(|&(j, v)| (to[j as usize], v)),
            );
            out.ptr.push(out.entries.len());
        }
        out
    }
}

/// Every entry, row by row, zeros included (the dense matrix's element sequence).
struct DenseSeq<'a>(&'a Dictionary);

impl Serialize for DenseSeq<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let d = self.0;
        let mut seq = serializer.serialize_seq(Some(d.nrows() * d.k))?;
        let mut dense = vec![0.0f32; d.k];
        for i in 0..d.nrows() {
            for &(j, v) in d.row(i) {
                dense[j as usize] = v;
            }
            for v in &dense {
                seq.serialize_element(v)?;
            }
            for &(j, _) in d.row(i) {
                dense[j as usize] = 0.0;
            }
        }
        seq.end()
    }
}

impl Serialize for Dictionary {
    /// The dense matrix's serde form (`ndarray`'s), element for element.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut st = serializer.serialize_struct("Array", 3)?;
        st.serialize_field("v", &DENSE_FORMAT)?;
        st.serialize_field("dim", &[self.nrows(), self.k])?;
        st.serialize_field("data", &DenseSeq(self))?;
        st.end()
    }
}

impl<'de> Deserialize<'de> for Dictionary {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let a = Array2::<f32>::deserialize(deserializer)?;
        Dictionary::try_from_dense(a.view()).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// A dense matrix with zeros, −0.0 and positive entries.
    fn sample(m: usize, k: usize, seed: u64) -> Array2<f32> {
        let mut r = ChaCha8Rng::seed_from_u64(seed);
        Array2::from_shape_fn((m, k), |_| match r.random_range(0..6) {
            0 => -0.0,
            1 | 2 => r.random::<f32>(),
            _ => 0.0,
        })
    }

    fn bits(a: &Array2<f32>) -> Vec<u32> {
        a.iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn dense_round_trip_and_serde_form_are_the_dense_matrix() {
        let a = sample(37, 9, 1);
        let d = Dictionary::from_dense(a.view());
        assert_eq!(bits(&d.to_dense()), bits(&a));
        assert!(d.nnz() < 37 * 9 && d.nnz() > 0);
        assert_eq!(
            postcard::to_stdvec(&d).unwrap(),
            postcard::to_stdvec(&a).unwrap()
        );
        let back: Dictionary = postcard::from_bytes(&postcard::to_stdvec(&a).unwrap()).unwrap();
        assert_eq!(back, d);
        let t = a.t().to_owned();
        assert_eq!(bits(&Dictionary::from_dense(t.view()).to_dense()), bits(&t));
        let z = Dictionary::zeros(4, 0);
        assert_eq!(postcard::to_stdvec(&z).unwrap(), {
            postcard::to_stdvec(&Array2::<f32>::zeros((4, 0))).unwrap()
        });
    }

    /// Column sums, the set test, finiteness and positive columns equal the dense ones.
    #[test]
    fn column_figures_equal_the_dense_ones() {
        let mut a = sample(50, 7, 2).mapv(|v| v * 0.05);
        let d = Dictionary::from_dense(a.view());
        let dense_l1: Vec<f64> = (0..7)
            .map(|j| a.column(j).iter().fold(0.0f64, |s, &v| s + v as f64))
            .collect();
        assert_eq!(d.col_l1(), dense_l1);
        assert_eq!(
            d.in_set(0.0),
            crate::l1::dictionary::in_dictionary_set(&a, 0.0)
        );
        let pos: Vec<bool> = (0..7)
            .map(|j| a.column(j).iter().any(|&v| v > 0.0))
            .collect();
        assert_eq!(d.positive_columns(), pos);
        assert!(d.all_finite());
        a[[3, 4]] = f32::NAN;
        let d = Dictionary::from_dense(a.view());
        assert!(!d.all_finite() && !d.in_set(1.0));
        a[[3, 4]] = -0.5;
        assert!(!Dictionary::from_dense(a.view()).in_set(10.0));
    }

    /// The remap, rewriting columns, appending and selecting atoms give what the same
    /// operations on the dense matrix give, bit for bit.
    #[test]
    fn edits_equal_the_dense_edits() {
        let a = sample(40, 8, 3);
        let d = Dictionary::from_dense(a.view());
        // remap: drop every third row, shuffle the rest, add 5 new rows
        let mut map = vec![u32::MAX; 40];
        let mut next = 0u32;
        for (r, slot) in map.iter_mut().enumerate().rev() {
            if r % 3 != 0 {
                *slot = next;
                next += 1;
            }
        }
        let remap = Remap {
            old_len: 40,
            new_len: next as usize + 5,
            map: Some(map),
        };
        let want = crate::l1::dictionary::remap_rows(&a, &remap);
        assert_eq!(bits(&d.remap(&remap).to_dense()), bits(&want));
        // every id kept (the copy as it is), with and without new rows after them
        for added in [0, 5] {
            let kept = Remap {
                old_len: 40,
                new_len: 40 + added,
                map: None,
            };
            let want = crate::l1::dictionary::remap_rows(&a, &kept);
            let got = d.remap(&kept);
            assert_eq!(got.nrows(), 40 + added);
            assert_eq!(bits(&got.to_dense()), bits(&want));
        }

        let writes = [(3, 2, 0.5f32), (7, 5, 0.25), (3, 2, 0.125), (9, 5, 0.0)];
        let mut dense = a.clone();
        for &j in &[2usize, 5] {
            dense.column_mut(j).fill(0.0);
        }
        for &(i, j, v) in &writes {
            dense[[i, j as usize]] = v;
        }
        let mut e = d.clone();
        e.rewrite_columns(&[2, 5], &writes);
        assert_eq!(bits(&e.to_dense()), bits(&dense));

        let cols = vec![vec![(1u32, 0.5f32), (0, 0.25), (1, 0.75)], vec![]];
        let mut grown = a.clone();
        for col in &cols {
            let mut c = ndarray::Array1::<f32>::zeros(40);
            for &(i, v) in col {
                c[i as usize] = v;
            }
            grown.push_column(c.view()).unwrap();
        }
        let mut g = d.clone();
        g.push_columns(&cols);
        assert_eq!(bits(&g.to_dense()), bits(&grown));

        let keep = [0usize, 3, 4, 9];
        let sel = grown.select(ndarray::Axis(1), &keep);
        assert_eq!(bits(&g.select_columns(&keep).to_dense()), bits(&sel));
        for i in 0..40 {
            for j in 0..10 {
                assert_eq!(g.get(i, j).to_bits(), grown[[i, j]].to_bits());
            }
        }
    }
}
