//! The opt-in Prometheus endpoint (`metrics_listen`, off by default):
//! what the daemon counts, in the ecosystem's names (`sandboxd_` prefix,
//! `_total` counters, `_seconds` histograms), served as OpenMetrics text
//! on `GET /metrics` (see [`serve`]).
//!
//! Where each figure comes from, so each is counted in one place:
//! - call latencies and ensure/deprovision outcomes: the server's service
//!   layer ([`Metrics::call`], [`Metrics::ensured`], [`Metrics::deprovisioned`]),
//!   whatever the tier;
//! - exits by reason (runners' and commands'), idle and lifetime stops:
//!   the daemon's event stream
//!   ([`follow`]), where every tier announces every exit with its reason
//!   (pauses will be counted there too, once a paused event exists);
//! - sandboxes by tier, scope and state: the driver's `list`, at scrape
//!   time (a gauge kept in between would drift from the runtime).
//!
//! With no `metrics_listen` there is no [`Metrics`] at all: a call then
//! costs one `None` check more.

pub mod follow;
pub mod serve;

use std::time::Duration;

use crate::access::Call;
use crate::census::Census;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use sandboxd_protocol::{
    DeprovisionReport, EnsureReport, Event, EventKind, ExitReason, SandboxError,
};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    method: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    method: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SandboxLabels {
    tier: &'static str,
    scope: &'static str,
    state: &'static str,
}

/// A histogram of call latencies: 100 µs to about 13 s, doubling.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}

/// Every metric the daemon serves, and the registry that encodes them.
pub struct Metrics {
    registry: Registry,
    tier: &'static str,
    /// One histogram per [`Call`], in [`Call::ALL`]'s order, taken from
    /// the family once at start: a call's recording is then an index and
    /// an observe, with no label hashing or map lookup.
    calls: Vec<Histogram>,
    ensures: Family<OutcomeLabels, Counter>,
    deprovisions: Family<OutcomeLabels, Counter>,
    spawn_failures: Family<KindLabels, Counter>,
    exits: Family<ReasonLabels, Counter>,
    command_exits: Family<ReasonLabels, Counter>,
    lifecycle_stops: Family<ReasonLabels, Counter>,
    /// Pauses (`pause`, or `on_idle = "pause"`), from the `paused` events.
    pauses: Counter,
    sandboxes: Family<SandboxLabels, Gauge>,
    missed_events: Counter,
}

impl Metrics {
    /// The metrics of a daemon whose driver is `tier`.
    pub fn new(tier: &'static str) -> Metrics {
        let mut registry = Registry::with_prefix("sandboxd");
        let calls = Family::new_with_constructor(latency_histogram as fn() -> Histogram);
        registry.register_with_unit(
            "call_duration",
            "How long each call of the socket's service took, by method (refused calls not counted)",
            Unit::Seconds,
            calls.clone(),
        );
        let calls: Family<MethodLabels, Histogram, fn() -> Histogram> = calls;
        let calls = Call::ALL
            .iter()
            .map(|call| {
                calls.get_or_create_owned(&MethodLabels {
                    method: call.name(),
                })
            })
            .collect();
        let ensures = Family::default();
        registry.register(
            "ensures",
            "Ensures (ensure, ensure_fenced, create_connect) by outcome: created, running (the fast path), or the error's kind",
            ensures.clone(),
        );
        let deprovisions = Family::default();
        registry.register(
            "deprovisions",
            "Deprovisions by outcome: removed, absent (nothing to tear down), or the error's kind",
            deprovisions.clone(),
        );
        let spawn_failures = Family::default();
        registry.register(
            "spawn_failures",
            "Ensures that failed to start a runner (errors other than the caller's: internal, unavailable, failed_precondition), by kind",
            spawn_failures.clone(),
        );
        let exits = Family::default();
        registry.register(
            "exits",
            "Runner exits by reason, from the event stream",
            exits.clone(),
        );
        let command_exits = Family::default();
        registry.register(
            "command_exits",
            "Commands run in sandboxes (exec) that ended, by the outcome of their proof, from the event stream",
            command_exits.clone(),
        );
        let lifecycle_stops = Family::default();
        registry.register(
            "lifecycle_stops",
            "Runners the daemon stopped for idleness (reason idle) or at the end of their lifetime (reason lifetime)",
            lifecycle_stops.clone(),
        );
        let pauses = Counter::default();
        registry.register(
            "pauses",
            "Sandboxes paused (by a pause call or on_idle = \"pause\"), from the event stream",
            pauses.clone(),
        );
        let sandboxes = Family::default();
        registry.register(
            "sandboxes",
            "Sandboxes by tier, scope and state, as the driver lists them at scrape time",
            sandboxes.clone(),
        );
        let missed_events = Counter::default();
        registry.register(
            "missed_events",
            "Events the metrics follower fell too far behind to count (the ring wrapped)",
            missed_events.clone(),
        );
        Metrics {
            registry,
            tier,
            calls,
            ensures,
            deprovisions,
            spawn_failures,
            exits,
            command_exits,
            lifecycle_stops,
            pauses,
            sandboxes,
            missed_events,
        }
    }

    /// One `call` took `elapsed`.
    pub fn call(&self, call: Call, elapsed: Duration) {
        if let Some(histogram) = self.calls.get(call as usize) {
            histogram.observe(elapsed.as_secs_f64());
        }
    }

    /// An ensure-like call of `method` answered `result`.
    pub fn ensured(&self, method: &'static str, result: &Result<EnsureReport, SandboxError>) {
        let outcome = match result {
            Ok(report) if report.created => "created",
            Ok(_) => "running",
            Err(error) => {
                if spawn_failure(error) {
                    self.spawn_failures
                        .get_or_create(&KindLabels { kind: error.kind() })
                        .inc();
                }
                error.kind()
            }
        };
        self.ensures
            .get_or_create(&OutcomeLabels { method, outcome })
            .inc();
    }

    /// A deprovision-like call of `method` answered `result`.
    pub fn deprovisioned(
        &self,
        method: &'static str,
        result: &Result<DeprovisionReport, SandboxError>,
    ) {
        let outcome = match result {
            Ok(report) if report.was_present => "removed",
            Ok(_) => "absent",
            Err(error) => error.kind(),
        };
        self.deprovisions
            .get_or_create(&OutcomeLabels { method, outcome })
            .inc();
    }

    /// Counts what one event of the stream says.
    pub fn event(&self, event: &Event) {
        if event.kind == EventKind::Paused {
            self.pauses.inc();
            return;
        }
        if event.kind == EventKind::CommandExited {
            let reason = event
                .exit
                .as_ref()
                .map_or(ExitReason::Unknown, |exit| exit.reason);
            self.command_exits
                .get_or_create(&ReasonLabels {
                    reason: reason.as_str(),
                })
                .inc();
            return;
        }
        if event.kind != EventKind::Exited {
            return;
        }
        let reason = event
            .exit
            .as_ref()
            .map_or(ExitReason::Unknown, |exit| exit.reason);
        self.exits
            .get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            })
            .inc();
        if matches!(reason, ExitReason::Idle | ExitReason::Lifetime) {
            self.lifecycle_stops
                .get_or_create(&ReasonLabels {
                    reason: reason.as_str(),
                })
                .inc();
        }
    }

    /// `count` events were missed by the follower.
    pub fn missed(&self, count: u64) {
        self.missed_events.inc_by(count);
    }

    /// The exposition text, with the sandbox gauge set from `census`
    /// (`None`: the driver could not count them; the gauge is left out
    /// rather than shown as zero).
    pub fn encode(&self, census: Option<&Census>) -> String {
        self.sandboxes.clear();
        for (scope, state, count) in census.into_iter().flat_map(Census::present) {
            self.sandboxes
                .get_or_create(&SandboxLabels {
                    tier: self.tier,
                    scope: scope.as_str(),
                    state: state.as_str(),
                })
                .set(count as i64);
        }
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// True for an ensure error that is the runtime's failure to start a
/// runner, not the caller's mistake (a bad id, a refused peer, a stale
/// fence, an unknown sandbox).
fn spawn_failure(error: &SandboxError) -> bool {
    matches!(
        error,
        SandboxError::Internal(_)
            | SandboxError::Unavailable(_)
            | SandboxError::FailedPrecondition(_)
    )
}

#[cfg(test)]
mod tests {
    use sandboxd_protocol::{ExitInfo, ProbeState, Scope};

    use super::*;

    fn report(created: bool) -> EnsureReport {
        EnsureReport {
            state: ProbeState::Running,
            created,
            generation: 1,
            pid: Some(1),
            differs: Vec::new(),
            uid: String::new(),
        }
    }

    fn exited(reason: ExitReason) -> Event {
        let mut exit = ExitInfo::from_facts(None, None, 0, false);
        exit.reason = reason;
        Event {
            cursor: sandboxd_protocol::EventCursor {
                boot_id: String::new(),
                seq: 1,
            },
            at_unix_ms: 0,
            kind: EventKind::Exited,
            scope: Scope::Session,
            id: "s".to_string(),
            name: String::new(),
            uid: String::new(),
            generation: 1,
            exit: Some(exit),
            command: None,
        }
    }

    #[test]
    fn every_call_has_its_histogram_at_its_own_index() {
        let metrics = Metrics::new("fake");
        for (index, call) in Call::ALL.iter().copied().enumerate() {
            assert_eq!(call as usize, index, "{call:?}");
            metrics.call(call, Duration::from_millis(1));
        }
        let text = metrics.encode(None);
        for call in Call::ALL {
            let line = format!(
                "sandboxd_call_duration_seconds_count{{method=\"{}\"}} 1",
                call.name()
            );
            assert!(text.lines().any(|got| got == line), "no {line}:\n{text}");
        }
    }

    #[test]
    fn the_exposition_names_follow_the_conventions() {
        let metrics = Metrics::new("local-process");
        metrics.call(Call::Ensure, Duration::from_millis(3));
        metrics.ensured("ensure", &Ok(report(true)));
        metrics.ensured("ensure", &Ok(report(false)));
        metrics.ensured(
            "ensure",
            &Err(SandboxError::Internal("spawn failed".to_string())),
        );
        metrics.ensured(
            "ensure",
            &Err(SandboxError::InvalidArgument("bad id".to_string())),
        );
        metrics.deprovisioned(
            "deprovision",
            &Ok(DeprovisionReport {
                was_present: true,
                forced: false,
            }),
        );
        metrics.event(&exited(ExitReason::Idle));
        metrics.event(&exited(ExitReason::Exited { code: 0 }));
        metrics.event(&Event {
            kind: EventKind::Paused,
            exit: None,
            command: None,
            ..exited(ExitReason::Idle)
        });
        metrics.event(&Event {
            kind: EventKind::CommandExited,
            ..exited(ExitReason::TimedOut { limit_ms: 5 })
        });
        let mut census = Census::default();
        census.add(Scope::Session, ProbeState::Running);
        let text = metrics.encode(Some(&census));
        for line in [
            "sandboxd_call_duration_seconds_count{method=\"ensure\"} 1",
            "sandboxd_ensures_total{method=\"ensure\",outcome=\"created\"} 1",
            "sandboxd_ensures_total{method=\"ensure\",outcome=\"running\"} 1",
            "sandboxd_ensures_total{method=\"ensure\",outcome=\"internal\"} 1",
            "sandboxd_ensures_total{method=\"ensure\",outcome=\"invalid_argument\"} 1",
            "sandboxd_spawn_failures_total{kind=\"internal\"} 1",
            "sandboxd_deprovisions_total{method=\"deprovision\",outcome=\"removed\"} 1",
            "sandboxd_exits_total{reason=\"idle\"} 1",
            "sandboxd_exits_total{reason=\"exited\"} 1",
            "sandboxd_lifecycle_stops_total{reason=\"idle\"} 1",
            "sandboxd_pauses_total 1",
            "sandboxd_command_exits_total{reason=\"timed-out\"} 1",
            "sandboxd_sandboxes{tier=\"local-process\",scope=\"session\",state=\"running\"} 1",
        ] {
            assert!(text.lines().any(|got| got == line), "no {line} in:\n{text}");
        }
        assert!(
            !text.contains("spawn_failures_total{kind=\"invalid_argument\"}"),
            "a caller's mistake is no spawn failure:\n{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
        // The gauge is the listing of this scrape, not a sum of scrapes.
        let text = metrics.encode(None);
        assert!(!text.contains("sandboxd_sandboxes{"), "{text}");
    }
}
