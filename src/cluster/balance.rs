//! The burdens of the deal measured: each worker's CPU per step steers how much of the work
//! dealt without stealing (the search's documents, the update's rows) it gets ([`Burdens`]).
//!
//! The coding and the tokenising are work-stolen and even themselves out in time; the search
//! and the rows are dealt once, so a worker with more other work than its hand allows for
//! (the leader's records, commit and next file, the finder's refresh plan, another program
//! on its machine) is the busiest. Fixed parts for that work fit one number of processes and
//! one machine: with four processes sharing two cores, the leader and the finder came out
//! lightest by 0.005–0.010 CPU s of ~0.14 s a step, with two level. Measured on top of them,
//! the parts follow the workers: every worker measures its process's CPU over each cycle from
//! one step's start to the next and over its dealt work within it, replicas report theirs in
//! the coding round ([`super::protocol::Reply::Shards`]), and the leader moves each worker's
//! burden on top of the fixed parts by how far its CPU was above or below the workers' mean
//! (integral control, [`Balance`]) and sends the burdens with the next step it sends. Only
//! cycles spent under a backlog steer it (the next step went out ahead, at the end of the
//! cycle's): there the busiest worker's CPU bounds the throughput, while a cluster that waits
//! for each file is bound by the leader's path through the step, and its workers' CPU says
//! nothing of the backlog's. Which worker does what changes no output, so the measurement,
//! however noisy, changes no verdict and no digest.

use std::cell::Cell;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use novad_models::l1::replicate::MemorySearch;

use crate::cpu::process_cpu;

use super::deal::{Burdens, BURDEN_UNIT};

/// A worker's CPU over one cycle of the cluster: from a step's start to the next one's (all of
/// its process's threads), and the part of it spent on its dealt work (its search and its
/// rows). Microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Load {
    pub cycle_us: u64,
    pub dealt_us: u64,
}

/// One worker's measurement of its cycles.
#[derive(Debug, Default)]
pub(super) struct Meter {
    /// The process CPU at the start of the current cycle (none before the first).
    start: Option<Duration>,
    /// The dealt work's CPU in the current cycle.
    dealt: Duration,
}

impl Meter {
    /// A step starts: the load of the cycle that ends here (none for the first, or when the
    /// clock cannot be read), and a new cycle begins.
    pub fn cycle(&mut self) -> Option<Load> {
        let now = process_cpu();
        let load = match (self.start, now) {
            (Some(s), Some(n)) => Some(Load {
                cycle_us: n.saturating_sub(s).as_micros() as u64,
                dealt_us: self.dealt.as_micros() as u64,
            }),
            _ => None,
        };
        self.start = now;
        self.dealt = Duration::ZERO;
        load
    }

    /// A new cycle from now, the CPU since the cycle's start not counted (work that is not
    /// a usual step's: loading the model into every replica).
    pub fn restart(&mut self) {
        self.start = process_cpu();
        self.dealt = Duration::ZERO;
    }

    /// Count `cpu` as dealt work of the current cycle.
    pub fn add_dealt(&mut self, cpu: Duration) {
        self.dealt += cpu;
    }
}

/// `search` with its process CPU added to `cpu` and its wall seconds to `wall`: a worker's own
/// search of the memory, dealt work.
pub(super) fn metered_search<'s>(
    search: &'s MemorySearch<'s>,
    cpu: &'s Cell<Duration>,
    wall: &'s Cell<f64>,
) -> Box<MemorySearch<'s>> {
    Box::new(move |at| {
        let t = Instant::now();
        let (near, took) = cpu_of(|| search(at));
        wall.set(wall.get() + t.elapsed().as_secs_f64());
        cpu.set(cpu.get() + took);
        near
    })
}

/// `f()` and the process CPU it took.
pub(super) fn cpu_of<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t0 = process_cpu();
    let v = f();
    let took = match (t0, process_cpu()) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => Duration::ZERO,
    };
    (v, took)
}

/// How far one cycle's imbalance moves the burdens: the share of a worker's CPU above the
/// workers' mean, in parts of the dealt work, that its burden grows by. A cycle is measured
/// during the next step and its correction goes out with the step after that, so a
/// correction lands two steps late: with a change of hands moving a worker's CPU by c times
/// as much (c ≤ 1, less where the stolen coding takes some of it up), the imbalance follows
/// xₖ₊₂ = xₖ₊₁ − g·c·xₖ, which settles without ringing for g·c ≤ 1/4 and rings ever longer
/// towards g·c = 1. At 0.5 each swing is 0.71 of the one before where the coding takes up
/// none of a change, and the imbalance halves each step where it takes up half.
const GAIN: f64 = 0.5;

/// The most one cycle moves a burden, in parts of the dealt work: a cycle out of the
/// ordinary (the first after a start, a page cache miss on a file) moves it this much at
/// most.
const STEP: f64 = 0.25;

/// How far past the level where its hand is empty a burden may go (parts of the dealt work).
const SLACK: f64 = 0.05;

/// The level every worker's burden and hand add up to when the dealt work (1) is shared out
/// over `burdens` (water-filling: Σ max(0, level − bᵢ) = 1): a worker whose burden reaches it
/// gets no dealt work. `burdens` not empty.
fn empty_hand(burdens: &[f64]) -> f64 {
    let mut b = burdens.to_vec();
    b.sort_by(f64::total_cmp);
    let mut sum = 0.0;
    for (i, &x) in b.iter().enumerate() {
        // the level if the first i + 1 workers share the work
        sum += x;
        let level = (1.0 + sum) / (i + 1) as f64;
        if b.get(i + 1).is_none_or(|&next| level <= next) {
            return level;
        }
    }
    unreachable!("the last worker always closes the loop")
}

/// The leader's burdens, steered by every cycle's measured imbalance (integral control):
/// a worker whose CPU per cycle is above the workers' mean gets a larger burden, so a lighter
/// hand of the search and the rows, until every worker's CPU is level — whatever its other
/// work is, and however much of a change of hands the stolen coding takes up.
#[derive(Debug, Default)]
pub(super) struct Balance {
    /// Each worker's burden, in parts of the dealt work (none before the first cycle
    /// measured).
    burdens: Vec<f64>,
}

impl Balance {
    /// Fold in one cycle's loads, by worker (the leader first); `fixed` gives the fixed
    /// parts of the search as burdens of that many workers, which the measured burdens come
    /// on top of. The burdens start at none (the fixed parts alone) when nothing was measured
    /// yet or the number of workers changed. A cycle where some worker's load is missing, or
    /// with no dealt work, is skipped.
    pub fn observe(&mut self, loads: &[Option<Load>], fixed: impl FnOnce(usize) -> Vec<f64>) {
        let Some(loads) = loads.iter().copied().collect::<Option<Vec<Load>>>() else {
            return;
        };
        let secs = |us: u64| us as f64 * 1e-6;
        let dealt: f64 = loads.iter().map(|l| secs(l.dealt_us)).sum();
        if loads.is_empty() || dealt <= 0.0 {
            return;
        }
        if self.burdens.len() != loads.len() {
            self.burdens = vec![0.0; loads.len()];
        }
        let mean = loads.iter().map(|l| secs(l.cycle_us)).sum::<f64>() / loads.len() as f64;
        for (b, l) in self.burdens.iter_mut().zip(&loads) {
            let off = (secs(l.cycle_us) - mean) / dealt;
            *b += (GAIN * off).clamp(-STEP, STEP);
        }
        // a burden past the level where a worker's hand of the search is empty relieves it no
        // further: cut there, so that it does not wind up while the worker stays busier anyway
        let mut whole = fixed(loads.len());
        whole.resize(loads.len(), 0.0);
        for (w, b) in whole.iter_mut().zip(&self.burdens) {
            *w += b;
        }
        let least = whole.iter().copied().fold(f64::INFINITY, f64::min);
        let cut = empty_hand(&whole.iter().map(|w| w - least).collect::<Vec<_>>()) + SLACK;
        for (b, w) in self.burdens.iter_mut().zip(&whole) {
            *b -= (w - least - cut).max(0.0);
        }
        let least = self.burdens.iter().copied().fold(f64::INFINITY, f64::min);
        for b in &mut self.burdens {
            *b -= least;
        }
    }

    /// The burdens for the next step sent; none (the fixed parts alone) until a cycle was
    /// measured.
    pub fn burdens(&self) -> Burdens {
        if self.burdens.is_empty() {
            return Burdens(None);
        }
        let unit = BURDEN_UNIT as f64;
        Burdens(Some(
            self.burdens
                .iter()
                .map(|&b| (b * unit).round() as u32)
                .collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use novad_models::l1::dictionary::LOGICAL_SHARDS;

    use super::super::deal::{fixed_burdens, my_shards};

    /// Workers with planted other work (seconds a step) and a search of `total` seconds dealt
    /// by the measured burdens: the loop from the fixed parts, each step's loads measured as
    /// the hands make them, with ±`noise` of jitter.
    fn run(other: &[f64], total: f64, noise: f64, steps: usize) -> Vec<f64> {
        let peers = other.len();
        let mut balance = Balance::default();
        // the burdens each step is dealt with: the first two with the fixed parts
        let mut used = vec![Burdens(None), Burdens(None)];
        let mut cpu = vec![0.0; peers];
        for step in 0..steps {
            let burdens = used[step].clone();
            let loads: Vec<Option<Load>> = (0..peers)
                .map(|w| {
                    let hand = my_shards(w, peers, &burdens).len() as f64;
                    let dealt = total * hand / LOGICAL_SHARDS as f64;
                    // a deterministic jitter, uniform in ±noise
                    let h = ((step * 64 + w + 1) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    let jitter = noise * (2.0 * (h >> 11) as f64 / (1u64 << 53) as f64 - 1.0);
                    cpu[w] = other[w] + dealt;
                    Some(Load {
                        cycle_us: ((other[w] + jitter + dealt) * 1e6) as u64,
                        dealt_us: (dealt * 1e6) as u64,
                    })
                })
                .collect();
            // as on the leader: observed in the next step's coding round, sent with the step
            // after it
            balance.observe(&loads, fixed_burdens);
            used.push(balance.burdens());
        }
        cpu
    }

    /// With planted other work the measured burdens bring every worker's CPU level within
    /// two search shards' cost (hands are whole shards, so the burdens dither about the
    /// level), from fixed parts that leave them up to 10 % apart; with noisy measurements
    /// within the noise's width more.
    #[test]
    fn measured_burdens_level_the_workers() {
        let total = 0.12;
        let shard = total / LOGICAL_SHARDS as f64;
        for other in [
            vec![0.10, 0.09, 0.09, 0.10],
            vec![0.13, 0.09, 0.09, 0.095],
            vec![0.05, 0.06],
            vec![0.09, 0.07, 0.08],
        ] {
            let fixed = run(&other, total, 0.0, 1);
            let level = run(&other, total, 0.0, 30);
            let noise = 0.002;
            let noisy = run(&other, total, noise, 30);
            let spread = |c: &[f64]| {
                c.iter().copied().fold(f64::MIN, f64::max)
                    - c.iter().copied().fold(f64::MAX, f64::min)
            };
            assert!(spread(&level) <= 2.0 * shard, "{other:?}: {level:?}");
            assert!(
                spread(&noisy) <= 2.0 * noise + 2.0 * shard,
                "{other:?}: {noisy:?}"
            );
            assert!(spread(&level) < spread(&fixed), "{other:?}: {fixed:?}");
        }
    }

    /// Nothing is measured until every worker reported a cycle with dealt work: the fixed
    /// parts stand; then each cycle moves the burdens on top of them towards the busier
    /// workers, a cycle out of the ordinary at most [`STEP`]; a change in the number of
    /// workers starts them anew; they are relative to the least busy worker, and stop where a
    /// worker's hand is empty.
    #[test]
    fn burdens_start_at_the_fixed_parts_and_follow_the_imbalance() {
        let load = |cycle_us, dealt_us| Some(Load { cycle_us, dealt_us });
        let unit = BURDEN_UNIT as f64;
        let measured = |b: &Balance| match b.burdens() {
            Burdens(Some(v)) => v,
            Burdens(None) => panic!("measured"),
        };
        let mut b = Balance::default();
        b.observe(&[load(100, 10), None], fixed_burdens);
        b.observe(&[load(100, 0), load(100, 0)], fixed_burdens);
        assert_eq!(b.burdens(), Burdens(None));
        // level under the fixed parts: nothing on top of them
        let level = [load(1000, 100), load(1000, 100), load(1000, 100)];
        b.observe(&level, fixed_burdens);
        assert_eq!(b.burdens(), Burdens(Some(vec![0, 0, 0])));
        // a cycle out of the ordinary on a replica moves it up by STEP and the others down
        // by STEP, 2 STEP apart, but no further than where its hand is empty (the leader's
        // fixed half above the other replica's none: with 0.6, a level of 0.55)
        b.observe(
            &[load(1000, 100), load(90_000, 100), load(1000, 100)],
            fixed_burdens,
        );
        let v = measured(&b);
        assert_eq!(v, vec![0, (2.0 * STEP * unit).round() as u32, 0]);
        b.observe(
            &[load(1000, 100), load(90_000, 100), load(1000, 100)],
            fixed_burdens,
        );
        let cut = empty_hand(&[0.5, 1.0, 0.0]) + SLACK;
        assert_eq!(measured(&b), vec![0, (cut * unit).round() as u32, 0]);
        // against the leader at the mean, the replica above it gains, the one below loses
        let mut b = Balance::default();
        b.observe(&level, fixed_burdens);
        let before = measured(&b);
        b.observe(
            &[load(1000, 300), load(1100, 300), load(900, 300)],
            fixed_burdens,
        );
        let w = measured(&b);
        let from_leader = |x: &[u32], i: usize| x[i] as i64 - x[0] as i64;
        assert!(
            from_leader(&w, 1) > from_leader(&before, 1),
            "{before:?} → {w:?}"
        );
        assert!(
            from_leader(&w, 2) < from_leader(&before, 2),
            "{before:?} → {w:?}"
        );
        // two workers, anew; a replica busier whatever its hand stops where its hand is empty
        // (with the leader's fixed half, a burden of one and a half of the dealt work), and
        // drops at once when lighter
        for _ in 0..200 {
            b.observe(&[load(100, 10), load(10_000, 10)], fixed_burdens);
        }
        let cut = ((1.5 + SLACK) * unit).round() as u32;
        assert_eq!(measured(&b), vec![0, cut]);
        b.observe(&[load(100, 10), load(90, 10)], fixed_burdens);
        // by 2 × GAIN × a quarter of the dealt work (the replica below the mean, the leader
        // above)
        let dropped = cut as f64 - measured(&b)[1] as f64;
        assert!(
            (dropped - 2.0 * GAIN * 0.25 * unit).abs() <= 1.0,
            "{:?}",
            b.burdens()
        );
    }

    /// The level where a worker's hand empties: the dealt work shared out so that burden and
    /// hand add up alike, over the workers below it.
    #[test]
    fn the_level_of_an_empty_hand_shares_the_dealt_work_out() {
        assert_eq!(empty_hand(&[0.0]), 1.0);
        assert_eq!(empty_hand(&[0.0, 0.0]), 0.5);
        assert_eq!(empty_hand(&[0.0, 0.5]), 0.75);
        assert_eq!(empty_hand(&[2.0, 0.0]), 1.0);
        assert_eq!(empty_hand(&[0.0, 0.0, 3.0, 0.3]), 1.3 / 3.0);
        for b in [[0.0, 0.2, 0.9], [0.1, 0.0, 0.05], [0.0, 1.0, 2.0]] {
            let level = empty_hand(&b);
            let shared: f64 = b.iter().map(|&x| (level - x).max(0.0)).sum();
            assert!((shared - 1.0).abs() < 1e-12, "{b:?}: {level}");
        }
    }

    /// The process clock moves with work done, and a cycle's load counts the dealt work
    /// added to it.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_meter_measures_the_cycle_and_its_dealt_work() {
        let mut m = Meter::default();
        assert_eq!(m.cycle(), None);
        let ((), took) = cpu_of(|| {
            std::hint::black_box((0..3_000_000u64).fold(0u64, |a, i| a ^ i.wrapping_mul(i)));
        });
        assert!(took > Duration::ZERO);
        m.add_dealt(took);
        let load = m.cycle().expect("a second cycle is measured");
        assert_eq!(load.dealt_us, took.as_micros() as u64);
        assert!(load.cycle_us >= load.dealt_us, "{load:?}");
    }
}
