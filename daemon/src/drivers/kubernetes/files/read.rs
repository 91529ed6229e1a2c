//! `get_file`, `stat_file`, `list_files` and `remove_file`: one exec each
//! (see [`super::scripts`]). A file is read with `dd` from the block its
//! offset is in, so one chunk moves at most one block more than it hands
//! out and a whole file moves once.

use sandboxd_protocol::files::{MAX_FILE_CHUNK, MAX_LIST_ENTRIES};
use sandboxd_protocol::{FileChunk, FileList, FileStat, FileType, SandboxError};

use super::super::Inner;
use super::scripts::{self, BLOCK};
use super::{script_path, FileCall, Files};
use crate::provisioner::SandboxKey;

/// The most a listing's exec may write: every entry's line and name.
const MAX_LISTING: usize = 8 * 1024 * 1024;
/// The most a stat's or a removal's exec may write.
const SMALL: usize = 4096;

impl Files {
    pub async fn get_file(
        &self,
        inner: &Inner,
        key: &SandboxKey,
        path: &str,
        offset: u64,
        max: u32,
    ) -> Result<FileChunk, SandboxError> {
        let call = FileCall::open(inner, key, "read", path).await?;
        let path = script_path(path);
        if path == "." {
            return Err(call.told.workspace_itself());
        }
        let max = max.min(MAX_FILE_CHUNK) as u64;
        let lead = offset % BLOCK;
        let count = (lead + max).div_ceil(BLOCK);
        let args = [path, (offset / BLOCK).to_string(), count.to_string()];
        let script = scripts::with_prelude(scripts::GET_FILE);
        let limit = (count * BLOCK) as usize + 64;
        let (stdout, ended) = call.run(inner, &script, &args, None, limit).await?;
        call.outcome(&ended)?;
        let newline = stdout.iter().position(|byte| *byte == b'\n');
        let size = newline
            .and_then(|at| std::str::from_utf8(&stdout[..at]).ok())
            .and_then(|line| line.trim().parse::<u64>().ok())
            .ok_or_else(|| call.told.stream("its first line is not the file's size"))?;
        let bytes = &stdout[newline.unwrap_or_default() + 1..];
        let from = (lead as usize).min(bytes.len());
        let to = (from + max as usize).min(bytes.len());
        let data = bytes[from..to].to_vec();
        Ok(FileChunk {
            offset,
            size,
            eof: offset + data.len() as u64 >= size,
            data,
        })
    }

    pub async fn stat_file(
        &self,
        inner: &Inner,
        key: &SandboxKey,
        path: &str,
    ) -> Result<FileStat, SandboxError> {
        let call = FileCall::open(inner, key, "look at", path).await?;
        let path = script_path(path);
        let name = path.rsplit('/').next().unwrap_or(".").to_string();
        let script = scripts::with_prelude(scripts::STAT);
        let (stdout, ended) = call.run(inner, &script, &[path], None, SMALL).await?;
        call.outcome(&ended)?;
        let line = String::from_utf8_lossy(&stdout);
        file_stat(name, line.trim()).ok_or_else(|| {
            call.told
                .stream(&format!("`stat` said '{}'", line.trim().escape_debug()))
        })
    }

    pub async fn list_files(
        &self,
        inner: &Inner,
        key: &SandboxKey,
        path: &str,
    ) -> Result<FileList, SandboxError> {
        let call = FileCall::open(inner, key, "list", path).await?;
        let args = [script_path(path), MAX_LIST_ENTRIES.to_string()];
        let script = scripts::with_prelude(scripts::LIST);
        let (stdout, ended) = call.run(inner, &script, &args, None, MAX_LISTING).await?;
        call.outcome(&ended)?;
        let mut list =
            listing(&stdout).ok_or_else(|| call.told.stream("its listing cannot be read"))?;
        list.entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(list)
    }

    pub async fn remove_file(
        &self,
        inner: &Inner,
        key: &SandboxKey,
        path: &str,
        recursive: bool,
    ) -> Result<(), SandboxError> {
        let call = FileCall::open(inner, key, "remove", path).await?;
        let path = script_path(path);
        if path == "." {
            return Err(call.told.workspace_itself());
        }
        let args = [path, u8::from(recursive).to_string()];
        let script = scripts::with_prelude(scripts::REMOVE);
        let (_, ended) = call.run(inner, &script, &args, None, SMALL).await?;
        call.outcome(&ended)
    }
}

/// A `stat -c '%f %s %Y'` line (raw mode in hex, size, mtime) as a stat.
fn file_stat(name: String, line: &str) -> Option<FileStat> {
    let mut fields = line.split(' ');
    let raw = u32::from_str_radix(fields.next()?, 16).ok()?;
    let size: u64 = fields.next()?.parse().ok()?;
    let mtime: u64 = fields.next()?.parse().unwrap_or(0);
    let file_type = match raw & 0o170000 {
        0o100000 => FileType::File,
        0o040000 => FileType::Dir,
        0o120000 => FileType::Symlink,
        _ => FileType::Other,
    };
    Some(FileStat {
        name,
        file_type,
        size: if file_type == FileType::File { size } else { 0 },
        mode: raw & 0o7777,
        mtime_unix_ms: mtime.saturating_mul(1000),
    })
}

/// The listing script's output: per entry a stat line, then its name and
/// a NUL; `more` when it stopped at the limit.
fn listing(mut output: &[u8]) -> Option<FileList> {
    let mut list = FileList {
        entries: Vec::new(),
        truncated: false,
    };
    while !output.is_empty() {
        let newline = output.iter().position(|byte| *byte == b'\n')?;
        let line = std::str::from_utf8(&output[..newline]).ok()?;
        output = &output[newline + 1..];
        if line == "more" {
            list.truncated = true;
            break;
        }
        let nul = output.iter().position(|byte| *byte == 0)?;
        let name = String::from_utf8_lossy(&output[..nul]).into_owned();
        output = &output[nul + 1..];
        list.entries.push(file_stat(name, line)?);
    }
    Some(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_is_read_names_with_newlines_too() {
        let output = b"81a4 5 1700000000\na\nb\x00416d 4096 1700000001\nd\x00a1ff 1 0\nl\x00more\n";
        let list = listing(output).unwrap();
        assert!(list.truncated);
        let names: Vec<_> = list.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a\nb", "d", "l"]);
        assert_eq!(list.entries[0].file_type, FileType::File);
        assert_eq!(list.entries[0].mode, 0o644);
        assert_eq!(list.entries[0].size, 5);
        assert_eq!(list.entries[1].file_type, FileType::Dir);
        assert_eq!(list.entries[1].size, 0);
        assert_eq!(list.entries[2].file_type, FileType::Symlink);
        assert!(listing(b"81a4 5 1\nno-nul").is_none());
    }
}
