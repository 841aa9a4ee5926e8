//! The evaluation loop: one pass over the timesteps, every method fed the same batch.
//!
//! [`run`] resolves what the run uses ([`setup`]), vectorises each timestep once
//! ([`batch`]), runs every method on it ([`methods`]), evaluates the scores against the labels
//! ([`evaluate`]) and writes the outputs ([`output`]).

mod batch;
mod evaluate;
mod methods;
mod output;
mod setup;

use std::collections::HashSet;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use super::pooled::Pool;
use super::results::{EvalSummary, TimestepResult};
use super::vectorize::StreamVectorizer;
use super::{EvalArgs, EvalError, EventJudge, Method};
use batch::StepBatch;
use methods::Methods;
use novad_models::text::SparseDoc;
use setup::Setup;

/// Round every score to a multiple of `step` (no-op for `step ≤ 0`), so float noise counts as
/// a tie in the AUC.
pub fn round_scores(scores: &[f64], step: f64) -> Vec<f64> {
    if step <= 0.0 {
        return scores.to_vec();
    }
    scores.iter().map(|s| (s / step).round() * step).collect()
}

/// What the pass collects besides the timestep records: every document's pooled scores, the
/// scores.jsonl rows, and the past the daemon's topics are judged against as events.
pub(super) struct Sink {
    pub pool: Pool,
    pub dump: String,
    /// When the `hybrid` method runs.
    pub events: Option<EventJudge>,
}

/// Seconds since `t`.
fn secs(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

/// Run an evaluation and write its outputs. See the module documentation of [`super`].
pub fn run(args: &EvalArgs) -> Result<EvalSummary, EvalError> {
    let wall = Instant::now();
    let setup = Setup::resolve(args)?;
    let pb = progress_bar(args, &setup);
    let mut methods = Methods::new(args, &setup)?;
    let mut sink = Sink {
        pool: Pool::default(),
        dump: String::new(),
        events: setup
            .has(Method::Hybrid)
            .then(|| EventJudge::new(setup.params.tokenizer())),
    };
    let timesteps = pass(args, &setup, &mut methods, &mut sink, &pb)?;
    pb.finish_and_clear();
    let (ostc, hybrid) = methods.into_params();
    output::finish(args, setup, ostc, hybrid, timesteps, &sink, wall)
}

/// The progress bar of the pass (hidden with `--quiet`): one tick per method and timestep,
/// plus one per evaluated timestep when the emerging topics run.
fn progress_bar(args: &EvalArgs, setup: &Setup) -> ProgressBar {
    let n_steps = setup.stream.timesteps.len();
    let topics_on = setup.topic_params.is_some();
    let pb = if args.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(
            (n_steps * setup.methods.len() + topics_on as usize * (n_steps - 1)) as u64,
        )
    };
    pb.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb
}

/// One pass over the stream: each timestep vectorised once, every method run on it, then
/// evaluated (its documents pooled and dumped into `sink`). Returns every timestep's record.
fn pass(
    args: &EvalArgs,
    setup: &Setup,
    methods: &mut Methods,
    sink: &mut Sink,
    pb: &ProgressBar,
) -> Result<Vec<TimestepResult>, EvalError> {
    let mut vz = StreamVectorizer::new(&setup.params.text, setup.params.tokenizer);
    // every non-empty document so far (P_[t]), ids in the current vocabulary
    let mut seen: Vec<SparseDoc> = Vec::new();
    let boot_labels: HashSet<String> = setup.stream.timesteps[0]
        .docs
        .iter()
        .map(|d| d.label.clone())
        .collect();
    let mut results: Vec<TimestepResult> = Vec::with_capacity(setup.stream.timesteps.len());
    for (t, ts) in setup.stream.timesteps.iter().enumerate() {
        let b = StepBatch::new(t, ts, &mut vz, &mut seen)?;
        let scores = methods.step(&b, setup, pb)?;
        results.push(evaluate::timestep(
            &b,
            scores,
            setup,
            args,
            &boot_labels,
            pb,
            sink,
        )?);
    }
    Ok(results)
}
