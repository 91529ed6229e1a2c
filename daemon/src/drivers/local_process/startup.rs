//! The process tier's start, before the daemon serves: its state
//! directory claimed, what an earlier daemon left swept, the runners'
//! settings, the egress rules in force, then the driver with its watchers.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;

use super::cgroup::Containment;
use super::launch::spawn::RunnerSettings;
use super::launch::spawner::Spawner;
use super::launcher::Launcher;
use super::ledger::{self, Ledger};
use super::reaper::GroupReaper;
use super::trash::Trash;
use super::users::identity::RunnerIdentity;
use super::users::uid_pool::{self, SandboxUids};
use super::{
    cgroup, deferred, deprovision, disk_limit, files, isolation, launch, lifecycle, limit_env,
    logs, prepared, state_dir, teardowns, users, workspaces, Inner, LocalProcessDriver,
};
use crate::config::Config;
use crate::drivers::key_lock::KeyLocks;
use crate::egress::{self, Egress};
use crate::events::EventHub;
use crate::sandbox_key::SandboxKey;
use sandboxd_protocol::{EventKind, IsolationFeature};

impl LocalProcessDriver {
    /// Prepares the state directory, sweeps what an earlier instance left,
    /// and starts the group reaper. Runs before the daemon serves.
    pub async fn start(
        config: &Config,
        events: Arc<EventHub>,
    ) -> anyhow::Result<LocalProcessDriver> {
        let host = Host::set_up(config, &events).await?;
        let reaper = GroupReaper::start(
            &host.state_lock,
            &host.dirs.sandboxes,
            host.containment.tree().map(|tree| tree.sandboxes()),
        )?;
        let runner_logs = Arc::new(logs::RunnerLogs::new(
            host.dirs.logs.clone(),
            host.dirs.spares.clone(),
            config.runner_log_max_size,
            host.deferred.clone(),
        ));
        let (settings, view_problem) = runner_settings(config, &host).await?;
        log_readiness(&settings, &host.containment);
        let egress = establish_egress(config, &host.containment).await?;
        let isolation = isolation_now(config, &host, &settings, &egress, view_problem.as_deref());
        let inner = Arc::new(Inner {
            settings,
            stop_grace: config.stop_grace,
            records: Mutex::new(HashMap::new()),
            key_locks: KeyLocks::new(),
            ledger: host.ledger,
            trash: host.trash,
            teardowns: teardowns::Teardowns::default(),
            reaper,
            containment: host.containment,
            spawner: Spawner::start()?,
            logs: runner_logs,
            catalog: host.catalog,
            workspace_ttl: config.workspace_ttl,
            lifecycle: config.lifecycle,
            uids: host.uids,
            prepared: std::sync::OnceLock::new(),
            pool_not_started: std::sync::OnceLock::new(),
            staging: host.dirs.prepared.clone(),
            disk_limit: host.disk_limit,
            egress,
            stopping: AtomicBool::new(false),
            isolation_mode: config.isolation,
            isolation,
            view_problem,
            stop_remover: Mutex::new(None),
            events,
            tar_downloads: files::Downloads::default(),
            tar_uploads: files::Uploads::default(),
            _state_lock: host.state_lock,
        });
        inner.start_prepared(&config.pool);
        start_watchers(&inner, config);
        Ok(LocalProcessDriver { inner })
    }
}

/// What the driver is built on, once what an earlier daemon left is gone.
struct Host {
    identity: RunnerIdentity,
    dirs: state_dir::StateDirs,
    /// Held for the daemon's life: one daemon per state directory.
    state_lock: nix::fcntl::Flock<std::fs::File>,
    containment: Containment,
    ledger: Ledger,
    uids: Option<Arc<SandboxUids>>,
    disk_limit: disk_limit::DiskLimit,
    catalog: workspaces::Catalog,
    deferred: Arc<deferred::Deferred>,
    trash: Trash,
}

impl Host {
    /// The state directory claimed, the cgroups set up, and everything an
    /// earlier daemon left swept: its runners, cgroups, uids' claims,
    /// trash and prepared workspaces (its lost runners announced).
    async fn set_up(config: &Config, events: &EventHub) -> anyhow::Result<Host> {
        let identity = RunnerIdentity::resolve(
            config.run_as.as_deref(),
            config.runner_uid_range.as_deref(),
            config.allow_root_runners,
        )?;
        let dirs = state_dir::StateDirs::prepare(&config.state_dir)?;
        let state_lock = state_dir::lock(&config.state_dir)?;
        if let Some((uid, gid)) = identity
            .privileges(identity.uid_range().map(|range| range.first))
            .user
        {
            state_dir::check_reachable(&dirs.sandboxes, uid, gid, &identity.display)?;
        }
        // What runners go back to: the limits before the daemon raised its own.
        isolation::clean_start::remember_startup_limits();
        state_dir::raise_open_file_limit();
        // Before the reaper starts: the daemon may move into a leaf cgroup.
        let containment = cgroup::setup::set_up(config)?;
        let swept = Swept::sweep(&dirs, &containment, &identity).await?;
        let ledger = swept.ledger?;
        let uids = open_uids(config, &ledger, swept.uids).await?;
        let disk_limit = choose_disk_limit(config, &dirs, uids.is_some()).await?;
        let catalog = open_catalog(&dirs).await?;
        announce_lost(&catalog, &swept.vanished, events);
        swept.counts.log();
        let deferred = Arc::new(deferred::Deferred::start());
        let trash = Trash::new(dirs.trash.clone(), deferred.clone());
        trash.empty_leftovers();
        remove_prepared_leftovers(&dirs).await?;
        Ok(Host {
            identity,
            dirs,
            state_lock,
            containment,
            ledger,
            uids,
            disk_limit,
            catalog,
            deferred,
            trash,
        })
    }
}

/// What the sweep of an earlier daemon's leftovers found and opened.
struct Swept {
    counts: Killed,
    /// The base names of its runners that were gone when this one looked.
    vanished: Vec<String>,
    ledger: anyhow::Result<Ledger>,
    /// The uid pool as the ledger and the workspaces left it.
    uids: Option<(uid_pool::UidPool, ledger::UidLedger)>,
}

/// What the sweep killed and removed.
struct Killed {
    groups: usize,
    strays: usize,
    cgroups: usize,
}

impl Killed {
    fn log(&self) {
        let Killed {
            groups,
            strays,
            cgroups,
        } = *self;
        if groups > 0 || strays > 0 || cgroups > 0 {
            tracing::warn!(
                groups,
                strays,
                cgroups,
                "killed runners left by an earlier sandboxd"
            );
        }
    }
}

impl Swept {
    /// Kills what an earlier daemon's ledger, cgroups and workspaces still
    /// hold, on a blocking thread, and opens the ledger anew.
    async fn sweep(
        dirs: &state_dir::StateDirs,
        containment: &Containment,
        identity: &RunnerIdentity,
    ) -> anyhow::Result<Swept> {
        let (ledger_dir, sandboxes) = (dirs.ledger.clone(), dirs.sandboxes.clone());
        let tree = containment.tree().cloned();
        let uid_range = identity.uid_range();
        Ok(tokio::task::spawn_blocking(move || {
            // Before the sweep, which empties the ledger.
            let recorded_uids = ledger::read_uids(&ledger_dir);
            let cgroups = tree.map_or(0, |tree| cgroup::setup::sweep(&tree));
            let mut vanished = Vec::new();
            let groups = ledger::sweep_telling(&ledger_dir, &mut vanished);
            let strays = workspaces::scan::kill_processes_in(&sandboxes);
            let ledger = Ledger::open(&ledger_dir).with_context(|| {
                format!("cannot open the spawn ledger in {}", ledger_dir.display())
            });
            let uids = uid_range.map(|range| uid_pool::restore(range, recorded_uids, &sandboxes));
            Swept {
                counts: Killed {
                    groups,
                    strays,
                    cgroups,
                },
                vanished,
                ledger,
                uids,
            }
        })
        .await?)
    }
}

/// Each sandbox's own uid, where runners get one: the pool restored into
/// the ledger, and the host-wide claims opened.
async fn open_uids(
    config: &Config,
    ledger: &Ledger,
    restored: Option<(uid_pool::UidPool, ledger::UidLedger)>,
) -> anyhow::Result<Option<Arc<SandboxUids>>> {
    let Some((pool, restored)) = restored else {
        return Ok(None);
    };
    ledger
        .restore_uids(restored)
        .context("cannot write the sandboxes' uids into the spawn ledger")?;
    let claims = users::uid_claims::UidClaims::open(
        &config.uid_claims_dir,
        config.instance.display_name(),
        &config.state_dir,
    )?;
    Ok(Some(Arc::new(
        tokio::task::spawn_blocking(move || SandboxUids::new(pool, claims)).await?,
    )))
}

/// `[limits] disk`, and how this host can hold it.
async fn choose_disk_limit(
    config: &Config,
    dirs: &state_dir::StateDirs,
    uid_per_sandbox: bool,
) -> anyhow::Result<disk_limit::DiskLimit> {
    let (limits, sandboxes) = (config.limits.clone(), dirs.sandboxes.clone());
    Ok(tokio::task::spawn_blocking(move || {
        disk_limit::DiskLimit::choose(&limits, &sandboxes, uid_per_sandbox)
    })
    .await?)
}

/// The workspace catalog, reconciled with the workspaces on disk (the tar
/// puts an earlier daemon left unfinished removed).
async fn open_catalog(dirs: &state_dir::StateDirs) -> anyhow::Result<workspaces::Catalog> {
    let (catalog_dir, sandboxes) = (dirs.ledger.clone(), dirs.sandboxes.clone());
    tokio::task::spawn_blocking(move || {
        let catalog = workspaces::Catalog::open(&catalog_dir).with_context(|| {
            format!(
                "cannot open the workspace catalog in {}",
                catalog_dir.display()
            )
        })?;
        workspaces::reconcile(&catalog, &sandboxes);
        let puts = files::remove_abandoned_puts(&sandboxes);
        if puts > 0 {
            tracing::info!(
                puts,
                "removed the tar puts an earlier sandboxd left unfinished"
            );
        }
        anyhow::Ok(catalog)
    })
    .await?
}

/// What a daemon that did not stop cleanly left prepared: its cgroups went
/// with the sweep, its uids' claims with the pool's restore (no ledger
/// line names them).
async fn remove_prepared_leftovers(dirs: &state_dir::StateDirs) -> anyhow::Result<()> {
    let staging = dirs.prepared.clone();
    let leftovers =
        tokio::task::spawn_blocking(move || prepared::host_parts::remove_leftovers(&staging))
            .await?;
    if leftovers > 0 {
        tracing::info!(
            leftovers,
            "removed the prepared workspaces an earlier sandboxd left"
        );
    }
    Ok(())
}

/// Announces the runners an earlier daemon started that were gone when
/// this one looked (see [`ledger::sweep_telling`]): an `exited` event with
/// the reason `lost` for each whose sandbox the workspace catalog names.
/// The generation is 0: this tier keeps no generation across a restart.
fn announce_lost(catalog: &workspaces::Catalog, vanished: &[String], events: &EventHub) {
    for base in vanished {
        let Some(entry) = catalog.with_entry(base, |entry| entry.cloned()) else {
            continue;
        };
        let key = SandboxKey::new(entry.scope, entry.id.clone());
        tracing::warn!(scope = %key.scope, id = %key.id, "the runner ended while no sandboxd watched it: lost");
        events.emit(
            EventKind::Exited,
            &key,
            entry.uid.as_deref().unwrap_or_default(),
            0,
            Some(deprovision::stopped_exit(
                sandboxd_protocol::ExitReason::Lost,
            )),
        );
    }
}

/// Everything about runners that comes from the configuration and this
/// host, and why sandboxes get no view of their own when `full` asked.
async fn runner_settings(
    config: &Config,
    host: &Host,
) -> anyhow::Result<(RunnerSettings, Option<String>)> {
    let init_binary = Arc::new(
        tokio::task::spawn_blocking(isolation::init_binary::InitBinary::find)
            .await?
            .context("cannot open this daemon's own binary (/proc/self/exe)")?,
    );
    let (view, view_problem) = isolation::set_up_view(config, &host.dirs.exits, &init_binary).await;
    let inherited_env = launch::spawn::inherited_env();
    let launcher = Launcher::set_up(config, &inherited_env).await?;
    let (identity, containment, disk_limit) = (&host.identity, &host.containment, &host.disk_limit);
    let per_sandbox_uids = identity.uid_range().is_some();
    let settings = RunnerSettings {
        command: config.runner_command.clone(),
        args: config.runner_args.clone(),
        identity: identity.clone(),
        backend_endpoint: config.backend_endpoint.clone(),
        temporal_address: config.temporal_address.clone(),
        inherited_env,
        runner_path: config.runner_path.clone().into(),
        extra_env: config.runner_env.clone(),
        limit_env: limit_env::limit_env(
            containment.tree().map(|tree| tree.as_ref()),
            disk_limit.by_quota().or(disk_limit.watched()),
        ),
        filters: Arc::new(
            isolation::kernel_filters::KernelFilters::for_this_host(&config.runner_path)
                .with_session_keyring_per_uid(per_sandbox_uids),
        ),
        oom_score_adj: config.runner_oom_score_adj,
        sandboxes_dir: host.dirs.sandboxes.clone(),
        logs_dir: host.dirs.logs.clone(),
        cgroups: containment.tree().cloned(),
        disk_quota: disk_limit.by_quota(),
        view,
        init_binary,
        launcher,
    };
    Ok((settings, view_problem))
}

/// What every sandbox started from now on gets; `describe` keeps the list
/// each was started with.
fn isolation_now(
    config: &Config,
    host: &Host,
    settings: &RunnerSettings,
    egress: &Egress,
    view_problem: Option<&str>,
) -> Arc<[IsolationFeature]> {
    let mut features = isolation::features(&isolation::Facts {
        identity: &settings.identity,
        containment: &host.containment,
        egress,
        uid_claims: host.uids.as_ref().map(|uids| uids.claims_dir()),
        disk_limit: &host.disk_limit,
        filters: &settings.filters,
        mode: config.isolation,
        view: settings.view.as_deref(),
        view_problem,
        init_binary: &settings.init_binary,
    });
    settings.launcher.adjust(&mut features);
    features.into()
}

/// Says how runners will be cloned and which runner runs, or why every
/// ensure will fail.
fn log_readiness(settings: &RunnerSettings, containment: &Containment) {
    match launch::fd_band::state() {
        Ok(slots) => tracing::debug!(
            slots,
            "runners' clones use a band of low descriptors, not the daemon's whole table"
        ),
        Err(why) => {
            tracing::info!(%why, "runners' clones copy the daemon's descriptor table (each new sandbox costs more the more are running)")
        }
    }
    match settings.resolve_command() {
        Ok(program) => {
            tracing::info!(runner = %program.display(), user = %settings.identity.display, containment = %containment.describe(), "local-process driver ready")
        }
        Err(problem) => {
            tracing::error!("{problem}: every ensure will fail until it is installed")
        }
    }
}

/// The egress rules match the sandboxes' parent cgroup, which every
/// runner is cloned into a child of; they are loaded here, before the
/// daemon serves, on a cgroup that exists by now (nft resolves it to an
/// id at load), and kept verified. On the process-group fallback no
/// kernel rule can tell a runner's traffic apart, so any posture but
/// `none` fails closed.
async fn establish_egress(
    config: &Config,
    containment: &Containment,
) -> anyhow::Result<Arc<Egress>> {
    let sandboxes_cgroup = containment.tree().map(|tree| tree.sandboxes().v2.clone());
    let setting = config.egress;
    let egress = Arc::new(
        tokio::task::spawn_blocking(move || {
            Egress::establish(setting, sandboxes_cgroup.as_deref())
        })
        .await?,
    );
    tokio::spawn(egress::keep_verified(Arc::downgrade(&egress)));
    Ok(egress)
}

/// The watchers the configuration asks for: unused workspaces' expiry,
/// the idle and lifetime limits, the disk limit.
fn start_watchers(inner: &Arc<Inner>, config: &Config) {
    if let Some(ttl) = config.workspace_ttl {
        tokio::spawn(workspaces::keep_expiring(Arc::downgrade(inner), ttl));
    }
    if config.lifecycle.any() {
        if inner.containment.tree().is_none() {
            tracing::warn!("[lifecycle] limits are set, but without a cgroup per sandbox a runner's CPU use cannot be read: no runner is ever idle (max_lifetime still applies)");
        }
        tokio::spawn(lifecycle::watcher::keep_watching(
            Arc::downgrade(inner),
            config.lifecycle,
        ));
    }
    if inner.disk_limit.needs_watcher() {
        let (inner, runtime) = (Arc::downgrade(inner), tokio::runtime::Handle::current());
        let started = std::thread::Builder::new()
            .name("sandboxd-disk-watch".into())
            .spawn(move || disk_limit::watcher::keep_watching(inner, runtime));
        if let Err(error) = started {
            tracing::error!(%error, "cannot start the disk watcher's thread: [limits] disk is not held");
        }
    }
}
