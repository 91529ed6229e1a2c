//! The spawn ledger: what this daemon started, kept on disk so that the next
//! instance can finish off anything a crash left behind.
//!
//! One file per sandbox, `<state dir>/ledger/<base name>.pid`, holding
//! `<pid> <start time>`. At start-up every record is swept before the
//! daemon serves: a group whose leader still has the recorded start time is
//! killed; a record whose pid now belongs to another process (a different
//! start time) is dropped without killing anything.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::proc_stat;

/// One line of the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerRecord {
    pub pid: i32,
    pub start_time: u64,
}

impl LedgerRecord {
    fn parse(text: &str) -> Option<LedgerRecord> {
        let mut words = text.split_ascii_whitespace();
        let pid = words.next()?.parse().ok().filter(|pid| *pid > 1)?;
        let start_time = words.next()?.parse().ok()?;
        Some(LedgerRecord { pid, start_time })
    }
}

pub struct Ledger {
    dir: PathBuf,
}

impl Ledger {
    pub fn new(dir: PathBuf) -> Self {
        Ledger { dir }
    }

    fn path(&self, base_name: &str) -> PathBuf {
        self.dir.join(format!("{base_name}.pid"))
    }

    /// Notes a runner the moment it exists. Unsynced: a crash that loses the
    /// page cache also loses the runner (the host went down with it).
    pub fn record(&self, base_name: &str, record: LedgerRecord) -> std::io::Result<()> {
        std::fs::write(
            self.path(base_name),
            format!("{} {}\n", record.pid, record.start_time),
        )
    }

    /// Forgets a runner whose whole group is gone.
    pub fn forget(&self, base_name: &str) {
        if let Err(error) = std::fs::remove_file(self.path(base_name)) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(base_name, %error, "cannot remove ledger record");
            }
        }
    }

    /// Kills every group an earlier instance left behind, then empties the
    /// ledger. Returns how many groups were killed.
    pub fn sweep(&self) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut killed = 0;
        for entry in entries.flatten() {
            let path = entry.path();
            let record = std::fs::read_to_string(&path)
                .ok()
                .and_then(|text| LedgerRecord::parse(&text));
            match record {
                Some(record) if kill_leftover_group(&path, record) => killed += 1,
                Some(_) => {}
                None => tracing::warn!(path = %path.display(), "ignoring unreadable ledger record"),
            }
            let _ = std::fs::remove_file(&path);
        }
        killed
    }
}

/// Kills the group if it is provably the one recorded, and waits (bounded)
/// for its members to die so none survives into the new instance.
fn kill_leftover_group(path: &Path, record: LedgerRecord) -> bool {
    let pgid = record.pid;
    match proc_stat::read(pgid) {
        // The leader is alive: it must be the very process we recorded.
        Some(stat) if stat.start_time != record.start_time => {
            tracing::info!(pid = pgid, path = %path.display(), "ledger pid now belongs to another process; not killing it");
            return false;
        }
        Some(_) => {}
        // The leader is gone. Linux never reuses a pid while a group with
        // that id exists, so any remaining member is ours — but only if it
        // started after the recorded leader did.
        None => {}
    }
    let members: Vec<i32> = proc_stat::members_of_group(pgid)
        .into_iter()
        .filter(|(_, stat)| stat.start_time >= record.start_time)
        .map(|(pid, _)| pid)
        .collect();
    if members.is_empty() {
        return false;
    }
    tracing::warn!(pgid, members = ?members, "killing a runner group left by an earlier sandboxd");
    let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline && !proc_stat::members_of_group(pgid).is_empty() {
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_records() {
        assert_eq!(
            LedgerRecord::parse("123 456\n"),
            Some(LedgerRecord {
                pid: 123,
                start_time: 456
            })
        );
        assert_eq!(LedgerRecord::parse("1 456"), None, "never pid 1");
        assert_eq!(LedgerRecord::parse("-5 456"), None, "never a negative pid");
        assert_eq!(LedgerRecord::parse("garbage"), None);
    }
}
