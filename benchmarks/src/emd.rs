//! Exact earth mover's distance between two sets of frames.
//!
//! EMD here is the optimal-transport cost between the uniform distributions on the rows of
//! `A` (n × d) and `B` (m × d) with the Euclidean distance between rows as ground cost — the
//! quantity POT's `ot.emd2(ones(n)/n, ones(m)/m, cdist(A, B))` computes.
//!
//! ## Algorithm
//! With g = gcd(n, m), giving each row of `A` a supply of m/g units and each row of `B` a
//! demand of n/g units makes every mass an integer (total N = n·m/g), so the problem is an
//! integer transportation problem (an assignment problem when n = m) and
//! EMD = (optimal integer cost) / N exactly.
//!
//! The optimal plan uses few of the n·m pairs, so we solve on a sparse candidate graph and then
//! *prove* optimality on the dense problem:
//! 1. Candidate edges, multiscale: the problem on every other row is solved first (recursively;
//!    below [`DIRECT_PAIRS`] pairs the candidates are simply each row's k nearest rows both
//!    ways). Its potentials, extended to all rows by c-transforms, are dual-feasible for the
//!    dense problem and nearly optimal, so each source's k pairs of least *reduced* cost are
//!    very likely to hold the optimal plan. The north-west-corner staircase is added too: it
//!    alone admits a feasible plan, so the sparse problem is never infeasible.
//! 2. Successive shortest paths with potentials (primal-dual; Dijkstra from one source with
//!    excess, stopping at the first sink with deficit, JV-style), which keeps complementary
//!    slackness: every residual edge has a non-negative reduced cost.
//! 3. Certificate: the potentials π are a feasible dual for the *dense* problem iff every pair
//!    (i, j) has c_ij + π_i − π_j ≥ 0. A parallel pass over the pairs checks this (only rows
//!    whose potential fell since the last pass can have turned violating). If some
//!    pairs violate it, they join the graph, the affected sources are re-priced (their flow is
//!    released) and step 2 resumes from the current plan. When no pair violates, the plan is
//!    optimal for the dense problem (LP duality), so the returned value is exact.
//!
//! The loop adds at least one edge per round, so it ends; if it ever ran past [`MAX_ROUNDS`]
//! it returns [`EmdError::NotConverged`] rather than an approximation.

use rayon::prelude::*;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Candidate pairs per row in the initial graph (measured: 16 is a good trade-off
/// between the cost of the sparse solve and the number of certificate rounds).
pub const DEFAULT_NEIGHBOURS: usize = 16;
/// Upper bound on certificate rounds; never reached in practice (see the module docs).
pub const MAX_ROUNDS: usize = 10_000;
/// Violating pairs added per source and round (the most violating first).
const MAX_ADDED_PER_ROW: usize = 64;
/// Rows per block in the neighbour pass (bounds the scratch matrix to block × m values).
const BLOCK_ROWS: usize = 256;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EmdError {
    #[error("EMD needs at least one frame in each set (got {n} and {m})")]
    Empty { n: usize, m: usize },
    #[error("EMD needs the same feature size in both sets (got {a} and {b})")]
    DimensionMismatch { a: usize, b: usize },
    #[error("EMD feature size must be positive")]
    ZeroDimension,
    #[error("set {set} has {len} values, which is not a whole number of {dim}-value rows")]
    Ragged { set: char, len: usize, dim: usize },
    #[error("set {set}, row {row}, column {column}: non-finite value {value}")]
    NonFinite {
        set: char,
        row: usize,
        column: usize,
        value: f64,
    },
    #[error("EMD solver did not prove optimality after {rounds} rounds (this is a bug; please report it)")]
    NotConverged { rounds: usize },
}

/// Solver statistics, for benchmarks and diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EmdStats {
    /// Certificate passes over all n·m pairs (1 when the first sparse solve was optimal).
    pub rounds: usize,
    /// Edges in the final candidate graph.
    pub edges: usize,
    /// Shortest-path augmentations.
    pub augmentations: usize,
    /// Certificate rounds spent on the coarser problems.
    pub coarse_rounds: usize,
}

/// A solved EMD: the value and, for diagnostics, how the solver got there.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Emd {
    pub value: f64,
    pub stats: EmdStats,
}

/// Rows of a point set: `data` holds `len / dim` rows of `dim` values, row-major.
#[derive(Debug, Clone, Copy)]
pub struct Points<'a> {
    data: &'a [f64],
    dim: usize,
}

impl<'a> Points<'a> {
    pub fn new(data: &'a [f64], dim: usize) -> Self {
        Points { data, dim }
    }

    fn rows(&self) -> usize {
        self.data.len() / self.dim
    }

    fn row(&self, i: usize) -> &'a [f64] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }
}

/// Exact EMD between the rows of `a` and `b` (row-major, `dim` values per row).
pub fn emd(a: &[f64], b: &[f64], dim: usize) -> Result<f64, EmdError> {
    emd_with(a, b, dim, DEFAULT_NEIGHBOURS).map(|e| e.value)
}

/// [`emd`] with a chosen neighbour count, returning solver statistics too.
pub fn emd_with(a: &[f64], b: &[f64], dim: usize, neighbours: usize) -> Result<Emd, EmdError> {
    if dim == 0 {
        return Err(EmdError::ZeroDimension);
    }
    for (set, data) in [('A', a), ('B', b)] {
        if data.len() % dim != 0 {
            return Err(EmdError::Ragged {
                set,
                len: data.len(),
                dim,
            });
        }
        if let Some(k) = data.iter().position(|v| !v.is_finite()) {
            return Err(EmdError::NonFinite {
                set,
                row: k / dim,
                column: k % dim,
                value: data[k],
            });
        }
    }
    let (pa, pb) = (Points::new(a, dim), Points::new(b, dim));
    let (n, m) = (pa.rows(), pb.rows());
    if n == 0 || m == 0 {
        return Err(EmdError::Empty { n, m });
    }
    let (emd, _) = solve_multiscale(pa, pb, neighbours.max(1))?;
    Ok(emd)
}

/// Problems with fewer pairs than this are solved directly from nearest-neighbour candidates.
pub const DIRECT_PAIRS: usize = 300 * 300;

/// Solves on every other row first and uses those potentials to pick the candidate edges
/// (see the module docs); returns the value and the final potentials.
fn solve_multiscale(a: Points<'_>, b: Points<'_>, k: usize) -> Result<(Emd, Vec<f64>), EmdError> {
    let (n, m) = (a.rows(), b.rows());
    let mut t = Transport::new(a, b, k);
    if n * m <= DIRECT_PAIRS || n < 4 || m < 4 {
        let max_cost = t.build_candidates();
        t.set_tolerance(max_cost);
        t.initial_plan();
    } else {
        let every_other = |p: Points<'_>| -> Vec<f64> { p.data.chunks(p.dim).step_by(2).flatten().copied().collect() };
        let (ca, cb) = (every_other(a), every_other(b));
        let (coarse, coarse_pi) = solve_multiscale(Points::new(&ca, a.dim), Points::new(&cb, b.dim), k)?;
        let nc = ca.len() / a.dim;
        t.stats.coarse_rounds = coarse.stats.rounds + coarse.stats.coarse_rounds;
        t.seed_from_coarse(Points::new(&ca, a.dim), &coarse_pi[..nc]);
    }
    let emd = t.run()?;
    Ok((emd, std::mem::take(&mut t.pi)))
}

/// Euclidean distance between two rows, summing squares in feature order (the same order as
/// [`ColumnBlocks`], so a pair gets the same cost whichever way it is computed).
#[inline]
pub fn euclidean(x: &[f64], y: &[f64]) -> f64 {
    let mut s = 0.0;
    for (p, q) in x.iter().zip(y) {
        let d = p - q;
        s += d * d;
    }
    s.sqrt()
}

/// Rows per block in [`ColumnBlocks`]: one SIMD-friendly group of lanes.
const LANES: usize = 8;

/// A point set stored feature-major in blocks of [`LANES`] rows, so that the distances from one
/// row to all of them vectorise across rows (no horizontal sums). The last block is padded.
struct ColumnBlocks {
    rows: usize,
    dim: usize,
    data: Vec<f64>,
}

impl ColumnBlocks {
    fn new(p: Points<'_>) -> Self {
        let rows = p.rows();
        let blocks = rows.div_ceil(LANES);
        let mut data = vec![0.0; blocks * p.dim * LANES];
        for r in 0..rows {
            let (blk, lane) = (r / LANES, r % LANES);
            for (d, v) in p.row(r).iter().enumerate() {
                data[(blk * p.dim + d) * LANES + lane] = *v;
            }
        }
        ColumnBlocks { rows, dim: p.dim, data }
    }

    /// Distances from `x` to every row, written to `out` (length ≥ rows).
    fn distances(&self, x: &[f64], out: &mut [f64]) {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU supports AVX2 (checked just above).
                unsafe { self.distances_avx2(x, out) };
                return;
            }
        }
        self.distances_generic(x, out);
    }

    /// Same arithmetic as the generic path, compiled for 4-wide vectors. No FMA, so results
    /// are bit-identical on every x86-64 machine.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn distances_avx2(&self, x: &[f64], out: &mut [f64]) {
        self.distances_generic(x, out);
    }

    #[inline(always)]
    fn distances_generic(&self, x: &[f64], out: &mut [f64]) {
        let dim = self.dim;
        for (blk, chunk) in self.data.chunks_exact(dim * LANES).enumerate() {
            let mut acc = [0.0f64; LANES];
            for (d, lanes) in chunk.chunks_exact(LANES).enumerate() {
                let xd = x[d];
                for l in 0..LANES {
                    let t = xd - lanes[l];
                    acc[l] += t * t;
                }
            }
            let start = blk * LANES;
            let take = LANES.min(self.rows - start);
            for l in 0..take {
                out[start + l] = acc[l].sqrt();
            }
        }
    }
}

fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// An edge of the candidate graph, stored with its source.
#[derive(Debug, Clone, Copy)]
struct Edge {
    sink: u32,
    flow: u32,
    cost: f64,
}

/// Min-heap entry (distance, node); nodes 0..n are sources, n..n+m sinks.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Entry(f64, u32);

impl Eq for Entry {}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        other.0.total_cmp(&self.0).then_with(|| other.1.cmp(&self.1))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// How a node was reached in the current search: through edge `edge` of source `source`.
#[derive(Debug, Clone, Copy, Default)]
struct Pred {
    source: u32,
    edge: u32,
}

/// Dijkstra scratch, reused between augmentations (only touched entries are reset).
struct Search {
    dist: Vec<f64>,
    done: Vec<bool>,
    pred: Vec<Pred>,
    touched: Vec<u32>,
    finalised: Vec<u32>,
    heap: BinaryHeap<Entry>,
}

impl Search {
    /// Node `v` reached at distance `nd` through `pred`.
    #[inline]
    fn relax(&mut self, v: usize, nd: f64, pred: Pred) {
        if nd < self.dist[v] {
            if self.dist[v].is_infinite() {
                self.touched.push(v as u32);
            }
            self.dist[v] = nd;
            self.pred[v] = pred;
            self.heap.push(Entry(nd, v as u32));
        }
    }
}

struct Transport<'a> {
    a: Points<'a>,
    b: Points<'a>,
    /// The sinks again, laid out for fast one-to-all distances.
    b_blocks: ColumnBlocks,
    n: usize,
    m: usize,
    neighbours: usize,
    /// Candidate edges per source.
    edges: Vec<Vec<Edge>>,
    /// Per sink: (source, edge index) of the edges carrying flow (the backward residual edges).
    carrying: Vec<Vec<(u32, u32)>>,
    excess: Vec<u32>,
    deficit: Vec<u32>,
    /// Potentials: sources 0..n, sinks n..n+m; reduced cost c_ij + π_i − π_{n+j}.
    pi: Vec<f64>,
    /// Reduced costs below −tolerance violate dual feasibility; |rc| ≤ tolerance is "tight".
    tolerance: f64,
    /// Sources whose potential fell since the last certificate pass. Potentials of sources only
    /// fall in searches and only rise in re-pricing, and sink potentials never rise, so a pair
    /// checked before can only turn violating through its source falling: only these rows need
    /// the next pass.
    dirty: Vec<bool>,
    search: Search,
    stats: EmdStats,
}

impl<'a> Transport<'a> {
    fn new(a: Points<'a>, b: Points<'a>, neighbours: usize) -> Self {
        let (n, m) = (a.rows(), b.rows());
        let g = gcd(n, m);
        Transport {
            a,
            b,
            b_blocks: ColumnBlocks::new(b),
            n,
            m,
            neighbours,
            edges: vec![Vec::new(); n],
            carrying: vec![Vec::new(); m],
            excess: vec![(m / g) as u32; n],
            deficit: vec![(n / g) as u32; m],
            pi: vec![0.0; n + m],
            tolerance: 0.0,
            dirty: vec![true; n],
            search: Search {
                dist: vec![f64::INFINITY; n + m],
                done: vec![false; n + m],
                pred: vec![Pred::default(); n + m],
                touched: Vec::new(),
                finalised: Vec::new(),
                heap: BinaryHeap::new(),
            },
            stats: EmdStats::default(),
        }
    }

    /// Potentials are sums of O(n) costs; 1e-12 of the cost scale is far above their rounding
    /// and far below the 1e-9 agreement the metric promises.
    fn set_tolerance(&mut self, max_cost: f64) {
        self.tolerance = 1e-12 * max_cost.max(f64::MIN_POSITIVE);
    }

    /// Successive shortest paths and certificate rounds until the plan is proven optimal.
    fn run(&mut self) -> Result<Emd, EmdError> {
        loop {
            self.augment_all();
            self.stats.rounds += 1;
            let violations = self.certificate_violations();
            if violations.is_empty() {
                break;
            }
            if self.stats.rounds >= MAX_ROUNDS {
                return Err(EmdError::NotConverged {
                    rounds: self.stats.rounds,
                });
            }
            self.add_and_reprice(violations);
        }
        let g = gcd(self.n, self.m);
        let total = (self.n / g) as f64 * self.m as f64;
        let cost: f64 = self
            .edges
            .iter()
            .flatten()
            .filter(|e| e.flow > 0)
            .map(|e| e.flow as f64 * e.cost)
            .sum();
        self.stats.edges = self.edges.iter().map(Vec::len).sum();
        Ok(Emd {
            value: cost / total,
            stats: self.stats,
        })
    }

    /// Starts from the potentials of the problem on every other row (sources `coarse`, potentials
    /// `coarse_pi`): sinks take the c-transform of the coarse sources, sources the c-transform of
    /// all sinks, so the start is dual-feasible on the dense problem and close to optimal. Each
    /// source's candidates are its k pairs of least reduced cost (not least distance), plus the
    /// pair that priced each sink, plus the staircase; then greedy flow on tight pairs.
    fn seed_from_coarse(&mut self, coarse: Points<'_>, coarse_pi: &[f64]) {
        let (n, m, k) = (self.n, self.m, self.neighbours.min(self.m));
        let (a, b) = (self.a, self.b);
        let coarse_blocks = ColumnBlocks::new(coarse);
        let sink_prices: Vec<(f64, u32, f64)> = (0..m)
            .into_par_iter()
            .map_init(
                || vec![0.0f64; coarse_pi.len()],
                |costs, j| {
                    coarse_blocks.distances(b.row(j), costs);
                    let mut best = (f64::INFINITY, 0u32, 0.0);
                    for (i, (&c, &p)) in costs.iter().zip(coarse_pi).enumerate() {
                        if c + p < best.0 {
                            best = (c + p, i as u32, c);
                        }
                    }
                    best
                },
            )
            .collect();
        for (j, &(price, _, _)) in sink_prices.iter().enumerate() {
            self.pi[n + j] = price;
        }
        let sink_pi = &self.pi[n..];
        let blocks = &self.b_blocks;
        let rows: Vec<(f64, f64, Vec<Edge>)> = (0..n)
            .into_par_iter()
            .map_init(
                || vec![0.0f64; m],
                |costs, i| {
                    blocks.distances(a.row(i), costs);
                    let mut pi_i = f64::NEG_INFINITY;
                    let mut row_max = 0.0f64;
                    for (&c, &p) in costs.iter().zip(sink_pi) {
                        row_max = row_max.max(c);
                        pi_i = pi_i.max(p - c);
                    }
                    let mut best: Vec<(f64, u32)> = Vec::with_capacity(k + 1);
                    for (j, &c) in costs.iter().enumerate() {
                        insert_smallest(&mut best, k, (c + pi_i - sink_pi[j], j as u32));
                    }
                    let edges = best
                        .iter()
                        .map(|&(_, j)| Edge {
                            sink: j,
                            flow: 0,
                            cost: costs[j as usize],
                        })
                        .collect();
                    (pi_i, row_max, edges)
                },
            )
            .collect();
        let mut max_cost = 0.0f64;
        for (i, (pi_i, row_max, edges)) in rows.into_iter().enumerate() {
            self.pi[i] = pi_i;
            max_cost = max_cost.max(row_max);
            self.edges[i] = edges;
        }
        self.set_tolerance(max_cost);
        for (j, &(_, ci, c)) in sink_prices.iter().enumerate() {
            // Coarse source ci is fine source 2·ci.
            self.edges[2 * ci as usize].push(Edge {
                sink: j as u32,
                flow: 0,
                cost: c,
            });
        }
        self.add_staircase();
        for i in 0..n {
            for e in 0..self.edges[i].len() {
                let edge = self.edges[i][e];
                let j = edge.sink as usize;
                let rc = edge.cost + self.pi[i] - self.pi[n + j];
                let push = self.excess[i].min(self.deficit[j]);
                if push > 0 && rc <= self.tolerance {
                    self.add_flow(i, e, push);
                }
            }
        }
    }

    /// k nearest rows both ways plus the north-west-corner staircase; returns the largest
    /// distance seen (the cost scale).
    fn build_candidates(&mut self) -> f64 {
        let (n, m, k) = (self.n, self.m, self.neighbours);
        let a = self.a;
        let blocks = &self.b_blocks;
        let kr = k.min(m);
        let kc = k.min(n);
        // Column-wise best k: (cost, source) sorted ascending, filled lazily.
        let mut col_best: Vec<Vec<(f64, u32)>> = vec![Vec::with_capacity(kc + 1); m];
        let mut max_cost = 0.0f64;
        let mut block = vec![0.0f64; BLOCK_ROWS.min(n) * m];
        for start in (0..n).step_by(BLOCK_ROWS) {
            let rows = BLOCK_ROWS.min(n - start);
            let costs = &mut block[..rows * m];
            let row_best: Vec<(Vec<(f64, u32)>, f64)> = costs
                .par_chunks_mut(m)
                .enumerate()
                .map(|(r, out)| {
                    blocks.distances(a.row(start + r), out);
                    let mut best: Vec<(f64, u32)> = Vec::with_capacity(kr + 1);
                    let mut row_max = 0.0f64;
                    for (j, &c) in out.iter().enumerate() {
                        row_max = row_max.max(c);
                        insert_smallest(&mut best, kr, (c, j as u32));
                    }
                    (best, row_max)
                })
                .collect();
            for (r, (best, row_max)) in row_best.into_iter().enumerate() {
                let i = start + r;
                max_cost = max_cost.max(row_max);
                self.edges[i].extend(best.iter().map(|&(c, j)| Edge {
                    sink: j,
                    flow: 0,
                    cost: c,
                }));
                let row = &costs[r * m..(r + 1) * m];
                for (j, &c) in row.iter().enumerate() {
                    let list = &mut col_best[j];
                    if list.len() < kc || c < list[list.len() - 1].0 {
                        insert_smallest(list, kc, (c, i as u32));
                    }
                }
            }
        }
        for (j, list) in col_best.iter().enumerate() {
            for &(c, i) in list {
                self.edges[i as usize].push(Edge {
                    sink: j as u32,
                    flow: 0,
                    cost: c,
                });
            }
        }
        self.add_staircase();
        max_cost
    }

    /// Adds the north-west-corner staircase and removes duplicate edges.
    fn add_staircase(&mut self) {
        let (n, m) = (self.n, self.m);
        let (a, b) = (self.a, self.b);
        // North-west corner: walking supplies and demands in order touches n + m − 1 pairs,
        // and those pairs alone carry a feasible plan.
        let (mut i, mut j) = (0usize, 0usize);
        let (mut left_i, mut left_j) = (self.excess[0], self.deficit[0]);
        loop {
            let c = euclidean(a.row(i), b.row(j));
            self.edges[i].push(Edge {
                sink: j as u32,
                flow: 0,
                cost: c,
            });
            let step = left_i.min(left_j);
            left_i -= step;
            left_j -= step;
            if left_i == 0 {
                i += 1;
                if i == n {
                    break;
                }
                left_i = self.excess[i];
            }
            if left_j == 0 {
                j += 1;
                if j == m {
                    break;
                }
                left_j = self.deficit[j];
            }
        }
        for list in &mut self.edges {
            list.sort_unstable_by_key(|e| e.sink);
            list.dedup_by_key(|e| e.sink);
        }
    }

    /// Dual-feasible start: sink potentials = cheapest incoming edge, then greedy flow on the
    /// edges that are tight.
    fn initial_plan(&mut self) {
        let n = self.n;
        let mut cheapest = vec![(f64::INFINITY, u32::MAX, u32::MAX); self.m];
        for (i, list) in self.edges.iter().enumerate() {
            for (e, edge) in list.iter().enumerate() {
                let slot = &mut cheapest[edge.sink as usize];
                if edge.cost < slot.0 {
                    *slot = (edge.cost, i as u32, e as u32);
                }
            }
        }
        for (j, &(c, i, e)) in cheapest.iter().enumerate() {
            self.pi[n + j] = c;
            let (i, e) = (i as usize, e as usize);
            let push = self.excess[i].min(self.deficit[j]);
            if push > 0 {
                self.add_flow(i, e, push);
            }
        }
        // Sources left without flow can lower their potential until an edge becomes tight.
        for i in 0..n {
            if self.edges[i].iter().any(|e| e.flow > 0) {
                continue;
            }
            let (best, e_best) = self.edges[i]
                .iter()
                .enumerate()
                .map(|(e, edge)| (self.pi[n + edge.sink as usize] - edge.cost, e))
                .max_by(|x, y| x.0.total_cmp(&y.0))
                .expect("every source has an edge");
            self.pi[i] = best;
            let j = self.edges[i][e_best].sink as usize;
            let push = self.excess[i].min(self.deficit[j]);
            if push > 0 {
                self.add_flow(i, e_best, push);
            }
        }
    }

    /// Moves `amount` units onto edge `e` of source `i`, taking them from the two ends'
    /// balances.
    fn add_flow(&mut self, i: usize, e: usize, amount: u32) {
        self.shift_flow(i, e, amount as i64);
        let j = self.edges[i][e].sink as usize;
        self.excess[i] -= amount;
        self.deficit[j] -= amount;
    }

    /// Takes `amount` units off edge `e` of source `i`, back into the two ends' balances.
    fn remove_flow(&mut self, i: usize, e: usize, amount: u32) {
        self.shift_flow(i, e, -(amount as i64));
        let j = self.edges[i][e].sink as usize;
        self.excess[i] += amount;
        self.deficit[j] += amount;
    }

    /// Changes the flow on one edge without touching balances (inner edges of a path), keeping
    /// the per-sink list of carrying edges current.
    fn shift_flow(&mut self, i: usize, e: usize, delta: i64) {
        let edge = &mut self.edges[i][e];
        let j = edge.sink as usize;
        let before = edge.flow;
        edge.flow = (before as i64 + delta) as u32;
        if before == 0 && edge.flow > 0 {
            self.carrying[j].push((i as u32, e as u32));
        } else if before > 0 && edge.flow == 0 {
            let list = &mut self.carrying[j];
            let k = list
                .iter()
                .position(|&(s, x)| s as usize == i && x as usize == e)
                .expect("carrying list tracks every edge with flow");
            list.swap_remove(k);
        }
    }

    /// Routes every unit of excess supply by successive shortest paths.
    fn augment_all(&mut self) {
        for s in 0..self.n {
            while self.excess[s] > 0 {
                self.augment_from(s);
            }
        }
    }

    /// One Dijkstra search from source `s` to the nearest sink with deficit, then one
    /// augmentation and the potential update.
    fn augment_from(&mut self, s: usize) {
        let n = self.n;
        self.stats.augmentations += 1;
        self.search.dist[s] = 0.0;
        self.search.touched.push(s as u32);
        self.search.heap.push(Entry(0.0, s as u32));
        let mut target = usize::MAX;
        let mut reach = 0.0;
        while let Some(Entry(d, u)) = self.search.heap.pop() {
            let u = u as usize;
            if self.search.done[u] || d > self.search.dist[u] {
                continue;
            }
            self.search.done[u] = true;
            self.search.finalised.push(u as u32);
            if u >= n {
                let j = u - n;
                if self.deficit[j] > 0 {
                    target = j;
                    reach = d;
                    break;
                }
                // Backward residual edges: sources sending flow into j (reduced cost 0).
                for &(i, e) in &self.carrying[j] {
                    let i = i as usize;
                    let edge = &self.edges[i][e as usize];
                    let rc = -(edge.cost + self.pi[i] - self.pi[u]);
                    self.search.relax(
                        i,
                        d + rc.max(0.0),
                        Pred {
                            source: i as u32,
                            edge: e,
                        },
                    );
                }
            } else {
                let pi_u = self.pi[u];
                for (e, edge) in self.edges[u].iter().enumerate() {
                    let v = n + edge.sink as usize;
                    if self.search.done[v] {
                        continue;
                    }
                    let rc = edge.cost + pi_u - self.pi[v];
                    self.search.relax(
                        v,
                        d + rc.max(0.0),
                        Pred {
                            source: u as u32,
                            edge: e as u32,
                        },
                    );
                }
            }
        }
        assert!(target != usize::MAX, "the staircase edges keep every deficit reachable");
        // Bottleneck: excess at s, deficit at the target, flow on backward edges.
        let mut delta = self.excess[s].min(self.deficit[target]);
        let mut v = n + target;
        while v != s {
            let p = self.search.pred[v];
            if v >= n {
                v = p.source as usize; // forward edge source → sink
            } else {
                let edge = &self.edges[p.source as usize][p.edge as usize];
                delta = delta.min(edge.flow);
                v = n + self.pred_sink_of_backward(v);
            }
        }
        let mut v = n + target;
        while v != s {
            let p = self.search.pred[v];
            if v >= n {
                let i = p.source as usize;
                self.shift_flow(i, p.edge as usize, delta as i64);
                v = i;
            } else {
                let j = self.pred_sink_of_backward(v);
                self.shift_flow(v, p.edge as usize, -(delta as i64));
                v = n + j;
            }
        }
        self.excess[s] -= delta;
        self.deficit[target] -= delta;
        // π += min(d, reach) − reach keeps every residual reduced cost non-negative and makes
        // the path tight; only finalised nodes (d < reach) change.
        for &u in &self.search.finalised {
            let u = u as usize;
            let drop = reach - self.search.dist[u];
            if drop > 0.0 {
                self.pi[u] -= drop;
                if u < n {
                    self.dirty[u] = true;
                }
            }
        }
        for &u in &self.search.touched {
            let u = u as usize;
            self.search.dist[u] = f64::INFINITY;
            self.search.done[u] = false;
        }
        self.search.touched.clear();
        self.search.finalised.clear();
        self.search.heap.clear();
    }

    /// A source reached through a backward edge came from the sink that edge points to.
    fn pred_sink_of_backward(&self, source: usize) -> usize {
        let p = self.search.pred[source];
        self.edges[p.source as usize][p.edge as usize].sink as usize
    }

    /// Every pair (i, j) whose reduced cost is below −tolerance, at most
    /// [`MAX_ADDED_PER_ROW`] per source (most negative first): (source, sink, cost).
    fn certificate_violations(&mut self) -> Vec<(u32, u32, f64)> {
        let (n, m) = (self.n, self.m);
        let (a, pi, tol) = (self.a, &self.pi, self.tolerance);
        let blocks = &self.b_blocks;
        let rows: Vec<usize> = (0..n).filter(|&i| self.dirty[i]).collect();
        self.dirty.fill(false);
        rows.into_par_iter()
            .map_init(
                || vec![0.0f64; m],
                |costs, i| {
                    blocks.distances(a.row(i), costs);
                    let mut worst: Vec<(f64, (u32, f64))> = Vec::new();
                    for (j, &c) in costs.iter().enumerate() {
                        let rc = c + pi[i] - pi[n + j];
                        if rc < -tol {
                            insert_smallest(&mut worst, MAX_ADDED_PER_ROW, (rc, (j as u32, c)));
                        }
                    }
                    worst
                        .into_iter()
                        .map(move |(_, (j, c))| (i as u32, j, c))
                        .collect::<Vec<_>>()
                },
            )
            .flatten_iter()
            .collect()
    }

    /// Adds violating pairs as edges and re-prices their sources: a source's potential rises
    /// to make its most violating edge tight, and flow on its edges that are no longer tight
    /// goes back to excess (complementary slackness again holds everywhere).
    fn add_and_reprice(&mut self, violations: Vec<(u32, u32, f64)>) {
        let n = self.n;
        let mut touched_sources = Vec::new();
        for (i, j, c) in violations {
            let i = i as usize;
            let list = &mut self.edges[i];
            if list.iter().any(|e| e.sink == j) {
                // Already an edge: its reduced cost went negative through rounding only.
                continue;
            }
            list.push(Edge {
                sink: j,
                flow: 0,
                cost: c,
            });
            touched_sources.push(i);
        }
        touched_sources.sort_unstable();
        touched_sources.dedup();
        for i in touched_sources {
            let needed = self.edges[i]
                .iter()
                .map(|e| self.pi[n + e.sink as usize] - e.cost)
                .fold(f64::NEG_INFINITY, f64::max);
            if needed <= self.pi[i] {
                continue;
            }
            self.pi[i] = needed;
            for e in 0..self.edges[i].len() {
                let edge = self.edges[i][e];
                let rc = edge.cost + self.pi[i] - self.pi[n + edge.sink as usize];
                if edge.flow > 0 && rc > self.tolerance {
                    self.remove_flow(i, e, edge.flow);
                }
            }
        }
    }
}

/// Keeps the `k` items with the smallest key (the first field) sorted ascending.
fn insert_smallest<T: Copy>(list: &mut Vec<(f64, T)>, k: usize, item: (f64, T)) {
    if list.len() == k {
        if item.0 >= list[k - 1].0 {
            return;
        }
        list.pop();
    }
    let at = list.partition_point(|x| x.0 <= item.0);
    list.insert(at, item);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn random_points(rng: &mut ChaCha8Rng, rows: usize, dim: usize) -> Vec<f64> {
        (0..rows * dim).map(|_| rng.random_range(-1.0..1.0)).collect()
    }

    /// Minimum over all permutations of the mean matched cost (rows n = m). Partial sums that
    /// already exceed the best complete one are cut (costs are non-negative).
    fn brute_force_assignment(cost: &[Vec<f64>]) -> f64 {
        fn go(cost: &[Vec<f64>], row: usize, used: &mut Vec<bool>, acc: f64, best: &mut f64) {
            if acc >= *best {
                return;
            }
            if row == cost.len() {
                *best = best.min(acc);
                return;
            }
            for j in 0..cost.len() {
                if !used[j] {
                    used[j] = true;
                    go(cost, row + 1, used, acc + cost[row][j], best);
                    used[j] = false;
                }
            }
        }
        let mut best = f64::INFINITY;
        go(cost, 0, &mut vec![false; cost.len()], 0.0, &mut best);
        best / cost.len() as f64
    }

    /// Minimum mean assignment cost by dynamic programming over subsets of columns: best[mask]
    /// is the cheapest way to give the first popcount(mask) rows the columns in mask. Exhaustive
    /// like the permutation search, but fast enough for the replicated unequal cases (N ≤ 12).
    fn subset_dp_assignment(cost: &[Vec<f64>]) -> f64 {
        let n = cost.len();
        let mut best = vec![f64::INFINITY; 1 << n];
        best[0] = 0.0;
        for mask in 0usize..(1 << n) {
            let row = mask.count_ones() as usize;
            if row == n || best[mask].is_infinite() {
                continue;
            }
            for j in (0..n).filter(|j| mask & (1 << j) == 0) {
                let next = mask | (1 << j);
                best[next] = best[next].min(best[mask] + cost[row][j]);
            }
        }
        best[(1 << n) - 1] / n as f64
    }

    /// Brute force for any sizes: replicate rows of A m/g times and of B n/g times, so the
    /// transportation problem becomes an assignment problem of size n·m/g.
    fn brute_force(a: &[f64], b: &[f64], dim: usize) -> f64 {
        let (n, m) = (a.len() / dim, b.len() / dim);
        let g = gcd(n, m);
        let ra: Vec<usize> = (0..n).flat_map(|i| std::iter::repeat_n(i, m / g)).collect();
        let rb: Vec<usize> = (0..m).flat_map(|j| std::iter::repeat_n(j, n / g)).collect();
        let cost: Vec<Vec<f64>> = ra
            .iter()
            .map(|&i| {
                rb.iter()
                    .map(|&j| euclidean(&a[i * dim..(i + 1) * dim], &b[j * dim..(j + 1) * dim]))
                    .collect()
            })
            .collect();
        if n == m {
            brute_force_assignment(&cost)
        } else {
            subset_dp_assignment(&cost)
        }
    }

    #[test]
    fn matches_brute_force_on_small_sets() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for (n, m) in [
            (1, 1),
            (1, 4),
            (4, 1),
            (2, 3),
            (3, 2),
            (5, 5),
            (6, 6),
            (7, 7),
            (4, 6),
            (6, 4),
            (3, 4),
            (3, 6),
            (2, 5),
        ] {
            for trial in 0..20 {
                let dim = 1 + trial % 4;
                let a = random_points(&mut rng, n, dim);
                let b = random_points(&mut rng, m, dim);
                let want = brute_force(&a, &b, dim);
                for k in [1, 2, DEFAULT_NEIGHBOURS] {
                    let got = emd_with(&a, &b, dim, k).unwrap().value;
                    assert!(
                        (got - want).abs() <= 1e-12 * want.max(1.0),
                        "n={n} m={m} dim={dim} k={k}: {got} vs brute force {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn hand_computed_cases() {
        // Identical sets: zero. Shifted by (3, 4): every unit moves 5.
        let a = [0.0, 0.0, 1.0, 0.0, 0.0, 2.0];
        assert_eq!(emd(&a, &a, 2).unwrap(), 0.0);
        let b: Vec<f64> = a.chunks(2).flat_map(|p| [p[0] + 3.0, p[1] + 4.0]).collect();
        assert!((emd(&a, &b, 2).unwrap() - 5.0).abs() < 1e-12);
        // One point against two: mean of the two distances.
        let got = emd(&[0.0], &[1.0, 3.0], 1).unwrap();
        assert!((got - 2.0).abs() < 1e-12);
        // {0, 1} vs {0.5}: 0.5 each way. Order of the rows never matters.
        assert!((emd(&[1.0, 0.0], &[0.5], 1).unwrap() - 0.5).abs() < 1e-12);
        // Crossing is never optimal: {0, 10} vs {1, 11} = 1, not 10.
        assert!((emd(&[0.0, 10.0], &[11.0, 1.0], 1).unwrap() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn certificate_rounds_recover_from_a_poor_graph() {
        // With one neighbour the sparse graph misses optimal pairs; the dense certificate must
        // add them and the answer must equal the one found with many neighbours.
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let a = random_points(&mut rng, 300, 5);
        let b = random_points(&mut rng, 240, 5);
        let poor = emd_with(&a, &b, 5, 1).unwrap();
        let rich = emd_with(&a, &b, 5, 64).unwrap();
        assert!(poor.stats.rounds > 1, "{:?}", poor.stats);
        assert!(
            (poor.value - rich.value).abs() <= 1e-12 * rich.value,
            "{poor:?} {rich:?}"
        );
    }

    #[test]
    fn bad_input_is_an_error() {
        assert_eq!(emd(&[], &[1.0], 1), Err(EmdError::Empty { n: 0, m: 1 }));
        assert_eq!(emd(&[1.0], &[1.0], 0), Err(EmdError::ZeroDimension));
        assert!(matches!(
            emd(&[1.0, 2.0, 3.0], &[1.0, 2.0], 2),
            Err(EmdError::Ragged { set: 'A', .. })
        ));
        let err = emd(&[1.0, 2.0], &[1.0, f64::NAN], 2).unwrap_err();
        assert_eq!(err.to_string(), "set B, row 0, column 1: non-finite value NaN");
    }
}
