//! `sandboxctl attach`: a command's output from the first byte the daemon
//! still keeps, followed to its end, and the command's exit code as
//! sandboxctl's, as if it had been run in the foreground. It only watches:
//! interrupting it leaves the command running (`sandboxctl kill` stops
//! it).

use sandboxd_client::{CommandRef, SandboxdClient, Scope};

use crate::follow_output;
use crate::Failure;

pub async fn follow(
    client: &SandboxdClient,
    scope: Scope,
    id: &str,
    command: CommandRef,
    raw: bool,
) -> Result<String, Failure> {
    let handle = client.attach(scope, id, command).await?;
    let proof = follow_output::print_both(&handle, raw).await?;
    follow_output::ended(&handle, &proof)
}
