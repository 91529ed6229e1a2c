//! `sandboxd`: flags → config → run. Nothing else lives here.

mod access;
mod config;
mod drivers;
mod egress;
mod logging;
mod provisioner;
mod server;
mod shutdown;
mod slice;
mod systemd;

use std::process::ExitCode;

use clap::Parser;

/// The sandbox daemon: owns isolated agent runners and serves ensure,
/// deprovision and probe calls on a local Unix socket.
#[derive(Debug, Parser)]
#[command(name = "sandboxd", version, about)]
struct Cli {
    #[command(flatten)]
    flags: config::Flags,
}

fn main() -> ExitCode {
    // The process tier's group reaper is this same binary, re-executed.
    if std::env::args_os().nth(1).as_deref() == Some(drivers::local_process::reaper::ARG.as_ref()) {
        return drivers::local_process::reaper::run_reaper_process();
    }
    // First, while the process has one thread: it edits the environment.
    let handoff = match systemd::Handoff::take() {
        Ok(handoff) => handoff,
        Err(error) => {
            eprintln!("sandboxd: {error}");
            return ExitCode::FAILURE;
        }
    };
    let cli = Cli::parse();
    let config = match config::Config::load(&cli.flags) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("sandboxd: {error:#}");
            return ExitCode::from(2);
        }
    };
    logging::init(config.log_level.as_deref());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .on_thread_start(slice::request_short_slice)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("sandboxd: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(server::run(config, handoff)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            eprintln!("sandboxd: {error:#}");
            ExitCode::FAILURE
        }
    }
}
