//! Files in and out of a sandbox's workspace (protocol 11: `put_file`,
//! `get_file`, `stat_file`, `list_files`, `remove_file`; protocol 12:
//! `put_tar`, `get_tar`): the client library's raw calls, one chunk each,
//! as promises. Chunking a whole file or stream, and reading one to its
//! end, is JavaScript's (`lib/files.js`); this side only converts values.
//!
//! Bytes cross as Node `Buffer`s, as command input and output do; offsets
//! and sizes as numbers (exact up to 2^53 bytes). Facts and reports cross
//! in their serde shape (snake_case), as the other calls' do. The input
//! rules (a path inside the workspace, a chunk of at most
//! `MAX_FILE_CHUNK` bytes, a mode of at most 7777 octal) are the client
//! library's, checked before anything is sent, so they have one wording.

use napi::bindgen_prelude::Buffer;
use napi_derive::napi;
use sandboxd_client::{FileChunk, PutChunk};

use crate::error::to_napi;
use crate::native_client::{json, scope_of, NativeClient};
use crate::native_commands::{number, offset_of};

/// One chunk of an upload (`put_file`) or of a tar stream (`put_tar`).
#[napi(object)]
pub struct PutPiece {
    /// The file (`put_file`) or the directory it is unpacked into
    /// (`put_tar`; `""`: the workspace), relative to the workspace.
    pub path: String,
    /// Where `data` goes: 0 starts over, else the previous `received`.
    pub offset: i64,
    pub data: Buffer,
    /// The file or stream is complete with this chunk.
    pub last: bool,
    /// The file's permission bits (`put_tar` does not use it).
    pub mode: u32,
}

/// A piece of a file (`get_file`) or of a tar stream (`get_tar`).
#[napi(object)]
pub struct FilePiece {
    pub data: Buffer,
    /// The offset of `data`'s first byte.
    pub offset: i64,
    /// The file's size when read; of a tar stream, the bytes made so far.
    pub size: i64,
    /// True when `data` reaches the end.
    pub eof: bool,
}

/// The protocol's chunk for a piece (a free function over its parts, so
/// unit tests need no JavaScript `Buffer`).
fn put_chunk(
    path: String,
    offset: i64,
    data: &[u8],
    last: bool,
    mode: u32,
) -> napi::Result<PutChunk> {
    Ok(PutChunk {
        path,
        offset: offset_of(offset)?,
        data: data.to_vec(),
        last,
        mode,
    })
}

fn chunk_of(piece: PutPiece) -> napi::Result<PutChunk> {
    put_chunk(
        piece.path,
        piece.offset,
        &piece.data,
        piece.last,
        piece.mode,
    )
}

fn file_piece(chunk: FileChunk) -> FilePiece {
    FilePiece {
        offset: number(chunk.offset),
        size: number(chunk.size),
        eof: chunk.eof,
        data: chunk.data.into(),
    }
}

#[napi]
impl NativeClient {
    /// One chunk of an upload of one file; resolves to its `PutReport`
    /// (`received`: the next chunk's offset; `complete` after the last).
    /// Never re-sent after a lost call. `piece.data` must be a Buffer no
    /// JavaScript code writes to while the call runs (`lib/files.js`
    /// passes a private copy): the bytes are read on the runtime's thread.
    #[napi]
    pub async fn put_file(
        &self,
        scope: String,
        id: String,
        piece: PutPiece,
    ) -> napi::Result<serde_json::Value> {
        let scope = scope_of(&scope)?;
        let chunk = chunk_of(piece)?;
        let report = self.client.put_file(scope, &id, &chunk).await;
        json(&report.map_err(to_napi)?)
    }

    /// At most `max_bytes` of a file in the workspace, from `offset`.
    #[napi]
    pub async fn get_file(
        &self,
        scope: String,
        id: String,
        path: String,
        offset: i64,
        max_bytes: u32,
    ) -> napi::Result<FilePiece> {
        let scope = scope_of(&scope)?;
        let offset = offset_of(offset)?;
        let chunk = self.client.get_file(scope, &id, &path, offset, max_bytes);
        Ok(file_piece(chunk.await.map_err(to_napi)?))
    }

    /// One file's facts (`FileStat`; a symlink is not followed).
    #[napi]
    pub async fn stat_file(
        &self,
        scope: String,
        id: String,
        path: String,
    ) -> napi::Result<serde_json::Value> {
        let scope = scope_of(&scope)?;
        json(
            &self
                .client
                .stat_file(scope, &id, &path)
                .await
                .map_err(to_napi)?,
        )
    }

    /// A directory's entries (`FileList`; `""`: the workspace).
    #[napi]
    pub async fn list_files(
        &self,
        scope: String,
        id: String,
        path: String,
    ) -> napi::Result<serde_json::Value> {
        let scope = scope_of(&scope)?;
        json(
            &self
                .client
                .list_files(scope, &id, &path)
                .await
                .map_err(to_napi)?,
        )
    }

    /// Removes a file, a symlink, or a directory (its contents too when
    /// `recursive`). Never re-sent after a lost call.
    #[napi]
    pub async fn remove_file(
        &self,
        scope: String,
        id: String,
        path: String,
        recursive: bool,
    ) -> napi::Result<()> {
        let scope = scope_of(&scope)?;
        self.client
            .remove_file(scope, &id, &path, recursive)
            .await
            .map_err(to_napi)
    }

    /// One chunk of a tar stream, unpacked into the directory `piece.path`
    /// after its last chunk; as [`NativeClient::put_file`] otherwise.
    #[napi]
    pub async fn put_tar(
        &self,
        scope: String,
        id: String,
        piece: PutPiece,
    ) -> napi::Result<serde_json::Value> {
        let scope = scope_of(&scope)?;
        let chunk = chunk_of(piece)?;
        let report = self.client.put_tar(scope, &id, &chunk).await;
        json(&report.map_err(to_napi)?)
    }

    /// At most `max_bytes` of a tar stream of `path` (a file, or a
    /// directory with everything in it; `""`: the workspace), from `offset`.
    #[napi]
    pub async fn get_tar(
        &self,
        scope: String,
        id: String,
        path: String,
        offset: i64,
        max_bytes: u32,
    ) -> napi::Result<FilePiece> {
        let scope = scope_of(&scope)?;
        let offset = offset_of(offset)?;
        let chunk = self.client.get_tar(scope, &id, &path, offset, max_bytes);
        Ok(file_piece(chunk.await.map_err(to_napi)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_piece_becomes_the_protocol_chunk_and_a_negative_offset_is_refused() {
        let chunk = put_chunk("dir/file".into(), 7, &[1, 2, 3], true, 0o640).unwrap();
        assert_eq!(
            chunk,
            PutChunk {
                path: "dir/file".into(),
                offset: 7,
                data: vec![1, 2, 3],
                last: true,
                mode: 0o640,
            }
        );
        let refused = put_chunk("f".into(), -1, &[], false, 0o644).expect_err("refused");
        assert!(
            refused.reason.contains("offset must be 0 or more"),
            "{refused}"
        );
    }
}
