//! `sandboxd`: flags → config → run. Nothing else lives here.

mod access;
mod calls;
mod census;
mod child_output;
mod commands;
mod config;
mod connection_limits;
mod digest;
mod drivers;
mod duration;
mod egress;
mod events;
mod fd_limit;
mod foreign_peer;
mod helper_signals;
mod holders;
mod incarnation;
mod instance;
mod logging;
mod malloc_arenas;
mod man_page;
mod memory_trim;
mod metrics;
mod peer_origin;
mod provisioner;
mod sandbox_key;
mod server;
mod shutdown;
mod slice;
mod started_command;
mod systemd;
#[cfg(test)]
mod test_dir;
mod unix_time;

use std::process::ExitCode;

use clap::Parser;

/// The environment variables the daemon reads, for `--help`. Flags beat
/// them, and they beat the configuration file.
const ENVIRONMENT: &str = "\
Environment:
  SANDBOX_PROVISIONER_TYPE          the isolation tier (as --driver)
  STIGMER_SANDBOX_RUNNER_COMMAND    the process tier's runner (as --runner-command)
  STIGMER_SANDBOX_RUNNER_IMAGE      the container tiers' runner image (runner_image)
  STIGMER_SANDBOX_BACKEND_ENDPOINT  given to runners as STIGMER_BACKEND_ENDPOINT (backend_endpoint)
  STIGMER_SANDBOX_TEMPORAL_ADDRESS  given to runners as TEMPORAL_SERVICE_ADDRESS (temporal_address)
  DOCKER_HOST                       the docker tier's engine when [docker] host is unset
  RUST_LOG                          the log filter; beats log_level
  PATH                              where a runner_command without '/' is looked up
  NOTIFY_SOCKET, WATCHDOG_USEC, WATCHDOG_PID, LISTEN_FDS, LISTEN_PID, LISTEN_FDNAMES,
  JOURNAL_STREAM                    set by systemd: readiness, watchdog, socket activation, journald

The configuration file (default /etc/stigmer/sandboxd.toml) documents every key.";

/// The sandbox daemon: owns isolated agent runners and serves ensure,
/// deprovision and probe calls on a local Unix socket.
#[derive(Debug, Parser)]
#[command(name = "sandboxd", version, about, after_help = ENVIRONMENT)]
struct Cli {
    #[command(flatten)]
    flags: config::Flags,
    /// Print a shell completion script and exit (systemd/install.sh uses it).
    #[arg(long, hide = true, value_name = "SHELL")]
    print_completions: Option<clap_complete::Shell>,
    /// Print the man page (roff) and exit (systemd/install.sh uses it).
    #[arg(long, hide = true)]
    print_man_page: bool,
}

/// `--print-completions` and `--print-man-page`: generated from the clap
/// definitions (`clap_complete`, `clap_mangen`), so they cannot drift.
fn print_generated(cli: &Cli) -> Option<ExitCode> {
    use clap::CommandFactory;
    use std::io::Write;
    let mut out = Vec::new();
    if let Some(shell) = cli.print_completions {
        clap_complete::generate(shell, &mut Cli::command(), "sandboxd", &mut out);
    } else if cli.print_man_page {
        match man_page::render(Cli::command()) {
            Ok(page) => out = page.into_bytes(),
            Err(error) => {
                eprintln!("sandboxd: cannot render the man page: {error}");
                return Some(ExitCode::FAILURE);
            }
        }
    } else {
        return None;
    }
    match std::io::stdout().write_all(&out) {
        Ok(()) => Some(ExitCode::SUCCESS),
        Err(error) => {
            eprintln!("sandboxd: cannot write: {error}");
            Some(ExitCode::FAILURE)
        }
    }
}

fn main() -> ExitCode {
    malloc_arenas::cap_at_cpus();
    malloc_arenas::keep_large_buffers();
    // The process tier's group reaper is this same binary, re-executed.
    if std::env::args_os().nth(1).as_deref() == Some(drivers::local_process::reaper::ARG.as_ref()) {
        return drivers::local_process::reaper::run_reaper_process();
    }
    // So is the helper that loads sandbox namespaces' nftables tables.
    if std::env::args_os().nth(1).as_deref() == Some(egress::nft_helper::ARG.as_ref()) {
        return egress::nft_helper::run_helper_process();
    }
    // A sandbox's init, a prepared view's holder and a parked runner are
    // `sandboxd-init`'s roles, which this binary plays too where no
    // `sandboxd-init` of its build stands next to it.
    if let Some(code) = std::env::args_os()
        .nth(1)
        .and_then(|arg| sandboxd_init::run_role(&arg))
    {
        return code;
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
    if let Some(code) = print_generated(&cli) {
        return code;
    }
    // Still one thread, and few descriptors open: the low numbers runners'
    // clones use instead of the daemon's whole table (see `fd_band`).
    drivers::local_process::reserve_fd_band();
    let config = match config::Config::load(&cli.flags) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("sandboxd: {error:#}");
            return ExitCode::from(2);
        }
    };
    logging::init(config.log_level.as_deref());
    config.instance.clone().install();
    holders::describe_this_daemon(format!(
        "socket {} state_dir {} instance {}",
        config.socket.display(),
        config.state_dir.display(),
        config.instance.display_name()
    ));
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
            // Once, through the log (stderr, or the journal under systemd).
            tracing::error!("cannot serve: {error:#}");
            ExitCode::FAILURE
        }
    }
}
