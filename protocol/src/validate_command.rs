//! The input rules of `exec` and the calls that name a command, checked by
//! the client before sending and by the daemon before anything starts.
//! Each error names the field and the rule broken.

use crate::commands::{
    CommandRef, ExecRequest, MAX_COMMAND_ARGS, MAX_COMMAND_ARGV_ENV_BYTES, MAX_COMMAND_INPUT,
    MAX_TAG_LEN,
};
use crate::validate::{invalid, shown};
use crate::SandboxError;

/// Environment names a command may not set: the runner's contract and the
/// token (`HOME`, `PATH` and the rest may be changed, as a shell would).
pub const RESERVED_ENV: [&str; 5] = [
    "STIGMER_TOKEN",
    "STIGMER_TASK_QUEUE",
    "WORKSPACE_ROOT_DIR",
    "STIGMER_BACKEND_ENDPOINT",
    "TEMPORAL_SERVICE_ADDRESS",
];

/// Every field of an `exec` request.
pub fn exec_request(request: &ExecRequest) -> Result<(), SandboxError> {
    argv(&request.argv)?;
    env(&request.env)?;
    let bytes: usize = request.argv.iter().map(|arg| arg.len() + 1).sum::<usize>()
        + request
            .env
            .iter()
            .map(|(name, value)| name.len() + value.len() + 2)
            .sum::<usize>();
    if bytes > MAX_COMMAND_ARGV_ENV_BYTES {
        return Err(invalid(
            "argv and env",
            format_args!(
                "are {bytes} bytes together, more than the limit of {MAX_COMMAND_ARGV_ENV_BYTES}"
            ),
        ));
    }
    if let Some(dir) = &request.workdir {
        workdir(dir)?;
    }
    if let Some(size) = request.pty {
        if size.rows == 0 || size.cols == 0 {
            return Err(invalid(
                "pty",
                format_args!(
                    "of {} rows and {} columns: both must be at least 1",
                    size.rows, size.cols
                ),
            ));
        }
    }
    if request.timeout_ms == Some(0) {
        return Err(invalid(
            "timeout_ms",
            "must be at least 1 (leave it out for none)",
        ));
    }
    if let Some(tag) = &request.tag {
        self::tag(tag)?;
    }
    if request.limits.cpu_millis == Some(0) {
        return Err(invalid("limits.cpu_millis", "must be at least 1"));
    }
    if let Some(memory) = request.limits.memory_bytes {
        if memory < 1024 * 1024 {
            return Err(invalid(
                "limits.memory_bytes",
                format_args!("is {memory}: at least 1 MiB"),
            ));
        }
    }
    Ok(())
}

fn argv(argv: &[String]) -> Result<(), SandboxError> {
    if argv.is_empty() || argv[0].is_empty() {
        return Err(invalid("argv", "must name a program"));
    }
    if argv.len() > MAX_COMMAND_ARGS {
        return Err(invalid(
            "argv",
            format_args!(
                "has {} arguments, more than the limit of {MAX_COMMAND_ARGS}",
                argv.len()
            ),
        ));
    }
    if let Some((index, arg)) = argv.iter().enumerate().find(|(_, arg)| arg.contains('\0')) {
        return Err(invalid(
            &format!("argv[{index}]"),
            format_args!("\"{}\" contains a NUL byte", shown(arg)),
        ));
    }
    Ok(())
}

fn env(env: &[(String, String)]) -> Result<(), SandboxError> {
    for (name, value) in env {
        let good_name = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !good_name {
            return Err(invalid(
                "env",
                format_args!(
                    "name \"{}\" is not a variable name ([A-Za-z_][A-Za-z0-9_]*)",
                    shown(name)
                ),
            ));
        }
        if RESERVED_ENV.contains(&name.as_str()) {
            return Err(invalid(
                "env",
                format_args!("name {name} is the runner's own (the daemon sets it)"),
            ));
        }
        if value.contains('\0') {
            return Err(invalid(
                "env",
                format_args!("value of {name} contains a NUL byte"),
            ));
        }
    }
    Ok(())
}

/// A working directory: relative to the workspace, no `..`, no NUL.
pub fn workdir(dir: &str) -> Result<(), SandboxError> {
    crate::validate::inside_workspace("workdir", dir)
}

/// A tag: 1–128 bytes of `[A-Za-z0-9_.:-]`.
pub fn tag(tag: &str) -> Result<(), SandboxError> {
    if tag.is_empty() || tag.len() > MAX_TAG_LEN {
        return Err(invalid(
            "tag",
            format_args!("\"{}\" must be 1 to {MAX_TAG_LEN} bytes", shown(tag)),
        ));
    }
    if let Some(bad) = tag
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-')))
    {
        return Err(invalid(
            "tag",
            format_args!(
                "\"{}\" contains {bad:?}; allowed are A-Z a-z 0-9 _ . : -",
                shown(tag)
            ),
        ));
    }
    Ok(())
}

/// A command id (32 hex digits) or a tag.
pub fn command_ref(command: &CommandRef) -> Result<(), SandboxError> {
    match command {
        CommandRef::Id(id) => {
            if id.len() != 32 || !id.bytes().all(|byte| byte.is_ascii_hexdigit()) {
                return Err(invalid(
                    "command_id",
                    format_args!("\"{}\" is not a command id (32 hex digits)", shown(id)),
                ));
            }
            Ok(())
        }
        CommandRef::Tag(value) => tag(value),
    }
}

/// What one `command_input` call may write.
pub fn input(data: &[u8]) -> Result<(), SandboxError> {
    if data.len() > MAX_COMMAND_INPUT {
        return Err(invalid(
            "data",
            format_args!(
                "is {} bytes, more than the limit of {MAX_COMMAND_INPUT} a call",
                data.len()
            ),
        ));
    }
    Ok(())
}

/// A signal number a command may be sent.
pub fn signal(signal: i32) -> Result<(), SandboxError> {
    if !(1..=64).contains(&signal) {
        return Err(invalid(
            "signal",
            format_args!("{signal} is not a signal number (1-64)"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PtySize;

    fn message(result: Result<(), SandboxError>) -> String {
        match result {
            Err(SandboxError::InvalidArgument(message)) => message,
            other => panic!("expected invalid argument, got {other:?}"),
        }
    }

    fn request(argv: &[&str]) -> ExecRequest {
        ExecRequest {
            argv: argv.iter().map(|arg| arg.to_string()).collect(),
            ..ExecRequest::default()
        }
    }

    #[test]
    fn each_bad_field_is_named() {
        assert!(message(exec_request(&request(&[]))).starts_with("argv"));
        assert!(message(exec_request(&request(&["a\0b"]))).starts_with("argv[0]"));
        let many: Vec<&str> = vec!["x"; MAX_COMMAND_ARGS + 1];
        assert!(message(exec_request(&request(&many))).contains("4096"));
        let mut bad = request(&["true"]);
        bad.env = vec![("1X".into(), "v".into())];
        assert!(message(exec_request(&bad)).contains("not a variable name"));
        bad.env = vec![("STIGMER_TOKEN".into(), "v".into())];
        assert!(message(exec_request(&bad)).contains("runner's own"));
        let mut bad = request(&["true"]);
        bad.workdir = Some("../etc".into());
        assert!(message(exec_request(&bad)).starts_with("workdir"));
        bad.workdir = Some("/etc".into());
        assert!(message(exec_request(&bad)).contains("absolute"));
        let mut bad = request(&["true"]);
        bad.pty = Some(PtySize { rows: 0, cols: 80 });
        assert!(message(exec_request(&bad)).starts_with("pty"));
        let mut bad = request(&["true"]);
        bad.timeout_ms = Some(0);
        assert!(message(exec_request(&bad)).starts_with("timeout_ms"));
        let mut bad = request(&["true"]);
        bad.tag = Some("a b".into());
        assert!(message(exec_request(&bad)).starts_with("tag"));
        let big = "x".repeat(MAX_COMMAND_ARGV_ENV_BYTES);
        assert!(message(exec_request(&request(&["echo", &big]))).contains("bytes together"));
        assert!(exec_request(&request(&["sh", "-c", "echo hi"])).is_ok());
    }

    #[test]
    fn a_command_is_named_by_a_32_hex_id_or_a_tag() {
        assert!(command_ref(&CommandRef::Id("0".repeat(32))).is_ok());
        assert!(command_ref(&CommandRef::Id("xyz".into())).is_err());
        assert!(command_ref(&CommandRef::Tag("build:1".into())).is_ok());
        assert!(command_ref(&CommandRef::Tag(String::new())).is_err());
        assert!(signal(0).is_err() && signal(9).is_ok());
    }
}
