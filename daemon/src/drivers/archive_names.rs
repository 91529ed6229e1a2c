//! What the names in an archive put into a sandbox may be, the same on
//! every tier that takes one: an entry's name stays in the directory the
//! archive is unpacked into (never absolute, never `..`, never a NUL), and
//! a symbolic link stays in the workspace read from where it stands. The
//! refusals are worded to follow "it" (the entry).

/// The components of an entry's name, with `.` and empty ones left out.
/// Refused: an absolute name, a `..`, a NUL.
pub fn entry_parts(name: &[u8]) -> Result<Vec<&[u8]>, &'static str> {
    if name.contains(&0) {
        return Err("its name holds a NUL byte");
    }
    if name.starts_with(b"/") {
        return Err("its name is absolute");
    }
    let mut parts = Vec::new();
    for part in name.split(|byte| *byte == b'/') {
        match part {
            b"" | b"." => {}
            b".." => return Err("its name holds '..'"),
            part => parts.push(part),
        }
    }
    Ok(parts)
}

/// An entry's name made plain: its [`entry_parts`] joined by `/` (empty
/// for the directory it is unpacked into).
pub fn plain_name(name: &[u8]) -> Result<String, &'static str> {
    let parts: Vec<_> = entry_parts(name)?
        .iter()
        .map(|part| String::from_utf8_lossy(part))
        .collect();
    Ok(parts.join("/"))
}

/// A name or a link's text as told in a refusal.
pub fn shown(name: &[u8]) -> String {
    String::from_utf8_lossy(name).escape_debug().to_string()
}

/// Whether a symlink `levels` directories below the workspace, to
/// `target`, stays in it, read lexically from its place: never more `..`
/// than directories above it. An absolute target is refused, but where the
/// sandbox sees its workspace at `workspace_at` (a container resolves the
/// link there, never on the host) one into that place is read from it.
pub fn symlink_stays_inside(
    target: &[u8],
    levels: usize,
    workspace_at: Option<&str>,
) -> Result<(), String> {
    let shown_target = shown(target);
    if target.is_empty() || target.contains(&0) {
        return Err("it is a symlink with an empty or NUL-holding target".into());
    }
    let (mut level, relative) = match target.strip_prefix(b"/") {
        None => (levels, target),
        Some(absolute) => {
            let inside = workspace_at
                .map(|place| place.trim_start_matches('/').as_bytes())
                .and_then(|place| absolute.strip_prefix(place))
                .filter(|rest| rest.is_empty() || rest.starts_with(b"/"));
            let Some(rest) = inside else {
                return Err(format!(
                    "it is a symlink to the absolute path '{shown_target}', outside the workspace"
                ));
            };
            (0, rest)
        }
    };
    for part in relative.split(|byte| *byte == b'/') {
        match part {
            b"" | b"." => {}
            b".." => {
                level = level.checked_sub(1).ok_or_else(|| {
                    format!("it is a symlink to '{shown_target}', which leads out of the workspace")
                })?;
            }
            _ => level += 1,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_leave_are_refused_and_others_split() {
        assert_eq!(entry_parts(b"./a//b/").unwrap(), [b"a" as &[u8], b"b"]);
        assert!(entry_parts(b"/etc/passwd").is_err());
        assert!(entry_parts(b"a/../../b").is_err());
        assert!(entry_parts(b"a\0b").is_err());
        assert!(entry_parts(b"./").unwrap().is_empty());
    }

    #[test]
    fn a_symlink_may_climb_only_as_high_as_it_stands() {
        assert!(symlink_stays_inside(b"../x", 1, None).is_ok());
        assert!(symlink_stays_inside(b"../../x", 1, None).is_err());
        assert!(symlink_stays_inside(b"a/../../x", 1, None).is_ok());
        assert!(symlink_stays_inside(b"/etc", 5, None).is_err());
        assert!(symlink_stays_inside(b"sub/./file", 0, None).is_ok());
    }

    #[test]
    fn an_absolute_link_into_the_workspace_is_read_from_it_where_one_is_seen() {
        let at = Some("/workspace");
        assert!(symlink_stays_inside(b"/workspace/a", 3, at).is_ok());
        assert!(symlink_stays_inside(b"/workspace", 3, at).is_ok());
        assert!(symlink_stays_inside(b"/workspace/../etc", 3, at).is_err());
        assert!(symlink_stays_inside(b"/workspaces/a", 3, at).is_err());
        assert!(symlink_stays_inside(b"/workspace/a", 3, None).is_err());
    }
}
