//! The store format of novad: its current layout ([`schema`]: trees, keys, records) and the
//! migrations that bring an older store to it, one module per format step, applied in order by
//! the daemon's store when it opens a store (after a backup snapshot of the old store is
//! written next to it). Layout and migrations live together so that a format change is one
//! change in one place.
//!
//! Adding a format change: bump [`schema::FORMAT_VERSION`], add `mNNNN_name.rs` with
//! `pub fn apply(db: &sled::Db) -> Result<(), String>` that rewrites a store of format N into
//! format N + 1, and list it in [`MIGRATIONS`]. A migration must be idempotent (a crash during
//! a migration reruns it from the backup's state or a partial one).

pub mod schema;
pub mod summary;

mod m0001_timestep_index;
mod m0002_model_kind_topic_fields;
mod m0003_topic_lambda;
mod m0004_file_ranges;
mod m0005_one_layout_named_params;
mod m0006_hybrid_explanations;
mod m0007_timestep_summaries;
mod m0008_calibrated_hybrid;
mod m0009_event_topics;
mod m0010_outbox;

/// One version step.
pub struct Migration {
    /// Format the migration reads; it writes `from + 1`.
    pub from: u32,
    pub name: &'static str,
    pub apply: fn(&sled::Db) -> Result<(), String>,
}

/// Every migration, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        from: 1,
        name: "0001_timestep_index",
        apply: m0001_timestep_index::apply,
    },
    Migration {
        from: 2,
        name: "0002_model_kind_topic_fields",
        apply: m0002_model_kind_topic_fields::apply,
    },
    Migration {
        from: 3,
        name: "0003_topic_lambda",
        apply: m0003_topic_lambda::apply,
    },
    Migration {
        from: 4,
        name: "0004_file_ranges",
        apply: m0004_file_ranges::apply,
    },
    Migration {
        from: 5,
        name: "0005_one_layout_named_params",
        apply: m0005_one_layout_named_params::apply,
    },
    Migration {
        from: 6,
        name: "0006_hybrid_explanations",
        apply: m0006_hybrid_explanations::apply,
    },
    Migration {
        from: 7,
        name: "0007_timestep_summaries",
        apply: m0007_timestep_summaries::apply,
    },
    Migration {
        from: 8,
        name: "0008_calibrated_hybrid",
        apply: m0008_calibrated_hybrid::apply,
    },
    Migration {
        from: 9,
        name: "0009_event_topics",
        apply: m0009_event_topics::apply,
    },
    Migration {
        from: 10,
        name: "0010_outbox",
        apply: m0010_outbox::apply,
    },
];
