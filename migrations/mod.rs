//! Store format migrations, one file per version step, applied in order when a store is opened
//! (after a backup snapshot of the old store is written next to it).
//!
//! Adding a format change: bump `FORMAT_VERSION` in `src/store/schema.rs`, add
//! `NNNN_name.rs` here with `pub fn apply(db: &sled::Db) -> Result<(), String>` that rewrites
//! a store of format N into format N + 1, and list it in [`MIGRATIONS`]. A migration must be
//! idempotent (a crash during a migration reruns it from the backup's state or a partial one).

#[path = "0001_timestep_index.rs"]
mod m0001_timestep_index;
#[path = "0002_model_kind_topic_fields.rs"]
mod m0002_model_kind_topic_fields;
#[path = "0003_topic_lambda.rs"]
mod m0003_topic_lambda;
#[path = "0004_file_ranges.rs"]
mod m0004_file_ranges;

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
];
