//! One whole file in and out of a sandbox with `put_file` and `get_file`:
//! chunks of [`MAX_FILE_CHUNK`] bytes, a few in flight at once (see
//! [`crate::chunk_pipeline`]), as `sandboxctl cp` copies a file.

use std::io::{Read, Write};

use sandboxd_protocol::files::MAX_FILE_CHUNK;
use sandboxd_protocol::{PutChunk, Scope};

use crate::chunk_pipeline;
use crate::tar_stream::read_on_a_thread;
use crate::{SandboxdClient, TarStreamError};

impl SandboxdClient {
    /// Writes what `reader` gives as the file `path` of the workspace with
    /// the permission bits `mode`; answers the bytes sent. The reader is
    /// read on a blocking thread. The file appears whole after the last
    /// chunk, or not at all.
    pub async fn put_file_from<R: Read + Send + 'static>(
        &self,
        scope: Scope,
        id: &str,
        path: &str,
        mode: u32,
        reader: R,
    ) -> Result<u64, TarStreamError> {
        let (mut chunks, reading) = read_on_a_thread(reader);
        let put = |chunk: PutChunk| async move { self.put_file_owned(scope, id, chunk).await };
        let sent = chunk_pipeline::put_all(path, mode, async || chunks.recv().await, put).await;
        drop(chunks);
        let _ = reading.await;
        sent
    }

    /// Fetches the file `path` of the workspace into `writer`; answers its
    /// bytes.
    pub async fn get_file_into<W: Write>(
        &self,
        scope: Scope,
        id: &str,
        path: &str,
        writer: &mut W,
    ) -> Result<u64, TarStreamError> {
        let get = |offset| self.get_file(scope, id, path, offset, MAX_FILE_CHUNK);
        let write = async |data: Vec<u8>| writer.write_all(&data);
        let read = chunk_pipeline::fetch(MAX_FILE_CHUNK, true, get, write).await?;
        writer.flush().map_err(TarStreamError::Local)?;
        Ok(read)
    }
}
