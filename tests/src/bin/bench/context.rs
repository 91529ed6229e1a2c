//! What every row of one run shares: the options and counts, the machine
//! as found at the start, the binaries, the temporary directory with the
//! runner copied into it, and the raw spawner of the baselines.

use std::path::PathBuf;
use std::time::Instant;

use crate::machine::{self, Machine};
use crate::options::{Counts, Options};
use crate::raw::RawSpawner;
use crate::setup::{self, BenchDir, Binaries};

/// One run's setting, made once before any row is measured.
pub struct Bench<'a> {
    pub options: &'a Options,
    pub counts: Counts,
    pub started: Instant,
    pub machine: Machine,
    pub load_start: [f64; 3],
    pub date: String,
    pub binaries: Binaries,
    pub dir: BenchDir,
    pub runner: PathBuf,
    pub spawner: RawSpawner,
    /// Who the runners run as, in words for the report.
    pub runner_user: String,
}

impl<'a> Bench<'a> {
    /// Reads the machine, finds the binaries, makes the directory and the
    /// raw spawner, and says on stderr what the run is about to measure.
    pub fn set_up(options: &'a Options, counts: Counts, started: Instant) -> anyhow::Result<Self> {
        let machine = Machine::read();
        let load_start = machine::load_average();
        let date = machine::utc_now();
        let mut binaries = Binaries::locate(options.quick)?;
        if let Some(daemon) = &options.daemon {
            binaries.sandboxd = daemon.clone();
        }
        let identity = setup::runner_identity()?;
        let dir = BenchDir::create(options.keep)?;
        let runner = setup::runner_copy(dir.path(), &binaries)?;
        let spawner = RawSpawner::new(
            runner.clone(),
            identity.as_ref().map(|(uid, gid, _)| (*uid, *gid)),
            dir.path().join("raw"),
        )?;
        // The raw baseline's user; a root daemon gives each sandbox a uid of
        // its own from `runner_uid_range`, which costs the same.
        let runner_user = identity.as_ref().map_or_else(
            || format!("{} (no switch)", machine.user),
            |i| {
                format!(
                    "{} in the raw baseline, a uid per sandbox in the daemon",
                    i.2
                )
            },
        );
        eprintln!(
            "bench: {} mode; {} × {}; kernel {}; load {:.2}; daemon as {}, runners as {}",
            if options.quick { "quick" } else { "full" },
            machine.nproc,
            machine.cpu_model,
            machine.kernel,
            load_start[0],
            machine.user,
            runner_user
        );
        Ok(Bench {
            options,
            counts,
            started,
            machine,
            load_start,
            date,
            binaries,
            dir,
            runner,
            spawner,
            runner_user,
        })
    }

    /// `quick` or `full`, as the report and the JSON line say.
    pub fn mode(&self) -> &'static str {
        mode(self.options)
    }

    /// Logs a step to stderr, with the time since the start.
    pub fn step(&self, what: &str) {
        step(self.started, what);
    }
}

/// `quick` or `full`, as the report and the JSON line say.
pub fn mode(options: &Options) -> &'static str {
    if options.quick {
        "quick"
    } else {
        "full"
    }
}

/// Logs a step to stderr, with the time since the start.
pub fn step(started: Instant, what: &str) {
    eprintln!("bench: [{:6.1}s] {what}", started.elapsed().as_secs_f64());
}
