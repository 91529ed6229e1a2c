//! Why a run did not succeed, which decides sandboxctl's exit code.

use sandboxd_client::ClientError;

/// Why a run did not succeed, which decides the exit code.
pub enum Failure {
    /// The command line or its environment is wrong: exit 2.
    Usage(String),
    /// The call failed: exit 1.
    Call(ClientError),
    /// The answer could not be printed: exit 1.
    Output(String),
    /// `status --check` found the daemon not healthy: print the answer,
    /// exit with this code.
    NotHealthy { text: String, code: u8 },
    /// `exec` or `attach`: the command ended with this (non-zero) shell
    /// code, which becomes sandboxctl's; it already printed what it wrote.
    Exit(u8),
}

impl From<ClientError> for Failure {
    fn from(error: ClientError) -> Self {
        Failure::Call(error)
    }
}
