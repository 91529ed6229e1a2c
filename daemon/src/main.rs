//! `sandboxd`: flags → config → run. Nothing else lives here.

mod access;
mod config;
mod drivers;
mod provisioner;
mod server;
mod shutdown;

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
    let cli = Cli::parse();
    let config = match config::Config::load(&cli.flags) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("sandboxd: {error:#}");
            return ExitCode::from(2);
        }
    };
    init_logging(config.log_level.as_deref());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("sandboxd: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(server::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            eprintln!("sandboxd: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// `RUST_LOG` wins; otherwise the config's `log_level`; otherwise `info`.
/// tarpc's per-request spans are kept at `warn` unless asked for: at
/// `info` they repeat trace ids and deadlines on every line.
fn init_logging(config_level: Option<&str>) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new(format!("tarpc=warn,{}", config_level.unwrap_or("info")))
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}
