//! Reading `/proc/<pid>/stat`: a process's start time and process group.
//!
//! A pid alone identifies nothing after a restart (nomad#23969): the pair
//! (pid, start time) does, because the kernel never gives one pid two
//! processes with the same start time.

/// The fields of `/proc/<pid>/stat` the driver needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// One-letter state (`R`, `S`, `Z`, …).
    pub state: char,
    pub pgid: i32,
    /// Field 22: clock ticks since boot at which the process started.
    pub start_time: u64,
}

/// `None` when the process does not exist (or vanished while being read).
pub fn read(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse(&text)
}

/// Parses one stat line. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted from the last `)`.
pub fn parse(text: &str) -> Option<ProcStat> {
    let after_comm = &text[text.rfind(')')? + 1..];
    let mut fields = after_comm.split_ascii_whitespace();
    // Field 3 is the first after the command.
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgid = fields.next()?.parse().ok()?;
    // Fields 6..=21 are skipped; field 22 is the 20th after the command.
    let start_time = fields.nth(22 - 6)?.parse().ok()?;
    Some(ProcStat {
        state,
        pgid,
        start_time,
    })
}

/// Every live (non-zombie) process whose process group is `pgid`.
pub fn members_of_group(pgid: i32) -> Vec<(i32, ProcStat)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((pid, read(pid)?)))
        .filter(|(_, stat)| stat.pgid == pgid && stat.state != 'Z')
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_hostile_command_name() {
        let line =
            "4242 (a) b (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200";
        let stat = parse(line).unwrap();
        assert_eq!(
            stat,
            ProcStat {
                state: 'S',
                pgid: 4242,
                start_time: 987654
            }
        );
    }

    #[test]
    fn reads_this_process() {
        let me = std::process::id() as i32;
        let stat = read(me).unwrap();
        assert_ne!(stat.state, 'Z');
        assert!(stat.start_time > 0);
        assert_eq!(stat.pgid, nix::unistd::getpgrp().as_raw());
    }
}
