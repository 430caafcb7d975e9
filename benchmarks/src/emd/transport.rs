//! The transportation solver behind [`super::emd`]: the candidate graph, successive shortest
//! paths with potentials, and the dense certificate pass (steps 1-3 of the module docs).

use super::distance::{ColumnBlocks, euclidean};
use super::{Emd, EmdError, EmdStats, MAX_ROUNDS, Points};
use rayon::prelude::*;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Violating pairs added per source and round (the most violating first).
const MAX_ADDED_PER_ROW: usize = 64;
/// Rows per block in the neighbour pass (bounds the scratch matrix to block × m values).
const BLOCK_ROWS: usize = 256;

pub(super) fn gcd(mut a: usize, mut b: usize) -> usize {
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

pub(super) struct Transport<'a> {
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
    pub(super) pi: Vec<f64>,
    /// Reduced costs below −tolerance violate dual feasibility; |rc| ≤ tolerance is "tight".
    tolerance: f64,
    /// Sources whose potential fell since the last certificate pass. Potentials of sources only
    /// fall in searches and only rise in re-pricing, and sink potentials never rise, so a pair
    /// checked before can only turn violating through its source falling: only these rows need
    /// the next pass.
    dirty: Vec<bool>,
    search: Search,
    pub(super) stats: EmdStats,
}

impl<'a> Transport<'a> {
    pub(super) fn new(a: Points<'a>, b: Points<'a>, neighbours: usize) -> Self {
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
    pub(super) fn set_tolerance(&mut self, max_cost: f64) {
        self.tolerance = 1e-12 * max_cost.max(f64::MIN_POSITIVE);
    }

    /// Successive shortest paths and certificate rounds until the plan is proven optimal.
    pub(super) fn run(&mut self) -> Result<Emd, EmdError> {
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
    pub(super) fn seed_from_coarse(&mut self, coarse: Points<'_>, coarse_pi: &[f64]) {
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
    pub(super) fn build_candidates(&mut self) -> f64 {
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
    pub(super) fn initial_plan(&mut self) {
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
