//! Every call of the service, in one table: its name on the wire, who may
//! make it (its access class, with the reason), whether it changes
//! anything, and which tiers serve it. Access control reads the class from
//! here, the server names each call it authorizes by its row, and the
//! request's own type maps onto the rows with no wildcard
//! ([`Call::of`]), so a method added to the protocol does not compile
//! until it has a row. `docs/adding-a-call.md` lists every other place a
//! new call touches.

#[cfg(test)]
use sandboxd_protocol::service::SandboxdRequest;

/// Who may make a call, by the lists of `[access]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallClass {
    /// Harmless and needed to diagnose a mismatch: everyone.
    Open,
    /// Reads state.
    Read,
    /// Creates, starts or destroys sandboxes, or reads what a runner
    /// printed or holds (which may be the credential it was handed).
    Mutate,
}

/// The tiers that serve a call: every tier, or the ones named.
pub const EVERY_TIER: &[&str] = &["local-process", "docker", "kubernetes"];

macro_rules! calls {
    ($($call:ident = $name:literal, $class:ident, mutates: $mutates:literal, tiers: $tiers:expr;)+) => {
        /// One call of the service.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Call {
            $($call,)+
        }

        impl Call {
            /// Every call, in the table's order (the service's).
            pub const ALL: &'static [Call] = &[$(Call::$call,)+];

            /// The method's name on the wire, for messages and logs.
            pub fn name(self) -> &'static str {
                match self {
                    $(Call::$call => $name,)+
                }
            }

            /// Who may make it.
            pub fn class(self) -> CallClass {
                match self {
                    $(Call::$call => CallClass::$class,)+
                }
            }

            /// Whether it changes a sandbox, its files or the daemon.
            pub fn mutates(self) -> bool {
                match self {
                    $(Call::$call => $mutates,)+
                }
            }

            /// The tiers that serve it (the others refuse it by name).
            pub fn tiers(self) -> &'static [&'static str] {
                match self {
                    $(Call::$call => $tiers,)+
                }
            }

            /// The row of a request as it arrives: no wildcard, so a new
            /// method of the service needs a row before this compiles
            /// (in every test build, which CI's lint and tests make).
            #[cfg(test)]
            pub fn of(request: &SandboxdRequest) -> Call {
                match request {
                    $(SandboxdRequest::$call { .. } => Call::$call,)+
                }
            }
        }
    };
}

// Why each class: a read of what a runner printed, was given or holds in
// its workspace (logs, command output and arguments, files) may be the
// credential it was handed, so it takes the lists that may start the
// runner in the first place, not the read lists. Names, sizes, figures and
// events are what `describe` shows: reads.
calls! {
    ProtocolVersion = "protocol_version", Open, mutates: false, tiers: EVERY_TIER;
    Ensure = "ensure", Mutate, mutates: true, tiers: EVERY_TIER;
    Deprovision = "deprovision", Mutate, mutates: true, tiers: EVERY_TIER;
    CreateConnect = "create_connect", Mutate, mutates: true, tiers: EVERY_TIER;
    DeprovisionConnect = "deprovision_connect", Mutate, mutates: true, tiers: EVERY_TIER;
    Probe = "probe", Read, mutates: false, tiers: EVERY_TIER;
    Describe = "describe", Read, mutates: false, tiers: EVERY_TIER;
    List = "list", Read, mutates: false, tiers: EVERY_TIER;
    Status = "status", Read, mutates: false, tiers: EVERY_TIER;
    Logs = "logs", Mutate, mutates: false, tiers: EVERY_TIER;
    Workspaces = "workspaces", Read, mutates: false, tiers: EVERY_TIER;
    EnsureFenced = "ensure_fenced", Mutate, mutates: true, tiers: EVERY_TIER;
    DeprovisionFenced = "deprovision_fenced", Mutate, mutates: true, tiers: EVERY_TIER;
    DeprovisionConnectFenced = "deprovision_connect_fenced", Mutate, mutates: true, tiers: EVERY_TIER;
    Events = "events", Read, mutates: false, tiers: EVERY_TIER;
    Usage = "usage", Read, mutates: false, tiers: EVERY_TIER;
    Pause = "pause", Mutate, mutates: true, tiers: EVERY_TIER;
    Resume = "resume", Mutate, mutates: true, tiers: EVERY_TIER;
    Exec = "exec", Mutate, mutates: true, tiers: EVERY_TIER;
    CommandOutput = "command_output", Mutate, mutates: false, tiers: EVERY_TIER;
    CommandWait = "command_wait", Mutate, mutates: false, tiers: EVERY_TIER;
    CommandInput = "command_input", Mutate, mutates: true, tiers: EVERY_TIER;
    CommandSignal = "command_signal", Mutate, mutates: true, tiers: EVERY_TIER;
    CommandResize = "command_resize", Mutate, mutates: true, tiers: EVERY_TIER;
    Commands = "commands", Mutate, mutates: false, tiers: EVERY_TIER;
    PutFile = "put_file", Mutate, mutates: true, tiers: EVERY_TIER;
    GetFile = "get_file", Mutate, mutates: false, tiers: EVERY_TIER;
    StatFile = "stat_file", Mutate, mutates: false, tiers: EVERY_TIER;
    ListFiles = "list_files", Mutate, mutates: false, tiers: EVERY_TIER;
    RemoveFile = "remove_file", Mutate, mutates: true, tiers: EVERY_TIER;
    PutTar = "put_tar", Mutate, mutates: true, tiers: EVERY_TIER;
    GetTar = "get_tar", Mutate, mutates: false, tiers: EVERY_TIER;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_row_has_its_own_name_and_a_mutating_call_is_never_open_or_a_read() {
        let mut names: Vec<_> = Call::ALL.iter().map(|call| call.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Call::ALL.len(), "a wire name is used twice");
        for call in Call::ALL {
            if call.mutates() {
                assert_eq!(call.class(), CallClass::Mutate, "{}", call.name());
            }
            assert!(
                !call.tiers().is_empty(),
                "{} is served nowhere",
                call.name()
            );
        }
    }

    #[test]
    fn a_request_maps_onto_its_row() {
        assert_eq!(
            Call::of(&SandboxdRequest::ProtocolVersion {}),
            Call::ProtocolVersion
        );
        let status = Call::of(&SandboxdRequest::Status {});
        assert_eq!((status.name(), status.class()), ("status", CallClass::Read));
    }
}
