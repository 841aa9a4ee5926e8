//! The tracker's step beside a step's dictionary update.
//!
//! The events of a timestep need its vectors, its vocabulary and its verdicts, not the updated
//! dictionary: once a batch is judged they can be worked out. Where the update waits for other
//! processes (a cluster's rounds), a worker that runs the tracker starts its step on a thread of
//! its own as soon as its own part of the update is done, so that the step fills the worker's
//! waits for the others' rows and sums instead of coming after them. Elsewhere the step runs
//! where it is joined. Either way the tracker is stepped once on the same batch: the same
//! events, bit for bit.

use std::thread::{Scope, ScopedJoinHandle};
use std::time::Instant;

use super::{EventBatch, Events};
use crate::model::Topic;

/// A stepped tracker: the tracker after the batch, the batch's topics and the seconds its
/// step took.
pub type Stepped = (Events, Vec<Topic>, f64);

/// The tracker's step on a judged batch, started by [`Self::start`] on a thread of its own
/// (when so made) and taken by [`Self::join`].
pub struct Beside<'scope, 'env> {
    scope: &'scope Scope<'scope, 'env>,
    work: Option<(&'env Events, EventBatch<'env>)>,
    apart: bool,
    running: Option<ScopedJoinHandle<'scope, Stepped>>,
}

impl<'scope, 'env> Beside<'scope, 'env> {
    /// The step of `events` on `batch` (none when `events` is `None`); on a thread of its own
    /// in `scope` once started when `apart`, else where it is joined.
    pub fn new(
        scope: &'scope Scope<'scope, 'env>,
        events: Option<&'env Events>,
        batch: EventBatch<'env>,
        apart: bool,
    ) -> Self {
        Beside {
            scope,
            work: events.map(|ev| (ev, batch)),
            apart,
            running: None,
        }
    }

    /// Starts the step on its own thread, when this one is to run apart and has not started
    /// (a thread that cannot be made leaves the step to [`Self::join`]).
    pub fn start(&mut self) {
        if !self.apart {
            return;
        }
        let Some((ev, batch)) = self.work.take() else {
            return;
        };
        let thread = std::thread::Builder::new().name("novad-events".into());
        match thread.spawn_scoped(self.scope, move || step(ev, &batch)) {
            Ok(handle) => self.running = Some(handle),
            Err(_) => self.work = Some((ev, batch)),
        }
    }

    /// The stepped tracker (`None` without one): the thread's, waited for, or stepped here.
    /// A panic of the thread is resumed here.
    pub fn join(mut self) -> Option<Stepped> {
        if let Some(handle) = self.running.take() {
            return Some(
                handle
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p)),
            );
        }
        self.work.take().map(|(ev, batch)| step(ev, &batch))
    }
}

fn step(ev: &Events, batch: &EventBatch) -> Stepped {
    let t0 = Instant::now();
    let (next, topics) = ev.step(batch);
    (next, topics, t0.elapsed().as_secs_f64())
}
