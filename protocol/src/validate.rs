//! The input rules, checked by the client before sending and by the daemon
//! before any side effect. Each error names the field and the rule broken.

use crate::{SandboxEnv, SandboxError};

/// Longest sandbox id, in bytes (a DNS name's length, and a label value's bound).
pub const MAX_ID_LEN: usize = 253;
/// Longest task queue, in bytes.
pub const MAX_TASK_QUEUE_LEN: usize = 512;
/// Longest caller class, in bytes.
pub const MAX_CALLER_CLASS_LEN: usize = 64;
/// Largest token, in bytes.
pub const MAX_TOKEN_LEN: usize = 16 * 1024;

pub(crate) fn invalid(field: &str, why: impl std::fmt::Display) -> SandboxError {
    SandboxError::InvalidArgument(format!("{field} {why}"))
}

/// A printable rendering of a rejected value for error messages, bounded
/// so a hostile 1 MiB id cannot blow up a log line.
pub(crate) fn shown(value: &str) -> String {
    let mut shown: String = value
        .chars()
        .take(64)
        .collect::<String>()
        .escape_debug()
        .collect();
    if value.chars().count() > 64 {
        shown.push('…');
    }
    shown
}

fn check_length(field: &str, value: &str, max: usize) -> Result<(), SandboxError> {
    if value.is_empty() {
        return Err(invalid(field, "must not be empty"));
    }
    if value.len() > max {
        return Err(invalid(
            field,
            format_args!("is {} bytes, longer than the limit of {max}", value.len()),
        ));
    }
    Ok(())
}

fn check_no_control(field: &str, value: &str) -> Result<(), SandboxError> {
    if let Some(bad) = value.chars().find(|c| c.is_control()) {
        let what = if bad == '\0' {
            "a NUL byte".to_string()
        } else {
            format!("control character {:?}", bad)
        };
        return Err(invalid(
            field,
            format_args!("\"{}\" contains {what}", shown(value)),
        ));
    }
    Ok(())
}

/// `value` of `field` names a place in the workspace: no NUL, not
/// absolute, never up with `..` (the daemon still resolves it beneath the
/// workspace, so a symlink cannot lead out either).
pub fn inside_workspace(field: &str, value: &str) -> Result<(), SandboxError> {
    if value.contains('\0') {
        return Err(invalid(
            field,
            format_args!("\"{}\" contains a NUL byte", shown(value)),
        ));
    }
    if value.starts_with('/') {
        return Err(invalid(
            field,
            format_args!(
                "\"{}\" is absolute: give it relative to the workspace",
                shown(value)
            ),
        ));
    }
    if value.split('/').any(|part| part == "..") {
        return Err(invalid(
            field,
            format_args!(
                "\"{}\" goes up with '..': it must stay inside the workspace",
                shown(value)
            ),
        ));
    }
    Ok(())
}

/// A sandbox id (session id, execution id, connect request id): 1–253 bytes,
/// no NUL or other control characters, no `/`, and not `.` or `..`.
///
/// Paths only ever use the hashed base name, so a path-like id could not
/// escape anyway; refusing one anyway catches a caller that passes a path
/// where an id belongs, before anything is created.
pub fn sandbox_id(field: &str, id: &str) -> Result<(), SandboxError> {
    check_length(field, id, MAX_ID_LEN)?;
    check_no_control(field, id)?;
    if id.contains('/') {
        return Err(invalid(
            field,
            format_args!("\"{}\" contains '/': an id is not a path", shown(id)),
        ));
    }
    if id == "." || id == ".." {
        return Err(invalid(field, format_args!("\"{id}\" is not an id")));
    }
    Ok(())
}

/// A task queue: 1–512 bytes, no control characters.
pub fn task_queue(queue: &str) -> Result<(), SandboxError> {
    task_queue_as("task_queue", queue)
}

/// [`task_queue`], its errors naming the field as the caller knows it (a
/// command-line flag, say).
pub fn task_queue_as(field: &str, queue: &str) -> Result<(), SandboxError> {
    check_length(field, queue, MAX_TASK_QUEUE_LEN)?;
    check_no_control(field, queue)
}

/// A caller class: 1–64 characters of `[a-z0-9_.-]`.
pub fn caller_class(class: &str) -> Result<(), SandboxError> {
    caller_class_as("caller_class", class)
}

/// [`caller_class`], its errors naming the field as the caller knows it.
pub fn caller_class_as(field: &str, class: &str) -> Result<(), SandboxError> {
    check_length(field, class, MAX_CALLER_CLASS_LEN)?;
    if let Some(bad) = class
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | '-')))
    {
        return Err(invalid(
            field,
            format_args!(
                "\"{}\" contains {:?}; allowed are a-z 0-9 _ . -",
                shown(class),
                bad
            ),
        ));
    }
    Ok(())
}

/// A token: at most 16 KiB, and no NUL or newline (it becomes an
/// environment variable). Its value never appears in the error.
pub fn token(token: &str) -> Result<(), SandboxError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(invalid(
            "stigmer_token",
            format_args!(
                "is {} bytes, longer than the limit of {MAX_TOKEN_LEN}",
                token.len()
            ),
        ));
    }
    if token.chars().any(|c| c.is_control()) {
        return Err(invalid(
            "stigmer_token",
            "contains a control character (value not shown)",
        ));
    }
    Ok(())
}

/// Every field of a sandbox environment.
pub fn env(env: &SandboxEnv) -> Result<(), SandboxError> {
    task_queue(&env.task_queue)?;
    caller_class(&env.caller_class)?;
    token(env.stigmer_token.expose())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Token;

    fn kind_and_message(result: Result<(), SandboxError>) -> String {
        match result {
            Err(SandboxError::InvalidArgument(message)) => message,
            other => panic!("expected invalid argument, got {other:?}"),
        }
    }

    #[test]
    fn ids_are_bounded_and_printable() {
        assert!(sandbox_id("session_id", "ses_01HZX").is_ok());
        assert!(kind_and_message(sandbox_id("session_id", "../../x")).contains("contains '/'"));
        assert!(kind_and_message(sandbox_id("session_id", "..")).contains("not an id"));
        assert!(sandbox_id("session_id", "..x").is_ok());
        assert!(sandbox_id("session_id", &"a".repeat(253)).is_ok());
        assert!(
            kind_and_message(sandbox_id("session_id", "")).contains("session_id must not be empty")
        );
        assert!(kind_and_message(sandbox_id("session_id", &"a".repeat(254))).contains("254 bytes"));
        assert!(kind_and_message(sandbox_id("session_id", "a\0b")).contains("NUL"));
        assert!(kind_and_message(sandbox_id("execution_id", "a\nb")).contains("execution_id"));
    }

    #[test]
    fn caller_class_shape() {
        for ok in [
            "user",
            "machine",
            "runner",
            "internal",
            "guest",
            "ext.lane-2_a",
        ] {
            assert!(caller_class(ok).is_ok(), "{ok}");
        }
        assert!(kind_and_message(caller_class("User")).contains("'U'"));
        assert!(kind_and_message(caller_class("")).contains("must not be empty"));
        assert!(kind_and_message(caller_class(&"a".repeat(65))).contains("65 bytes"));
    }

    #[test]
    fn token_is_bounded_and_never_echoed() {
        assert!(token("").is_ok());
        assert!(token(&"t".repeat(MAX_TOKEN_LEN)).is_ok());
        let message = kind_and_message(token(&"s3cr3t".repeat(3000)));
        assert!(message.contains("stigmer_token") && !message.contains("s3cr3t"));
        let message = kind_and_message(token("s3cr3t\n"));
        assert!(!message.contains("s3cr3t"));
    }

    #[test]
    fn env_checks_every_field() {
        let good = SandboxEnv {
            task_queue: "session:abc".into(),
            stigmer_token: Token::new("tok"),
            caller_class: "user".into(),
        };
        assert!(env(&good).is_ok());
        let bad_queue = SandboxEnv {
            task_queue: String::new(),
            ..good.clone()
        };
        assert!(kind_and_message(env(&bad_queue)).contains("task_queue"));
        let bad_class = SandboxEnv {
            caller_class: "a b".into(),
            ..good
        };
        assert!(kind_and_message(env(&bad_class)).contains("caller_class"));
    }

    #[test]
    fn token_debug_and_display_are_redacted() {
        let token = Token::new("hunter2");
        assert_eq!(format!("{token:?}"), "<redacted>");
        assert_eq!(format!("{token}"), "<redacted>");
        let env = SandboxEnv {
            task_queue: "q".into(),
            stigmer_token: token,
            caller_class: "user".into(),
        };
        assert!(!format!("{env:?}").contains("hunter2"));
    }
}
