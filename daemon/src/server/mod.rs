//! The daemon's life: socket → driver → serve → orderly stop.
//!
//! The order is the point. The socket is obtained first (passed by systemd,
//! or bound here), so a second daemon that would share this one's socket
//! refuses before its driver touches anything (the process tier's start-up
//! sweeps leftover runners). The driver starts next. Serving runs until
//! SIGTERM or SIGINT, with systemd told READY=1 once it does; then systemd
//! hears STOPPING=1, accepting stops, open connections close, the driver
//! tears down what must not outlive the daemon, and a socket file this
//! daemon bound goes (one systemd passed stays: it is the socket unit's).
//!
//! Rooms: `socket` (where the listener comes from), `accept` (the loop and
//! the connection cap), `connection` (one peer's transport and calls),
//! `deadline` (the request-deadline clamp), `service` (the calls),
//! `supervision` (what systemd is told, and when), `timer_floor` (a tick
//! that spares every request's deadline a wake-up of the I/O thread).

mod accept;
mod admission;
mod chunk_turns;
mod command_calls;
mod connection;
mod deadline;
mod differences;
mod file_calls;
mod read_calls;
mod sandbox_calls;
mod self_wake;
mod service;
mod socket;
mod supervision;
#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;
mod timed_stream;
mod timer_floor;
mod usage;
mod warn_budget;

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;

use crate::access::AccessPolicy;
use crate::config::Config;
use crate::shutdown::StopSignals;
use crate::systemd::Handoff;

use self::accept::Limits;

/// How long a stop waits, after the tiers' shutdown, for the commands it
/// ended to have their proofs (see `CommandTable::settled`).
const COMMANDS_SETTLE: std::time::Duration = std::time::Duration::from_secs(3);
use self::service::DaemonState;
use self::supervision::Supervision;

/// Runs the daemon until a stop signal, then stops it in order.
pub async fn run(config: Config, handoff: Handoff) -> anyhow::Result<()> {
    let mut signals = StopSignals::install().context("cannot install the signal handlers")?;
    let supervision = Supervision::new(handoff.notifier, handoff.watchdog);

    let obtained = socket::obtain_listener(&config, handoff.listener)?;
    let socket_path = obtained.path;
    let listener = tokio::net::UnixListener::from_std(obtained.listener)
        .with_context(|| format!("cannot serve on {}", socket_path.display()))?;
    // Kept until the end: dropping it removes the socket file we created,
    // on the error paths below as well.
    let socket_file = obtained.socket_file;

    // Bound before the driver starts, so a bad or taken address stops
    // the daemon before anything is touched.
    let metrics_listener = config
        .metrics_listen
        .map(crate::metrics::serve::bind)
        .transpose()?;
    // The address bound (a port 0 in the config is the kernel's choice).
    let metrics_address = metrics_listener
        .as_ref()
        .and_then(|listener| listener.local_addr().ok());
    let events = crate::events::EventHub::new(config.events_ring);
    let driver = crate::drivers::select::select(&config, events.clone()).await?;
    let metrics = metrics_listener.map(|listener| {
        let metrics = Arc::new(crate::metrics::Metrics::new(driver.name()));
        tokio::spawn(crate::metrics::follow::follow(
            events.clone(),
            metrics.clone(),
        ));
        tokio::spawn(crate::metrics::serve::serve(
            listener,
            metrics.clone(),
            driver.clone(),
        ));
        tracing::info!(address = ?metrics_address, "serving metrics on GET /metrics");
        metrics
    });
    let daemon = Arc::new(DaemonState {
        driver: driver.clone(),
        access: AccessPolicy::new(config.access.clone(), nix::unistd::geteuid().as_raw()),
        started: Instant::now(),
        socket_path: socket_path.clone(),
        state_dir: config.state_dir.clone(),
        warn_budget: Default::default(),
        differences: Default::default(),
        commands: crate::commands::CommandTable::new(config.commands.clone(), events.clone()),
        events,
        fence_locks: crate::drivers::key_lock::KeyLocks::new(),
        runner_endpoints: sandboxd_protocol::RunnerEndpoints {
            backend_endpoint: config.backend_endpoint.clone(),
            temporal_address: config.temporal_address.clone(),
        },
        metrics,
        metrics_address,
        stop_grace: config.stop_grace,
    });
    crate::memory_trim::start();
    let daemon_commands = daemon.commands.clone();
    // Before the socket serves, so a caller never misses a command an
    // earlier daemon started.
    daemon_commands.readopt(driver.recovered_commands().await);
    let limits = Limits::from_config(&config);
    tracing::info!(
        socket = %socket_path.display(),
        driver = driver.name(),
        instance = config.instance.display_name(),
        state_dir = %config.state_dir.display(),
        config_file = %config
            .source_file
            .as_deref()
            .map_or_else(|| "-".to_string(), |path| path.display().to_string()),
        pid = std::process::id(),
        "sandboxd is serving"
    );
    driver.serving();

    // The socket accepts and the driver is ready: the main loop, polled by
    // the accept loop, tells systemd READY=1 on its first poll.
    let main_loop = supervision.main_loop(daemon.clone(), signals.next());
    let (signal, connections) = accept::serve_until(listener, daemon, limits, main_loop).await;
    supervision.stopping(signal.name());
    tracing::info!(
        signal = signal.name(),
        "stopping: no longer accepting connections (send the signal again to exit at once)"
    );
    signals.exit_on_next();

    connections.close().await;
    tracing::info!(driver = driver.name(), "shutting the driver down");
    driver.shutdown().await;
    daemon_commands.settled(COMMANDS_SETTLE).await;
    drop(socket_file);
    tracing::info!("sandboxd stopped");
    Ok(())
}
