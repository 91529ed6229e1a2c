//! The daemon's open-file limit, and saying so when it runs out.
//!
//! The process tier holds a pidfd per runner (10,000 runners: 10,000
//! descriptors, beside the sockets of every connection), far above the
//! common soft limit of 1,024. So the daemon raises its soft limit to the
//! hard one at start (`sandboxd.service` sets `LimitNOFILE=`), logs what it
//! got, and an operation that fails with EMFILE or ENFILE says which limit
//! was hit and how to raise it, instead of a bare "Too many open files".

use std::io;

use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// Raises the soft `RLIMIT_NOFILE` to the hard one; returns the soft limit
/// now in force (or `None` if it cannot be read).
pub fn raise() -> Option<u64> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft < hard {
        if let Err(error) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            tracing::warn!(soft, hard, %error, "cannot raise the open-file limit");
            return Some(soft);
        }
    }
    let now = soft.max(hard);
    tracing::info!(
        open_file_limit = now,
        "open-file limit (each process-tier runner holds one descriptor; LimitNOFILE= in sandboxd.service sets it)"
    );
    Some(now)
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
