//! The similarity graph of a timestep's cores and its communities: a k-nearest-neighbour
//! graph, Louvain modularity optimisation (Blondel et al., 2008). Pure functions of plain
//! inputs; deterministic (nodes and communities are visited in index order, ties go to the
//! lower index).

use std::collections::BTreeMap;

/// The symmetric k-nearest-neighbour graph of a similarity matrix (n × n, row-major): i and j
/// are joined, with weight `sims[i][j]`, when j is among i's `k` most similar other nodes or i
/// among j's (ties to the lower index), and their similarity exceeds `floor`. Adjacency lists,
/// neighbours increasing, no self-loops.
pub fn knn_graph(sims: &[f32], n: usize, k: usize, floor: f32) -> Vec<Vec<(usize, f64)>> {
    let mut adj: Vec<BTreeMap<usize, f64>> = vec![BTreeMap::new(); n];
    for i in 0..n {
        let row = &sims[i * n..(i + 1) * n];
        let mut near: Vec<usize> = (0..n).filter(|&j| j != i && row[j] > floor).collect();
        near.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
        near.truncate(k);
        for j in near {
            adj[i].insert(j, row[j] as f64);
            adj[j].insert(i, row[j] as f64);
        }
    }
    adj.into_iter().map(|m| m.into_iter().collect()).collect()
}

/// A weighted graph for Louvain: adjacency lists (both directions), plus each node's self-loop
/// weight (the internal weight of the community it stands for, each internal edge counted
/// twice).
struct Graph {
    adj: Vec<Vec<(usize, f64)>>,
    selfw: Vec<f64>,
}

impl Graph {
    fn degree(&self, i: usize) -> f64 {
        self.adj[i].iter().map(|e| e.1).sum::<f64>() + self.selfw[i]
    }
}

/// Louvain communities of an undirected weighted graph (`adj` symmetric, no self-loops,
/// weights > 0): local moving of single nodes while modularity Q = Σ_c [in_c / 2m −
/// γ (tot_c / 2m)²] increases, then aggregation of the communities into nodes, until a level
/// moves nothing. Returns each node's community, numbered 0.. by first appearance; a node
/// without edges is a community of its own. γ = `resolution` > 0 (higher: smaller
/// communities). Deterministic.
pub fn louvain(adj: &[Vec<(usize, f64)>], resolution: f64) -> Vec<usize> {
    let n = adj.len();
    let mut label: Vec<usize> = (0..n).collect();
    let mut g = Graph {
        adj: adj.to_vec(),
        selfw: vec![0.0; n],
    };
    let m2: f64 = (0..n).map(|i| g.degree(i)).sum();
    if m2 <= 0.0 {
        return label;
    }
    for _level in 0..32 {
        let (comm, moved) = local_moving(&g, m2, resolution);
        if !moved {
            break;
        }
        let (renum, count) = renumber(&comm);
        for l in label.iter_mut() {
            *l = renum[*l];
        }
        g = aggregate(&g, &renum, count);
    }
    renumber(&label).0
}

/// One level's local moving: every node starts alone; nodes (in index order) move to the
/// neighbouring community of largest modularity gain while any does. Returns each node's
/// community and whether any node moved.
fn local_moving(g: &Graph, m2: f64, gamma: f64) -> (Vec<usize>, bool) {
    let n = g.adj.len();
    let k: Vec<f64> = (0..n).map(|i| g.degree(i)).collect();
    let mut comm: Vec<usize> = (0..n).collect();
    let mut tot: Vec<f64> = k.clone();
    let mut moved_any = false;
    let mut to: BTreeMap<usize, f64> = BTreeMap::new();
    for _pass in 0..100 {
        let mut moved = false;
        for i in 0..n {
            let own = comm[i];
            to.clear();
            to.insert(own, 0.0);
            for &(j, w) in &g.adj[i] {
                *to.entry(comm[j]).or_insert(0.0) += w;
            }
            tot[own] -= k[i];
            let gain = |c: usize, w: f64| w - gamma * tot[c] * k[i] / m2;
            let mut best = (own, gain(own, to[&own]));
            for (&c, &w) in &to {
                let gc = gain(c, w);
                if gc > best.1 + 1e-12 {
                    best = (c, gc);
                }
            }
            tot[best.0] += k[i];
            if best.0 != own {
                comm[i] = best.0;
                moved = true;
                moved_any = true;
            }
        }
        if !moved {
            break;
        }
    }
    (comm, moved_any)
}

/// Labels renumbered 0.. by first appearance, and how many there are.
fn renumber(labels: &[usize]) -> (Vec<usize>, usize) {
    let mut map: BTreeMap<usize, usize> = BTreeMap::new();
    let mut out = Vec::with_capacity(labels.len());
    for &l in labels {
        let next = map.len();
        out.push(*map.entry(l).or_insert(next));
    }
    (out, map.len())
}

/// The graph of communities: node c stands for the nodes labelled c; edge weights summed,
/// internal weights into the self-loop.
fn aggregate(g: &Graph, label: &[usize], count: usize) -> Graph {
    let mut adj: Vec<BTreeMap<usize, f64>> = vec![BTreeMap::new(); count];
    let mut selfw = vec![0.0; count];
    for (i, edges) in g.adj.iter().enumerate() {
        let a = label[i];
        selfw[a] += g.selfw[i];
        for &(j, w) in edges {
            let b = label[j];
            if a == b {
                selfw[a] += w;
            } else {
                *adj[a].entry(b).or_insert(0.0) += w;
            }
        }
    }
    Graph {
        adj: adj.into_iter().map(|m| m.into_iter().collect()).collect(),
        selfw,
    }
}

/// Modularity of a partition: Σ_c [in_c / 2m − γ (tot_c / 2m)²] (the tests' oracle).
#[cfg(test)]
fn modularity(adj: &[Vec<(usize, f64)>], label: &[usize], gamma: f64) -> f64 {
    let m2: f64 = adj.iter().flatten().map(|e| e.1).sum();
    if m2 <= 0.0 {
        return 0.0;
    }
    let count = label.iter().max().map_or(0, |&m| m + 1);
    let (mut inw, mut tot) = (vec![0.0; count], vec![0.0; count]);
    for (i, edges) in adj.iter().enumerate() {
        for &(j, w) in edges {
            tot[label[i]] += w;
            if label[i] == label[j] {
                inw[label[i]] += w;
            }
        }
    }
    (0..count)
        .map(|c| inw[c] / m2 - gamma * (tot[c] / m2).powi(2))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dense matrix of cosine similarities of `docs` (unit ℓ2 vectors as (term, weight)
    /// pairs, terms increasing): row-major, n × n, symmetric, 1 on the diagonal for a non-empty
    /// document, every entry in [0, 1] (weights are non-negative).
    fn cosines(docs: &[Vec<(u32, f32)>]) -> Vec<f32> {
        let n = docs.len();
        let mut postings: BTreeMap<u32, Vec<(usize, f32)>> = BTreeMap::new();
        for (i, d) in docs.iter().enumerate() {
            for &(t, w) in d {
                postings.entry(t).or_default().push((i, w));
            }
        }
        let mut s = vec![0.0f32; n * n];
        let mut acc = vec![0.0f64; n];
        for (i, d) in docs.iter().enumerate() {
            acc.iter_mut().for_each(|a| *a = 0.0);
            for &(t, w) in d {
                for &(j, v) in &postings[&t] {
                    if j >= i {
                        acc[j] += w as f64 * v as f64;
                    }
                }
            }
            for j in i..n {
                let c = acc[j].clamp(0.0, 1.0) as f32;
                s[i * n + j] = c;
                s[j * n + i] = c;
            }
        }
        s
    }

    /// Planted partition: dense blocks, sparse links between them; Louvain returns the blocks,
    /// and no single node move raises the modularity of its answer (a local optimum).
    #[test]
    fn louvain_recovers_planted_blocks_at_a_local_optimum() {
        let sizes = [12usize, 9, 15, 6];
        let n: usize = sizes.iter().sum();
        let block: Vec<usize> = sizes
            .iter()
            .enumerate()
            .flat_map(|(b, &s)| std::iter::repeat_n(b, s))
            .collect();
        let mut adj: Vec<Vec<(usize, f64)>> = vec![Vec::new(); n];
        let mut x = 7u64;
        let mut rnd = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as f64 / (1u64 << 31) as f64
        };
        for i in 0..n {
            for j in i + 1..n {
                let p = if block[i] == block[j] { 0.8 } else { 0.04 };
                if rnd() < p {
                    let w = 0.5 + rnd();
                    adj[i].push((j, w));
                    adj[j].push((i, w));
                }
            }
        }
        let got = louvain(&adj, 1.0);
        for i in 0..n {
            for j in 0..n {
                assert_eq!(got[i] == got[j], block[i] == block[j], "{i} {j}");
            }
        }
        let q = modularity(&adj, &got, 1.0);
        assert!(q > 0.5, "modularity {q}");
        let count = got.iter().max().unwrap() + 1;
        for i in 0..n {
            for c in 0..count {
                let mut moved = got.clone();
                moved[i] = c;
                assert!(modularity(&adj, &moved, 1.0) <= q + 1e-9);
            }
        }
    }

    /// An edgeless graph leaves every node alone; the k-NN graph is symmetric, has at least
    /// min(k, others above the floor) edges per node and only edges above the floor.
    #[test]
    fn knn_graph_is_symmetric_and_bounded() {
        assert_eq!(louvain(&[vec![], vec![], vec![]], 1.0), vec![0, 1, 2]);
        let docs: Vec<Vec<(u32, f32)>> = (0..20u32)
            .map(|i| {
                let a = [(i % 5, 0.8f32), (5 + i % 3, 0.6)];
                a.to_vec()
            })
            .collect();
        let s = cosines(&docs);
        for i in 0..20 {
            assert!((s[i * 20 + i] - 1.0).abs() < 1e-6);
            for j in 0..20 {
                assert_eq!(s[i * 20 + j], s[j * 20 + i]);
            }
        }
        let g = knn_graph(&s, 20, 4, 0.3);
        for (i, e) in g.iter().enumerate() {
            let above = (0..20).filter(|&j| j != i && s[i * 20 + j] > 0.3).count();
            assert!(e.len() >= above.min(4), "node {i}");
            for &(j, w) in e {
                assert!(w > 0.3 && j != i);
                assert!(g[j].iter().any(|&(b, v)| b == i && v == w));
            }
        }
    }
}
