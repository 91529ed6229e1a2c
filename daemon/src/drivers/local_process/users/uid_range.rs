//! `runner_uid_range`: the uids (each with the gid of the same number) that
//! process-tier sandboxes get, one per sandbox.
//!
//! The default, 2000000000–2000065535, is 65,536 ids in the span systemd's
//! UIDS-GIDS document lists as unused (1879048192–2147483647), so it meets
//! none of what systemd and Linux hand out: system users (below 1000),
//! regular users (1000–60000), homed and nspawn users (60001–60577),
//! dynamic service users (61184–65519), `nobody` (65534), the 16- and
//! 32-bit `(uid_t) -1` (65535, 4294967295), the container ranges
//! (524288–1879048191) and systemd's "foreign" range of mountfsd images
//! (2147352576–2147418111). It stays below 2^31, which some programs and
//! kernel interfaces mishandle. The first uid is a round number so that
//! `ps` shows a sandbox's slot at a glance (uid 2000000042 is slot 42).
//!
//! Nothing in a range may already belong to a user or group of the host:
//! [`UidRange::check_system_databases`] refuses to start on a clash.

use std::ffi::CStr;
use std::fmt;
use std::sync::Mutex;

/// An inclusive range of uids; each uid is also used as its sandbox's gid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UidRange {
    pub first: u32,
    pub last: u32,
}

impl UidRange {
    pub const DEFAULT: UidRange = UidRange {
        first: 2_000_000_000,
        last: 2_000_065_535,
    };

    /// Parses `FIRST-LAST` (decimal, inclusive). The error names what was
    /// wrong, without the key's name (the caller adds it).
    pub fn parse(text: &str) -> Result<UidRange, String> {
        let Some((first, last)) = text.split_once('-') else {
            return Err(format!(
                "'{text}' is not FIRST-LAST (two uids joined by '-', e.g. \"{}\")",
                UidRange::DEFAULT
            ));
        };
        let number = |which: &str, word: &str| {
            word.trim().parse::<u32>().map_err(|_| {
                format!(
                    "the {which} uid '{}' is not a number from 0 to 4294967295",
                    word.trim()
                )
            })
        };
        let range = UidRange {
            first: number("first", first)?,
            last: number("last", last)?,
        };
        if range.first > range.last {
            return Err(format!(
                "the first uid {} is above the last {}",
                range.first, range.last
            ));
        }
        for (uid, why) in [
            (0, "root"),
            (
                65535,
                "the 16-bit (uid_t) -1, which older programs treat as no uid",
            ),
            (
                u32::MAX,
                "(uid_t) -1, which setresuid and chown take to mean \"unchanged\"",
            ),
        ] {
            if range.contains(uid) {
                return Err(format!("{range} contains {uid} ({why})"));
            }
        }
        Ok(range)
    }

    pub fn contains(&self, uid: u32) -> bool {
        (self.first..=self.last).contains(&uid)
    }

    /// How many uids the range holds (at least 1).
    pub fn len(&self) -> u64 {
        u64::from(self.last - self.first) + 1
    }

    /// Fails, naming the first clash, when a user or group of the system
    /// databases (`/etc/passwd`, `/etc/group`, and whatever else NSS
    /// enumerates) has an id in the range: a runner must never be able to
    /// act as a real account, nor a real account reach a sandbox's files.
    /// Directories that NSS does not enumerate (sssd with `enumerate =
    /// false`, large LDAP trees) are not seen; docs/configuration.md says so.
    pub fn check_system_databases(&self) -> Result<(), String> {
        let (user, primary_group) = first_user_in(self);
        if let Some((uid, user)) = user {
            return Err(format!(
                "runner_uid_range {self} contains uid {uid} (user {user})"
            ));
        }
        if let Some((gid, group)) = first_group_in(self) {
            return Err(format!(
                "runner_uid_range {self} contains gid {gid} (group {group})"
            ));
        }
        if let Some((gid, user)) = primary_group {
            return Err(format!(
                "runner_uid_range {self} contains gid {gid} (the primary group of user {user})"
            ));
        }
        Ok(())
    }
}

impl UidRange {
    /// Fails, naming the first id that is not, unless every id of the range
    /// exists in this user namespace (`/proc/self/uid_map` and `gid_map`):
    /// a daemon in a container with a narrow mapping would otherwise fail
    /// every ensure at `setresuid` with EINVAL.
    pub fn check_mapped(&self) -> Result<(), String> {
        for (what, path) in [("uid", "/proc/self/uid_map"), ("gid", "/proc/self/gid_map")] {
            let map = std::fs::read_to_string(path)
                .map_err(|error| format!("cannot read {path}: {error}"))?;
            if let Some(id) = self.first_unmapped(&map) {
                return Err(format!(
                    "runner_uid_range {self} contains {what} {id}, which this user namespace does not map ({path}: {})",
                    map.split_whitespace().collect::<Vec<_>>().join(" ")
                ));
            }
        }
        Ok(())
    }

    /// The first id of the range no line (`inside outside count`) of an id
    /// map covers.
    fn first_unmapped(&self, map: &str) -> Option<u32> {
        let mut extents: Vec<(u64, u64)> = map
            .lines()
            .filter_map(|line| {
                let mut words = line.split_whitespace().map(|word| word.parse::<u64>().ok());
                let inside = words.next()??;
                let _outside = words.next()??;
                let count = words.next()??;
                Some((inside, inside + count))
            })
            .collect();
        extents.sort();
        let mut next = u64::from(self.first);
        for (start, end) in extents {
            if start > next {
                break;
            }
            next = next.max(end);
        }
        (next <= u64::from(self.last)).then_some(next as u32)
    }
}

impl fmt::Display for UidRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

/// The passwd and group enumerations keep their position in process-wide
/// state; this lock keeps two checks (tests run in parallel) from sharing it.
static ENUMERATION: Mutex<()> = Mutex::new(());

/// Room for one entry's strings; a group with a long member list may need
/// more, and the buffer grows on ERANGE.
const ENTRY_BUFFER: usize = 16 * 1024;

/// A clash: the id, and whose it is.
type Clash = Option<(u32, String)>;

/// The first user whose uid is in the range, and the first whose primary
/// gid is.
fn first_user_in(range: &UidRange) -> (Clash, Clash) {
    let _guard = ENUMERATION
        .lock()
        .unwrap_or_else(|poison| poison.into_inner());
    let mut buffer = vec![0 as libc::c_char; ENTRY_BUFFER];
    // SAFETY: setpwent/endpwent take no arguments; getpwent_r writes the
    // entry into `entry` and its strings into `buffer` (of the length
    // given) and sets `result` to `&entry` or null.
    unsafe {
        libc::setpwent();
        let (mut found, mut primary_group) = (None, None);
        loop {
            let mut entry: libc::passwd = std::mem::zeroed();
            let mut result = std::ptr::null_mut();
            let code = libc::getpwent_r(&mut entry, buffer.as_mut_ptr(), buffer.len(), &mut result);
            if code == libc::ERANGE {
                buffer.resize(buffer.len() * 2, 0);
                continue;
            }
            if code != 0 || result.is_null() {
                break;
            }
            let name = CStr::from_ptr(entry.pw_name).to_string_lossy();
            if range.contains(entry.pw_uid) {
                found = Some((entry.pw_uid, name.into_owned()));
                break;
            }
            if range.contains(entry.pw_gid) && primary_group.is_none() {
                primary_group = Some((entry.pw_gid, name.into_owned()));
            }
        }
        libc::endpwent();
        (found, primary_group)
    }
}

/// The first group whose gid is in the range.
fn first_group_in(range: &UidRange) -> Option<(u32, String)> {
    let _guard = ENUMERATION
        .lock()
        .unwrap_or_else(|poison| poison.into_inner());
    let mut buffer = vec![0 as libc::c_char; ENTRY_BUFFER];
    // SAFETY: as in first_user_in, for the group database.
    unsafe {
        libc::setgrent();
        let mut found = None;
        loop {
            let mut entry: libc::group = std::mem::zeroed();
            let mut result = std::ptr::null_mut();
            let code = libc::getgrent_r(&mut entry, buffer.as_mut_ptr(), buffer.len(), &mut result);
            if code == libc::ERANGE {
                buffer.resize(buffer.len() * 2, 0);
                continue;
            }
            if code != 0 || result.is_null() {
                break;
            }
            if range.contains(entry.gr_gid) {
                let name = CStr::from_ptr(entry.gr_name).to_string_lossy();
                found = Some((entry.gr_gid, name.into_owned()));
                break;
            }
        }
        libc::endgrent();
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_first_dash_last() {
        assert_eq!(
            UidRange::parse("100-200"),
            Ok(UidRange {
                first: 100,
                last: 200
            })
        );
        assert_eq!(UidRange::parse(" 7 - 7 ").map(|range| range.len()), Ok(1));
        assert_eq!(
            UidRange::parse(&UidRange::DEFAULT.to_string()),
            Ok(UidRange::DEFAULT)
        );
        assert_eq!(UidRange::DEFAULT.len(), 65536);
    }

    #[test]
    fn bad_ranges_say_what_is_wrong() {
        let cases = [
            ("100", "is not FIRST-LAST"),
            ("", "is not FIRST-LAST"),
            ("a-200", "the first uid 'a' is not a number"),
            ("100-", "the last uid '' is not a number"),
            (
                "100-99999999999",
                "the last uid '99999999999' is not a number",
            ),
            ("-5-10", "the first uid '' is not a number"),
            ("200-100", "the first uid 200 is above the last 100"),
            ("0-100", "0-100 contains 0 (root)"),
            ("65000-66000", "contains 65535"),
            ("4294967000-4294967295", "contains 4294967295"),
        ];
        for (text, expected) in cases {
            let error = UidRange::parse(text).expect_err(text);
            assert!(error.contains(expected), "{text}: {error}");
        }
    }

    #[test]
    fn the_default_avoids_every_range_systemd_and_linux_reserve() {
        let reserved = [
            (0, 999),
            (1000, 60000),
            (60001, 60577),
            (61184, 65519),
            (65534, 65535),
            (524288, 1879048191),
            (2147352576, 2147418111),
            (2147483648, u32::MAX),
        ];
        for (first, last) in reserved {
            let range = UidRange::DEFAULT;
            assert!(
                range.last < first || range.first > last,
                "{range} overlaps {first}-{last}"
            );
        }
    }

    #[test]
    fn an_id_map_must_cover_the_whole_range() {
        let range = UidRange {
            first: 100,
            last: 200,
        };
        assert_eq!(range.first_unmapped("0 0 4294967295\n"), None);
        assert_eq!(range.first_unmapped("0 100000 65536\n"), None);
        assert_eq!(range.first_unmapped("0 100000 150\n"), Some(150));
        assert_eq!(range.first_unmapped("0 1 50\n150 9 60\n"), Some(100));
        assert_eq!(
            range.first_unmapped("150 9 60\n0 1 150\n"),
            None,
            "in any order"
        );
        assert_eq!(range.first_unmapped(""), Some(100));
        UidRange::DEFAULT
            .check_mapped()
            .expect("this host's namespace maps the default range");
    }

    #[test]
    fn the_system_databases_clash_with_root_and_not_with_the_default() {
        // Root's own entry is always there: 1-0 cannot be parsed, so build it.
        let root = UidRange { first: 0, last: 0 };
        let error = root.check_system_databases().unwrap_err();
        assert!(error.contains("contains uid 0 (user root)"), "{error}");
        UidRange::DEFAULT
            .check_system_databases()
            .expect("this host has no user or group in the default range");
    }
}
