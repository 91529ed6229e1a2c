//! The daemon's open-file limit, and saying so when it runs out.
//!
//! The process tier holds one descriptor per running runner (the read end
//! of its output pipe), three more under a private network (its relay's
//! listener and DNS sockets, two more per connection it carries), and one
//! more while the runner writes (its output file, closed after two quiet
//! seconds): 10,000 runners are 40,000 to 50,000 descriptors, beside the
//! sockets of every connection, far above
//! the common soft limit of 1,024 and above some hard ones. So the daemon
//! raises its limit at start, logs what it got, and an operation that fails
//! with EMFILE or ENFILE says which limit was hit and how to raise it,
//! instead of a bare "Too many open files".

use std::io;

use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// The most the daemon asks for: what 100,000 runners need, and no more
/// than the kernel's `fs.nr_open` allows.
const WANTED: u64 = 1 << 19;

/// Raises `RLIMIT_NOFILE`: both limits to [`WANTED`] (or `fs.nr_open`)
/// where the daemon may raise its hard limit (root with CAP_SYS_RESOURCE,
/// as systemd raises its own), else the soft limit to the hard one (under
/// `sandboxd.service`, whose `LimitNOFILE=` sets it). Returns the soft limit
/// now in force (or `None` if it cannot be read).
pub fn raise() -> Option<u64> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .unwrap_or(WANTED);
    let wanted = WANTED.min(nr_open);
    if hard < wanted && setrlimit(Resource::RLIMIT_NOFILE, wanted, wanted).is_ok() {
        return Some(logged(wanted));
    }
    if soft < hard {
        if let Err(error) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            tracing::warn!(soft, hard, %error, "cannot raise the open-file limit");
            return Some(logged(soft));
        }
    }
    Some(logged(soft.max(hard)))
}

fn logged(limit: u64) -> u64 {
    tracing::info!(
        open_file_limit = limit,
        "open-file limit (each process-tier runner holds one descriptor, two while it writes; LimitNOFILE= in sandboxd.service sets it)"
    );
    limit
}

/// True for "this process (EMFILE) or the system (ENFILE) has no
/// descriptor left".
pub fn is_exhaustion(error: &io::Error) -> bool {
    matches!(errno_of(error), Some(libc::EMFILE | libc::ENFILE))
}

/// The errno of `error`, or of the I/O error it wraps (one that names a
/// path, say).
pub fn errno_of(error: &io::Error) -> Option<i32> {
    error.raw_os_error().or_else(|| {
        let inner = error.get_ref()?;
        let source = std::error::Error::source(inner)?;
        source.downcast_ref::<io::Error>()?.raw_os_error()
    })
}

/// The error's text, and when it is descriptor exhaustion, which limit it
/// hit and how to raise it.
pub fn describe(error: &io::Error) -> String {
    if !is_exhaustion(error) {
        return error.to_string();
    }
    format!("{error}: {}", exhaustion_hint(error))
}

/// "the daemon's open-file limit (RLIMIT_NOFILE) of N is reached …".
pub fn exhaustion_hint(error: &io::Error) -> String {
    if errno_of(error) == Some(libc::ENFILE) {
        return "the system-wide limit on open files (fs.file-max) is reached".to_string();
    }
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) => format!(
            "the daemon's open-file limit (RLIMIT_NOFILE) of {soft} (hard {hard}) is reached: \
             raise LimitNOFILE= in sandboxd.service"
        ),
        Err(_) => "the daemon's open-file limit (RLIMIT_NOFILE) is reached: \
                   raise LimitNOFILE= in sandboxd.service"
            .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exhaustion_names_the_limit_and_other_errors_stay_as_they_are() {
        let text = describe(&io::Error::from_raw_os_error(libc::EMFILE));
        assert!(
            text.contains("RLIMIT_NOFILE") && text.contains("LimitNOFILE="),
            "{text}"
        );
        let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert!(text.contains(&soft.to_string()), "{text}");
        assert!(describe(&io::Error::from_raw_os_error(libc::ENFILE)).contains("fs.file-max"));
        let other = io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(describe(&other), other.to_string());
    }
}
