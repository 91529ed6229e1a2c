//! A timer always due within [`TICK`], so that a request's deadline never
//! has to wake the runtime's I/O thread.
//!
//! tarpc arms a timer for every request's deadline (its in-flight
//! `DelayQueue`). tokio wakes the thread parked in `epoll_wait` — a write
//! to the driver's eventfd, one system call — whenever a new timer is due
//! before the one that thread is sleeping towards. With nothing else due
//! soon, that is every request: probe and the fast-path ensure each paid
//! one `write` more once the output rework removed the
//! once-a-second log-cap check that used to keep a timer near (see
//! BENCHMARKS.md, "Probe and the fast path: system calls per call"). With
//! this tick, a deadline of at least [`TICK`] (every client's default) is
//! later than the next wake-up already planned, and needs no wake.
//!
//! The cost is one wake-up per [`TICK`] while idle, as the daemon had.

use std::convert::Infallible;
use std::time::Duration;

use tokio::time::MissedTickBehavior;

/// How often the runtime's timer fires when nothing else is due.
pub const TICK: Duration = Duration::from_secs(1);

/// Ticks forever, doing nothing else.
pub async fn run() -> Infallible {
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Skip);
    loop {
        ticks.tick().await;
    }
}
