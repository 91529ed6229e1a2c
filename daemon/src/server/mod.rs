//! The daemon's life: socket → driver → serve → orderly stop.
//!
//! The order is the point. The socket is obtained first, so a second daemon
//! that would share this one's socket refuses before its driver touches
//! anything (the process tier's start-up sweeps leftover runners). The
//! driver starts next. Serving runs until SIGTERM or SIGINT; then accepting
//! stops, open connections close, the driver tears down what must not
//! outlive the daemon, and the socket file goes.
//!
//! Rooms: `socket` (where the listener comes from), `accept` (the loop and
//! the connection cap), `connection` (one peer's transport and calls),
//! `deadline` (the request-deadline clamp), `service` (the calls).

mod accept;
mod connection;
mod deadline;
mod service;
mod socket;
#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;

use crate::access::AccessPolicy;
use crate::config::Config;
use crate::provisioner;
use crate::shutdown::StopSignals;

use self::accept::Limits;
use self::service::DaemonState;

/// Runs the daemon until a stop signal, then stops it in order.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let mut signals = StopSignals::install().context("cannot install the signal handlers")?;

    let obtained = socket::obtain_listener(&config)?;
    let listener = tokio::net::UnixListener::from_std(obtained.listener)
        .with_context(|| format!("cannot serve on {}", config.socket.display()))?;
    // Kept until the end: dropping it removes the socket file we created,
    // on the error paths below as well.
    let socket_file = obtained.socket_file;

    let driver = provisioner::select(&config).await?;
    let daemon = Arc::new(DaemonState {
        driver: driver.clone(),
        access: AccessPolicy::new(config.access.clone(), nix::unistd::geteuid().as_raw()),
        started: Instant::now(),
        socket_path: config.socket.clone(),
        state_dir: config.state_dir.clone(),
    });
    let limits = Limits {
        max_connections: config.max_connections,
        max_requests_per_connection: config.max_requests_per_connection,
    };
    // The socket accepts and the driver is ready: this is where a systemd
    // READY=1 notification belongs.
    tracing::info!(
        socket = %config.socket.display(),
        driver = driver.name(),
        state_dir = %config.state_dir.display(),
        config_file = ?config.source_file,
        pid = std::process::id(),
        "sandboxd is serving"
    );

    let (signal, connections) = accept::serve_until(listener, daemon, limits, signals.next()).await;
    tracing::info!(
        signal = signal.name(),
        "stopping: no longer accepting connections (send the signal again to exit at once)"
    );
    signals.exit_on_next();

    connections.close().await;
    tracing::info!(driver = driver.name(), "shutting the driver down");
    driver.shutdown().await;
    drop(socket_file);
    tracing::info!("sandboxd stopped");
    Ok(())
}
