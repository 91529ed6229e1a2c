//! The spawn ledger: what this daemon started, kept on disk so that the next
//! instance can finish off anything a crash left behind.
//!
//! One append-only journal, `<state dir>/ledger/journal`, with a line per
//! event: `+ <pid> <start time> <base name>` when a runner starts and
//! `- <pid> <start time> <base name>` when its group is gone. One file
//! rather than one per sandbox because creating and unlinking an inode per
//! sandbox was a large share of the cost of creating one. Replaying the
//! journal (a `-` cancels the `+` with the same pid and start time) gives
//! the runners that may still be alive; when dead lines outnumber live ones
//! the journal is rewritten with only the live records.
//!
//! At start-up every live record is swept before the daemon serves: a group
//! whose leader still has the recorded start time is killed; a record whose
//! pid now belongs to another process (a different start time) is dropped
//! without killing anything. The sweep also reads the `<base name>.pid`
//! files (`<pid> <start time>`) an older sandboxd kept one per sandbox, so
//! that an upgrade never leaks the runners the old version left.
//!
//! The same journal records which uid each sandbox has (see
//! [`uid_pool`](super::users::uid_pool)): `u <uid> <base name>` when a sandbox is
//! given one, `f <uid> <base name>` when its workspace is gone and the uid
//! released, and `h <uid>` (written by a compaction and at start-up) when
//! every uid of the range below that one was handed out once. Unlike runner
//! records these outlive a restart: [`read_uids`] reads them before the
//! sweep empties the ledger, and [`Ledger::restore_uids`] writes them into
//! the new journal. A journal of an older version simply has none.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::launch::proc_stat;

/// The journal's name in the ledger directory.
const JOURNAL: &str = "journal";
/// Where a compaction writes before it renames over the journal.
const JOURNAL_TMP: &str = "journal.tmp";
/// Below this many lines since the last compaction, the journal is left to
/// grow: a rewrite would cost more than the few kilobytes it saves.
const COMPACT_AFTER_LINES: usize = 4096;

/// A runner as the ledger knows it: the pair that identifies a process
/// across a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LedgerRecord {
    pub pid: i32,
    pub start_time: u64,
}

impl LedgerRecord {
    /// Parses `<pid> <start time>`, the body of an older version's `.pid` file.
    fn parse(text: &str) -> Option<LedgerRecord> {
        LedgerRecord::from_words(&mut text.split_ascii_whitespace())
    }

    fn from_words<'a>(words: &mut impl Iterator<Item = &'a str>) -> Option<LedgerRecord> {
        let pid = words.next()?.parse().ok().filter(|pid| *pid > 1)?;
        let start_time = words.next()?.parse().ok()?;
        Some(LedgerRecord { pid, start_time })
    }
}

/// One parsed journal line.
struct Entry<'a> {
    started: bool,
    record: LedgerRecord,
    base_name: &'a str,
}

impl Entry<'_> {
    fn parse(line: &str) -> Option<Entry<'_>> {
        let mut words = line.split_ascii_whitespace();
        let started = match words.next()? {
            "+" => true,
            "-" => false,
            _ => return None,
        };
        let record = LedgerRecord::from_words(&mut words)?;
        let base_name = words.next()?;
        words.next().is_none().then_some(Entry {
            started,
            record,
            base_name,
        })
    }
}

/// One journal line, built whole so that it reaches the file in one write.
fn line(started: bool, base_name: &str, record: LedgerRecord) -> String {
    let sign = if started { '+' } else { '-' };
    format!("{sign} {} {} {base_name}\n", record.pid, record.start_time)
}

pub struct Ledger {
    dir: PathBuf,
    journal: Mutex<Journal>,
}

struct Journal {
    /// Opened with `O_APPEND`: every write lands at the end, whatever the offset.
    file: File,
    /// The runners recorded and not yet forgotten, by base name: `forget`
    /// is given only the name, and a compaction writes exactly these.
    live: HashMap<String, LedgerRecord>,
    /// Lines appended since the journal was last compacted (or created).
    lines_since_compaction: usize,
    /// The sandboxes' uids, by base name, and the high-water mark: what a
    /// compaction writes besides the live runners.
    uids: UidLedger,
}

impl Ledger {
    /// Opens (creating it if needed) the journal for appending. Called once,
    /// after [`sweep`] emptied the ledger: the new instance starts with no
    /// live records.
    pub fn open(dir: &Path) -> std::io::Result<Ledger> {
        let path = dir.join(JOURNAL);
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&path)?;
        Ok(Ledger {
            dir: dir.to_path_buf(),
            journal: Mutex::new(Journal {
                file,
                live: HashMap::new(),
                lines_since_compaction: 0,
                uids: UidLedger::default(),
            }),
        })
    }

    fn journal(&self) -> MutexGuard<'_, Journal> {
        self.journal
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Notes a runner the moment it exists. Unsynced: a crash that loses the
    /// page cache also loses the runner (the host went down with it).
    pub fn record(&self, base_name: &str, record: LedgerRecord) -> std::io::Result<()> {
        let mut journal = self.journal();
        journal
            .file
            .write_all(line(true, base_name, record).as_bytes())?;
        journal.lines_since_compaction += 1;
        journal.live.insert(base_name.to_owned(), record);
        self.compact_if_due(&mut journal);
        Ok(())
    }

    /// Forgets a runner whose whole group is gone.
    pub fn forget(&self, base_name: &str) {
        let mut journal = self.journal();
        // Nothing to cancel when the record itself could not be written.
        let Some(record) = journal.live.remove(base_name) else {
            return;
        };
        // A `-` that fails to reach the file leaves a `+` the next sweep
        // checks by start time, and that the next compaction drops.
        match journal
            .file
            .write_all(line(false, base_name, record).as_bytes())
        {
            Ok(()) => journal.lines_since_compaction += 1,
            Err(error) => tracing::warn!(base_name, %error, "cannot forget a ledger record"),
        }
        self.compact_if_due(&mut journal);
    }

    /// Rewrites the journal with only the live records once it has grown by
    /// enough lines, and by more than twice the live ones: the file stays in
    /// proportion to the runners alive, at a cost spread over many appends.
    /// A failure leaves the old journal in use, and waits as long again
    /// before the next try.
    fn compact_if_due(&self, journal: &mut Journal) {
        let lines = journal.lines_since_compaction;
        let kept = journal.live.len() + journal.uids.assigned.len();
        if lines <= COMPACT_AFTER_LINES || lines <= 2 * kept {
            return;
        }
        journal.lines_since_compaction = 0;
        match compact(&self.dir, &journal.live, &journal.uids) {
            Ok(file) => journal.file = file,
            Err(error) => {
                tracing::warn!(dir = %self.dir.display(), %error, "cannot compact the ledger journal; still appending to it")
            }
        }
    }
}

/// The sandboxes' uids as the journal has them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct UidLedger {
    /// Base name → uid, for every sandbox that holds one.
    pub assigned: HashMap<String, u32>,
    /// Every uid of the range below this was handed out once (0: none known).
    pub high_water: u32,
}

impl UidLedger {
    /// The lines that say all of it: `h`, then one `u` per sandbox.
    fn lines(&self) -> String {
        let mut text = match self.high_water {
            0 => String::new(),
            high_water => format!("h {high_water}\n"),
        };
        for (base_name, uid) in &self.assigned {
            text.push_str(&format!("u {uid} {base_name}\n"));
        }
        text
    }

    fn apply(&mut self, entry: UidEntry<'_>) {
        match entry {
            UidEntry::Assigned(uid, base_name) => {
                self.assigned.insert(base_name.to_owned(), uid);
                self.high_water = self.high_water.max(uid.saturating_add(1));
            }
            UidEntry::Released(uid, base_name) => {
                if self.assigned.get(base_name) == Some(&uid) {
                    self.assigned.remove(base_name);
                }
            }
            UidEntry::HighWater(uid) => self.high_water = self.high_water.max(uid),
        }
    }
}

/// One uid line of the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UidEntry<'a> {
    /// `u <uid> <base name>`
    Assigned(u32, &'a str),
    /// `f <uid> <base name>`
    Released(u32, &'a str),
    /// `h <uid>`
    HighWater(u32),
}

impl UidEntry<'_> {
    fn parse(line: &str) -> Option<UidEntry<'_>> {
        let mut words = line.split_ascii_whitespace();
        let kind = words.next()?;
        let uid = words.next()?.parse().ok()?;
        let entry = match kind {
            "u" => UidEntry::Assigned(uid, words.next()?),
            "f" => UidEntry::Released(uid, words.next()?),
            "h" => UidEntry::HighWater(uid),
            _ => return None,
        };
        words.next().is_none().then_some(entry)
    }
}

/// The uid lines of the journal in `dir` (none when there is no journal).
/// Read before [`sweep`], which removes the journal.
pub fn read_uids(dir: &Path) -> UidLedger {
    let mut uids = UidLedger::default();
    let path = dir.join(JOURNAL);
    match std::fs::read_to_string(&path) {
        Ok(text) => text
            .lines()
            .filter_map(UidEntry::parse)
            .for_each(|entry| uids.apply(entry)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "cannot read the sandboxes' uids from the ledger journal")
        }
    }
    uids
}

impl Ledger {
    /// Writes the uids an earlier instance recorded (see [`read_uids`])
    /// into the new journal. Called once, right after [`Ledger::open`].
    pub fn restore_uids(&self, uids: UidLedger) -> std::io::Result<()> {
        let mut journal = self.journal();
        let text = uids.lines();
        journal.uids = uids;
        if text.is_empty() {
            return Ok(());
        }
        journal.lines_since_compaction += text.lines().count();
        journal.file.write_all(text.as_bytes())
    }

    /// Notes that `base_name` now has `uid`, before its runner can use it.
    pub fn record_uid(&self, base_name: &str, uid: u32) -> std::io::Result<()> {
        self.append_uid(UidEntry::Assigned(uid, base_name))
    }

    /// Notes that `base_name` gave its uid back (its workspace is gone).
    pub fn release_uid(&self, base_name: &str, uid: u32) -> std::io::Result<()> {
        self.append_uid(UidEntry::Released(uid, base_name))
    }

    fn append_uid(&self, entry: UidEntry<'_>) -> std::io::Result<()> {
        let text = match entry {
            UidEntry::Assigned(uid, base_name) => format!("u {uid} {base_name}\n"),
            UidEntry::Released(uid, base_name) => format!("f {uid} {base_name}\n"),
            UidEntry::HighWater(uid) => format!("h {uid}\n"),
        };
        let mut journal = self.journal();
        journal.uids.apply(entry);
        journal.file.write_all(text.as_bytes())?;
        journal.lines_since_compaction += 1;
        self.compact_if_due(&mut journal);
        Ok(())
    }
}

/// Writes the live records to a new file and renames it over the journal.
/// The returned handle is that new file, opened for appending before the
/// rename, so there is no moment at which the journal has no open handle.
fn compact(
    dir: &Path,
    live: &HashMap<String, LedgerRecord>,
    uids: &UidLedger,
) -> std::io::Result<File> {
    let tmp = dir.join(JOURNAL_TMP);
    super::trash::remove(&tmp)?;
    let mut file = OpenOptions::new()
        .append(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    let mut text: String = live
        .iter()
        .map(|(base_name, record)| line(true, base_name, *record))
        .collect();
    text.push_str(&uids.lines());
    file.write_all(text.as_bytes())?;
    std::fs::rename(&tmp, dir.join(JOURNAL))?;
    Ok(file)
}

/// The records a journal leaves live, by pid and start time, each with its
/// base name. A line that does not parse is skipped with a warning.
fn replay(path: &Path, text: &str) -> HashMap<LedgerRecord, String> {
    let mut live = HashMap::new();
    for (index, text_line) in text.lines().enumerate() {
        if UidEntry::parse(text_line).is_some() {
            continue;
        }
        match Entry::parse(text_line) {
            Some(entry) if entry.started => {
                live.insert(entry.record, entry.base_name.to_owned());
            }
            Some(entry) => {
                live.remove(&entry.record);
            }
            None => tracing::warn!(
                path = %path.display(),
                line = index + 1,
                "skipping a malformed ledger journal line"
            ),
        }
    }
    live
}

/// Kills every group an earlier instance left behind — the journal's live
/// records and any older version's `.pid` files — then empties the ledger.
/// Returns how many groups were killed.
#[cfg(test)]
pub fn sweep(dir: &Path) -> usize {
    sweep_telling(dir, &mut Vec::new())
}

/// [`sweep`], adding to `vanished` the base name of each journal record
/// whose runner was already gone (its leader dead and no member left, or
/// its pid another process's): a runner that ended while no daemon
/// watched it, how unknown — its exit is `lost`.
pub fn sweep_telling(dir: &Path, vanished: &mut Vec<String>) -> usize {
    let mut killed = 0;
    let journal = dir.join(JOURNAL);
    match std::fs::read_to_string(&journal) {
        Ok(text) => {
            for (record, base_name) in replay(&journal, &text) {
                if kill_leftover_group(&journal, record) {
                    killed += 1;
                } else {
                    vanished.push(base_name);
                }
            }
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            tracing::warn!(path = %journal.display(), %error, "cannot read the ledger journal")
        }
    }
    // A compaction cut short never got to replace the journal.
    for path in [journal, dir.join(JOURNAL_TMP)] {
        if let Err(error) = super::trash::remove(&path) {
            tracing::warn!(path = %path.display(), %error, "cannot remove the ledger journal");
        }
    }
    killed + sweep_legacy_files(dir)
}

/// Sweeps the one-file-per-sandbox ledger of sandboxd versions before the
/// journal, so that an upgrade never leaks the runners they left.
fn sweep_legacy_files(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut killed = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|extension| extension != "pid") {
            continue;
        }
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
    use crate::test_dir::TestDir;
    use std::os::unix::process::CommandExt as _;

    fn dir(name: &str) -> TestDir {
        TestDir::new(&format!("ledger-{name}"))
    }

    fn record(pid: i32, start_time: u64) -> LedgerRecord {
        LedgerRecord { pid, start_time }
    }

    /// The live records of the journal in `dir`, by base name.
    fn live_in(dir: &Path) -> HashMap<String, LedgerRecord> {
        let path = dir.join(JOURNAL);
        let text = std::fs::read_to_string(&path).unwrap();
        replay(&path, &text)
            .into_iter()
            .map(|(record, base_name)| (base_name, record))
            .collect()
    }

    /// A `sleep` leading a process group of its own, as a runner does.
    fn group_leader() -> (std::process::Child, LedgerRecord) {
        let child = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let start_time = proc_stat::read(pid).unwrap().start_time;
        (child, record(pid, start_time))
    }

    fn is_alive(child: &mut std::process::Child) -> bool {
        child.try_wait().unwrap().is_none()
    }

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

    #[test]
    fn replay_cancels_pairs_keeps_unmatched_records_and_skips_malformed_lines() {
        let text = "\
+ 100 5 sbx-ses-000000000001
+ 200 6 sbx-ses-000000000002
garbage
- 100 5 sbx-ses-000000000001
+ 1 7 sbx-ses-000000000003
- 300 8 sbx-ses-000000000004
+ 400 9
+ 500 10 sbx-ses-000000000005 extra
* 200 6 sbx-ses-000000000002
- 200 7 sbx-ses-000000000002
+ 600 11 sbx-ses-000000000006
";
        let live = replay(Path::new("journal"), text);
        let expected = HashMap::from([
            // No `-` with its start time: a same-pid `-` for another process
            // does not cancel it.
            (record(200, 6), "sbx-ses-000000000002".to_owned()),
            // After the malformed lines: they did not stop the replay.
            (record(600, 11), "sbx-ses-000000000006".to_owned()),
        ]);
        assert_eq!(live, expected);
    }

    #[test]
    fn records_and_forgets_append_lines() {
        let dir = dir("append");
        let ledger = Ledger::open(&dir.0).unwrap();
        ledger
            .record("sbx-ses-000000000001", record(100, 5))
            .unwrap();
        ledger
            .record("sbx-ses-000000000002", record(200, 6))
            .unwrap();
        ledger.forget("sbx-ses-000000000001");
        ledger.forget("sbx-ses-000000000009");
        assert_eq!(
            std::fs::read_to_string(dir.0.join(JOURNAL)).unwrap(),
            "+ 100 5 sbx-ses-000000000001\n+ 200 6 sbx-ses-000000000002\n- 100 5 sbx-ses-000000000001\n",
            "a forget of an unknown name writes nothing"
        );
        assert_eq!(
            live_in(&dir.0),
            HashMap::from([("sbx-ses-000000000002".to_owned(), record(200, 6))])
        );
    }

    #[test]
    fn compaction_keeps_exactly_the_live_records_and_shrinks_the_file() {
        let dir = dir("compact");
        let path = dir.0.join(JOURNAL);
        let ledger = Ledger::open(&dir.0).unwrap();
        let mut expected = HashMap::new();
        for n in 0..3 {
            let base = format!("sbx-wfx-{n:012}");
            ledger.record(&base, record(10 + n, 1)).unwrap();
            expected.insert(base, record(10 + n, 1));
        }
        let mut shrank = false;
        let mut size = 0;
        let mut lines_written = 3;
        for n in 0..3000 {
            let base = format!("sbx-ses-{n:012}");
            ledger.record(&base, record(1000 + n, 2)).unwrap();
            ledger.forget(&base);
            lines_written += 2;
            let now = std::fs::metadata(&path).unwrap().len();
            shrank |= now < size;
            size = now;
        }
        assert!(shrank, "the journal never shrank");
        // Appends after a compaction reach the renamed file.
        ledger.forget("sbx-wfx-000000000000");
        expected.remove("sbx-wfx-000000000000");
        ledger.record("sbx-mcp-000000000000", record(7, 3)).unwrap();
        expected.insert("sbx-mcp-000000000000".to_owned(), record(7, 3));
        lines_written += 2;

        assert_eq!(live_in(&dir.0), expected);
        let lines = std::fs::read_to_string(&path).unwrap().lines().count();
        assert!(
            lines < lines_written,
            "{lines} lines of {lines_written} written"
        );
        assert!(!dir.0.join(JOURNAL_TMP).exists());
    }

    #[test]
    fn uid_lines_survive_a_restart_and_a_compaction_and_do_not_disturb_runner_records() {
        let dir = dir("uids");
        let ledger = Ledger::open(&dir.0).unwrap();
        ledger
            .record_uid("sbx-ses-000000000001", 2_000_000_000)
            .unwrap();
        ledger
            .record("sbx-ses-000000000001", record(100, 5))
            .unwrap();
        ledger
            .record_uid("sbx-ses-000000000002", 2_000_000_001)
            .unwrap();
        ledger
            .release_uid("sbx-ses-000000000002", 2_000_000_001)
            .unwrap();
        // A release of a uid the sandbox does not hold changes nothing.
        ledger.release_uid("sbx-ses-000000000001", 7).unwrap();
        let expected = UidLedger {
            assigned: HashMap::from([("sbx-ses-000000000001".to_owned(), 2_000_000_000)]),
            high_water: 2_000_000_002,
        };
        assert_eq!(read_uids(&dir.0), expected);
        // The runner records replay as before, uid lines and all.
        assert_eq!(
            live_in(&dir.0),
            HashMap::from([("sbx-ses-000000000001".to_owned(), record(100, 5))])
        );

        // A restart: read, sweep, open, restore.
        drop(ledger);
        let uids = read_uids(&dir.0);
        sweep(&dir.0);
        let ledger = Ledger::open(&dir.0).unwrap();
        ledger.restore_uids(uids).unwrap();
        assert_eq!(read_uids(&dir.0), expected);

        // Enough churn to compact: the uid lines are rewritten, not lost.
        for n in 0..3000 {
            let base = format!("sbx-wfx-{n:012}");
            ledger.record(&base, record(1000 + n, 2)).unwrap();
            ledger.forget(&base);
        }
        let text = std::fs::read_to_string(dir.0.join(JOURNAL)).unwrap();
        assert!(text.lines().count() < 6000, "no compaction happened");
        assert_eq!(read_uids(&dir.0), expected);
    }

    #[test]
    fn a_journal_without_uid_lines_has_no_uids() {
        let dir = dir("old-journal");
        std::fs::write(dir.0.join(JOURNAL), "+ 100 5 sbx-ses-000000000001\n").unwrap();
        assert_eq!(read_uids(&dir.0), UidLedger::default());
        assert_eq!(read_uids(&dir.0.join("missing")), UidLedger::default());
    }

    #[test]
    fn sweep_kills_live_journal_records_and_legacy_files_then_empties_the_ledger() {
        let dir = dir("sweep");
        let (mut in_journal, in_journal_record) = group_leader();
        let (mut forgotten, forgotten_record) = group_leader();
        let (mut in_legacy_file, in_legacy_record) = group_leader();
        let (mut reused, reused_record) = group_leader();
        let journal = [
            line(true, "sbx-ses-000000000001", in_journal_record),
            line(true, "sbx-ses-000000000002", forgotten_record),
            "not a record\n".to_owned(),
            line(false, "sbx-ses-000000000002", forgotten_record),
            // The pid now names a process that started later.
            line(
                true,
                "sbx-ses-000000000003",
                record(reused_record.pid, reused_record.start_time - 1),
            ),
        ]
        .concat();
        std::fs::write(dir.0.join(JOURNAL), journal).unwrap();
        std::fs::write(dir.0.join(JOURNAL_TMP), "+ 1234 5 half-compacted\n").unwrap();
        std::fs::write(
            dir.0.join("sbx-wfx-000000000004.pid"),
            format!("{} {}\n", in_legacy_record.pid, in_legacy_record.start_time),
        )
        .unwrap();
        std::fs::write(dir.0.join("sbx-wfx-000000000005.pid"), "unreadable").unwrap();

        let killed = sweep(&dir.0);
        let survivors = [
            is_alive(&mut in_journal),
            is_alive(&mut forgotten),
            is_alive(&mut in_legacy_file),
            is_alive(&mut reused),
        ];
        for child in [
            &mut in_journal,
            &mut forgotten,
            &mut in_legacy_file,
            &mut reused,
        ] {
            let _ = child.kill();
            let _ = child.wait();
        }
        assert_eq!(killed, 2);
        assert_eq!(
            survivors,
            [false, true, false, true],
            "journal, forgotten, legacy, reused pid"
        );
        assert!(
            std::fs::read_dir(&dir.0).unwrap().next().is_none(),
            "the sweep leaves an empty ledger"
        );
    }
}
