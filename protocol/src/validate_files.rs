//! The input rules of the file calls, checked by the client before sending
//! and by the daemon before anything is touched. Each error names the
//! field and the rule broken.

use crate::files::{PutChunk, MAX_FILE_CHUNK, MAX_PATH_LEN};
use crate::validate::{inside_workspace, invalid, shown};
use crate::SandboxError;

/// A path in the workspace: relative, no `..`, no NUL, at most
/// [`MAX_PATH_LEN`] bytes. Empty or `.` is the workspace itself.
pub fn path(path: &str) -> Result<(), SandboxError> {
    if path.len() > MAX_PATH_LEN {
        return Err(invalid(
            "path",
            format_args!(
                "is {} bytes, more than the limit of {MAX_PATH_LEN}",
                path.len()
            ),
        ));
    }
    inside_workspace("path", path)
}

/// A path that names a file in a directory, not the workspace itself.
pub fn file_path(value: &str) -> Result<(), SandboxError> {
    path(value)?;
    if value.split('/').all(|part| part.is_empty() || part == ".") {
        return Err(invalid(
            "path",
            format_args!(
                "\"{}\" names the workspace itself, not a file in it",
                shown(value)
            ),
        ));
    }
    Ok(())
}

/// Every field of one `put_file` chunk.
pub fn put_chunk(chunk: &PutChunk) -> Result<(), SandboxError> {
    file_path(&chunk.path)?;
    chunk_data(chunk)?;
    if chunk.mode > 0o7777 {
        return Err(invalid(
            "mode",
            format_args!("{:o} is not a file mode (at most 7777 octal)", chunk.mode),
        ));
    }
    Ok(())
}

/// Every field of one `put_tar` chunk: its path names a directory, which
/// may be the workspace itself; the mode is not used.
pub fn tar_chunk(chunk: &PutChunk) -> Result<(), SandboxError> {
    path(&chunk.path)?;
    chunk_data(chunk)
}

fn chunk_data(chunk: &PutChunk) -> Result<(), SandboxError> {
    if chunk.data.len() > MAX_FILE_CHUNK as usize {
        return Err(invalid(
            "data",
            format_args!(
                "is {} bytes, more than the limit of {MAX_FILE_CHUNK} a call",
                chunk.data.len()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(result: Result<(), SandboxError>) -> String {
        match result {
            Err(SandboxError::InvalidArgument(message)) => message,
            other => panic!("expected invalid argument, got {other:?}"),
        }
    }

    #[test]
    fn each_bad_path_is_refused_naming_the_field() {
        assert!(message(path("/etc/passwd")).contains("absolute"));
        assert!(message(path("a/../../etc")).contains("'..'"));
        assert!(message(path("..")).starts_with("path"));
        assert!(message(path("a\0b")).contains("NUL"));
        assert!(message(path(&"x".repeat(MAX_PATH_LEN + 1))).contains("limit"));
        assert!(message(file_path("./")).contains("workspace itself"));
        assert!(path("").is_ok() && path(".").is_ok() && path("a/b..c/d").is_ok());
        assert!(file_path("sub/file").is_ok());
    }

    #[test]
    fn a_chunk_is_bounded_and_its_mode_checked() {
        let mut chunk = PutChunk {
            path: "f".into(),
            offset: 0,
            data: vec![0; MAX_FILE_CHUNK as usize + 1],
            last: true,
            mode: 0o644,
        };
        assert!(message(put_chunk(&chunk)).starts_with("data"));
        chunk.data.clear();
        chunk.mode = 0o10000;
        assert!(message(put_chunk(&chunk)).starts_with("mode"));
        chunk.mode = 0o4755;
        assert!(put_chunk(&chunk).is_ok());
    }
}
