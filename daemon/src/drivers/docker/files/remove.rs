//! `remove_file`: the Engine API has no call that deletes a file (its
//! archive endpoints only read and unpack), so a removal is an exec of
//! the image's own `rm` in the sandbox's running container, as the
//! container's user: the kernel checks its permissions, and a link is
//! removed, never what it points at. An image without `rm` (at `/bin/rm`
//! or `/usr/bin/rm`) cannot have files removed this way, and the call
//! says so.

use std::time::Duration;

use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use futures::StreamExt;
use sandboxd_protocol::SandboxError;
use tar::EntryType;

use super::super::engine::{CallError, READ_TIMEOUT, WRITE_TIMEOUT};
use super::super::spec::WORKSPACE;
use super::super::Inner;
use super::archive;
use super::resolve::components;
use super::Call;
use crate::provisioner::SandboxKey;

/// Where an image's `rm` is looked for.
const RM: [&str; 2] = ["/bin/rm", "/usr/bin/rm"];
/// How long one removal may take.
const REMOVE_TIMEOUT: Duration = Duration::from_secs(300);
/// How long after its streams close rm's exit code may take to be recorded.
const EXIT_WAIT: Duration = Duration::from_secs(5);
/// The most of what `rm` says that is kept for the error.
const SAID_BYTES: usize = 4096;

impl Inner {
    pub(in super::super) async fn remove_file(
        &self,
        key: &SandboxKey,
        path: &str,
        recursive: bool,
    ) -> Result<(), SandboxError> {
        let call = self.file_call(key, "remove", path).await?;
        let rm = call.rm().await?;
        if !call.running {
            return Err(SandboxError::FailedPrecondition(format!(
                "cannot remove '{}' in {}: its container is not running, and on the docker tier a removal is an exec of rm in it: ensure it first",
                call.told.path.escape_debug(),
                call.told.what
            )));
        }
        let parts = components(path);
        let (name, parents) = parts
            .split_last()
            .ok_or_else(|| call.told.workspace_itself())?;
        let (dir, _) = call.directory(parents).await?;
        let at = format!("{dir}/{name}");
        let head = call
            .probe(&at)
            .await?
            .ok_or_else(|| call.told.not_found())?;
        let mut argv = vec![rm];
        match (head.kind == EntryType::Directory, recursive) {
            (true, true) => argv.push("-r".into()),
            (true, false) => argv.push("-d".into()),
            (false, _) => {}
        }
        argv.extend(["--".to_string(), at]);
        let (code, said) = call.run(argv).await?;
        match code {
            0 => Ok(()),
            _ if said.contains("not empty") => Err(SandboxError::FailedPrecondition(format!(
                "'{}' in {} is a directory that is not empty: remove it recursively",
                call.told.path.escape_debug(),
                call.told.what
            ))),
            _ if said.contains("ermission denied") || said.contains("not permitted") => {
                Err(call.told.denied(&format!("{WORKSPACE}/{path}")))
            }
            _ => Err(SandboxError::Internal(format!(
                "cannot remove '{}' in {}: rm ended with {code}: {}",
                call.told.path.escape_debug(),
                call.told.what,
                said.trim()
            ))),
        }
    }
}

impl Call {
    /// The image's `rm`, or the refusal that says there is none.
    async fn rm(&self) -> Result<String, SandboxError> {
        for rm in RM {
            let stat = archive::path_stat(&self.engine, &self.container, rm)
                .await
                .map_err(|error| self.told.engine(error))?;
            if stat.is_some() {
                return Ok(rm.to_string());
            }
        }
        Err(SandboxError::FailedPrecondition(format!(
            "cannot remove '{}' in {}: the Engine API has no call that deletes a file, so the docker tier runs the image's rm in the container, and its image has none ({})",
            self.told.path.escape_debug(),
            self.told.what,
            RM.join(", ")
        )))
    }

    /// Runs `argv` in the container as its user; its exit code and what
    /// it wrote (the first [`SAID_BYTES`]).
    async fn run(&self, argv: Vec<String>) -> Result<(i64, String), SandboxError> {
        let failed = |error: CallError| self.told.engine(error);
        let options = CreateExecOptions {
            cmd: Some(argv),
            user: Some(format!("{}:{}", self.user.uid, self.user.gid)),
            working_dir: Some(WORKSPACE.to_string()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            ..Default::default()
        };
        let container = self.container.clone();
        let created = self
            .engine
            .call(WRITE_TIMEOUT, |docker| async move {
                docker.create_exec(&container, options).await
            })
            .await
            .map_err(failed)?;
        let id = created.id.clone();
        let started = self
            .engine
            .call(WRITE_TIMEOUT, |docker| async move {
                docker.start_exec(&id, None::<StartExecOptions>).await
            })
            .await
            .map_err(failed)?;
        let StartExecResults::Attached { mut output, .. } = started else {
            return Err(SandboxError::Internal(
                "the engine started rm detached".into(),
            ));
        };
        let mut said = Vec::new();
        let read = async {
            while let Some(Ok(frame)) = output.next().await {
                if let LogOutput::StdErr { message } | LogOutput::StdOut { message } = frame {
                    let room = SAID_BYTES.saturating_sub(said.len());
                    said.extend_from_slice(&message[..room.min(message.len())]);
                }
            }
        };
        if tokio::time::timeout(REMOVE_TIMEOUT, read).await.is_err() {
            return Err(SandboxError::Unavailable(format!(
                "cannot remove '{}' in {}: rm did not end within {REMOVE_TIMEOUT:?}",
                self.told.path.escape_debug(),
                self.told.what
            )));
        }
        // The engine closes the streams before it records the exit code.
        let deadline = tokio::time::Instant::now() + EXIT_WAIT;
        loop {
            let id = created.id.clone();
            let inspect = self
                .engine
                .call(READ_TIMEOUT, |docker| async move {
                    docker.inspect_exec(&id).await
                })
                .await
                .map_err(failed)?;
            match inspect.exit_code {
                Some(code) if inspect.running != Some(true) => {
                    return Ok((code, String::from_utf8_lossy(&said).into_owned()))
                }
                _ if tokio::time::Instant::now() >= deadline => {
                    return Err(SandboxError::Unavailable(format!(
                        "cannot remove '{}' in {}: the engine gave rm's exec no exit code within {EXIT_WAIT:?}",
                        self.told.path.escape_debug(),
                        self.told.what
                    )))
                }
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }
}
