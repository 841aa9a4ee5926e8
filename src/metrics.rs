//! The process's Prometheus metrics, served as OpenMetrics text by `GET /metrics` (see
//! [`crate::http`]): what was ingested and how fast, what waits in the inbox, what was
//! rejected, how HTTP clients were answered and how webhook deliveries fare.
//!
//! One registry per process ([`METRICS`]); the daemon's code records through the small
//! functions here, and [`encode`] writes every metric (prefix `novad_`).

use std::sync::LazyLock;

use prometheus_client::encoding::text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

/// The content type of [`encode`]'s text (OpenMetrics).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The upper bounds (seconds) of the timestep duration histogram's buckets: a small batch
/// takes milliseconds, a large one with a full model up to a minute.
pub const TIMESTEP_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0,
];

/// Every metric of the process and the registry that encodes them (the metrics share their
/// values with the registry's copies).
pub struct Metrics {
    registry: Registry,
    documents: Counter,
    novel: Counter,
    timesteps: Counter,
    timestep_seconds: Histogram,
    timestep: Gauge,
    inbox_waiting: Gauge,
    rejected: Counter,
    store_bytes: Gauge,
    http_responses: Family<[(&'static str, u16); 1], Counter>,
    webhook_deliveries: Family<[(&'static str, &'static str); 1], Counter>,
    webhook_backlog: Gauge,
    webhook_parked: Gauge,
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::with_prefix("novad");
        let m = Metrics {
            documents: Counter::default(),
            novel: Counter::default(),
            timesteps: Counter::default(),
            timestep_seconds: Histogram::new(TIMESTEP_BUCKETS),
            timestep: Gauge::default(),
            inbox_waiting: Gauge::default(),
            rejected: Counter::default(),
            store_bytes: Gauge::default(),
            http_responses: Family::default(),
            webhook_deliveries: Family::default(),
            webhook_backlog: Gauge::default(),
            webhook_parked: Gauge::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register(
            "documents",
            "Documents in committed timesteps",
            m.documents.clone(),
        );
        r.register(
            "novel_documents",
            "Documents found novel in committed timesteps",
            m.novel.clone(),
        );
        r.register("timesteps", "Committed timesteps", m.timesteps.clone());
        r.register_with_unit(
            "timestep",
            "Time to ingest one timestep, from reading its batch to its commit",
            Unit::Seconds,
            m.timestep_seconds.clone(),
        );
        r.register(
            "timestep",
            "The last committed timestep",
            m.timestep.clone(),
        );
        r.register(
            "inbox_files_waiting",
            "Batch files in the inbox at its last scan",
            m.inbox_waiting.clone(),
        );
        r.register(
            "rejected_files",
            "Batch files moved to rejected/",
            m.rejected.clone(),
        );
        r.register(
            "store_bytes",
            "Size of the store directory's files, at the scrape",
            m.store_bytes.clone(),
        );
        r.register(
            "http_responses",
            "HTTP answers by status code, refusals included",
            m.http_responses.clone(),
        );
        r.register(
            "webhook_deliveries",
            "Webhook deliveries by result (delivered, failed)",
            m.webhook_deliveries.clone(),
        );
        r.register(
            "webhook_backlog",
            "Webhook events waiting for delivery",
            m.webhook_backlog.clone(),
        );
        r.register(
            "webhook_parked",
            "Webhook events parked after repeated failures",
            m.webhook_parked.clone(),
        );
        r.register(
            "build",
            "The daemon's version",
            Info::new([("version", env!("CARGO_PKG_VERSION"))]),
        );
        Metrics { registry, ..m }
    }
}

/// The process's metrics.
pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

fn gauge_value(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A timestep was committed: `timestep`, with `docs` documents of which `novel` novel, in
/// `seconds`.
pub fn timestep_committed(timestep: u64, docs: u64, novel: u64, seconds: f64) {
    let m = &*METRICS;
    m.documents.inc_by(docs);
    m.novel.inc_by(novel);
    m.timesteps.inc();
    m.timestep_seconds.observe(seconds);
    m.timestep.set(gauge_value(timestep));
}

/// A batch file was moved to `rejected/`.
pub fn file_rejected() {
    METRICS.rejected.inc();
}

/// The inbox's last scan found `files` batch files.
pub fn set_inbox_waiting(files: u64) {
    METRICS.inbox_waiting.set(gauge_value(files));
}

/// The store directory's files take `bytes`.
pub fn set_store_bytes(bytes: u64) {
    METRICS.store_bytes.set(gauge_value(bytes));
}

/// An HTTP request was answered with status `code`.
pub fn http_response(code: u16) {
    METRICS
        .http_responses
        .get_or_create(&[("code", code)])
        .inc();
}

/// A webhook event was delivered.
pub fn webhook_delivered() {
    METRICS
        .webhook_deliveries
        .get_or_create(&[("result", "delivered")])
        .inc();
}

/// A webhook delivery failed.
pub fn webhook_failed() {
    METRICS
        .webhook_deliveries
        .get_or_create(&[("result", "failed")])
        .inc();
}

/// `waiting` webhook events wait for delivery, `parked` are parked.
pub fn set_webhook_backlog(waiting: u64, parked: u64) {
    METRICS.webhook_backlog.set(gauge_value(waiting));
    METRICS.webhook_parked.set(gauge_value(parked));
}

/// Every metric as OpenMetrics text (ends with `# EOF`).
pub fn encode() -> String {
    let mut out = String::new();
    // writing into a String cannot fail; an encoder error would leave what was written
    if let Err(e) = text::encode(&mut out, &METRICS.registry) {
        tracing::warn!(error = %e, "metrics could not be encoded");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str, line_start: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(line_start))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no `{line_start}` in\n{text}"))
    }

    #[test]
    fn recorded_values_are_encoded_under_their_names() {
        // the registry is the process's: other tests may record too, so compare differences
        let before = encode();
        timestep_committed(7, 10, 3, 0.02);
        file_rejected();
        http_response(401);
        webhook_delivered();
        webhook_failed();
        webhook_failed();
        set_webhook_backlog(4, 2);
        set_inbox_waiting(5);
        set_store_bytes(1234);
        let after = encode();
        let diff = |name: &str| value(&after, name) - value(&before, name);
        assert_eq!(diff("novad_documents_total "), 10.0);
        assert_eq!(diff("novad_novel_documents_total "), 3.0);
        assert_eq!(diff("novad_timesteps_total "), 1.0);
        assert_eq!(diff("novad_timestep_seconds_count "), 1.0);
        assert_eq!(diff("novad_timestep_seconds_bucket{le=\"0.025\"} "), 1.0);
        assert_eq!(diff("novad_timestep_seconds_bucket{le=\"0.01\"} "), 0.0);
        assert_eq!(diff("novad_rejected_files_total "), 1.0);
        assert_eq!(value(&after, "novad_timestep "), 7.0);
        assert_eq!(value(&after, "novad_inbox_files_waiting "), 5.0);
        assert_eq!(value(&after, "novad_store_bytes "), 1234.0);
        assert_eq!(value(&after, "novad_webhook_backlog "), 4.0);
        assert_eq!(value(&after, "novad_webhook_parked "), 2.0);
        assert!(value(&after, "novad_http_responses_total{code=\"401\"} ") >= 1.0);
        assert!(
            value(
                &after,
                "novad_webhook_deliveries_total{result=\"delivered\"} "
            ) >= 1.0
        );
        assert!(value(&after, "novad_webhook_deliveries_total{result=\"failed\"} ") >= 2.0);
        let version = format!(
            "novad_build_info{{version=\"{}\"}} ",
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(value(&after, &version), 1.0);
        assert!(after.ends_with("# EOF\n"), "{after}");
    }
}
