//! The API's messages turned into the daemon's own types and back: the session manager and
//! what lies below it never see a `vmscope.v1` type, except the code map publication, decoded
//! where it is read (`codemap/vm.rs`). Sessions and profiles are the profile model's
//! (`vmscope_model`), carried as the API's by `vmscope_proto`'s `From`s.
//!
//! A request is turned as it is, without checks: [`crate::session::request::validate`] checks
//! it, in the order and with the messages clients know. Only the API's defaults are filled in.

use std::time::Duration;

use vmscope_common::{DEFAULT_USER_COPY, MAX_USER_COPY};
use vmscope_proto::{DEFAULT_FREQUENCY_HZ, v1 as pb};

use crate::session::{self, CallGraphMode, ModeRequest, SessionInfo, SessionRequest};

// The API's limits are the kernel side's.
const _: () = assert!(
    vmscope_proto::DEFAULT_DWARF_STACK_BYTES == DEFAULT_USER_COPY
        && vmscope_proto::MAX_DWARF_STACK_BYTES == MAX_USER_COPY
);

// Clients recognise this stop reason by the API's constant.
const _: () = assert!(same(
    session::STOPPED_ALL_TARGETS_EXITED,
    vmscope_proto::STOPPED_ALL_TARGETS_EXITED
));

/// Whether two strings are the same, at compile time.
const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// A start request in the daemon's terms: no frequency is the API's default; a duration that
/// is not positive is zero (which [`crate::session::request::validate`] refuses); an unset or
/// unknown call graph is frame pointers.
pub fn session_request(request: pb::StartSessionRequest) -> SessionRequest {
    SessionRequest {
        pids: request.pids,
        system_wide: request.system_wide,
        frequency_hz: request.frequency_hz.unwrap_or(DEFAULT_FREQUENCY_HZ),
        duration: request.duration.map(|d| {
            if d.seconds < 0 || d.nanos < 0 || (d.seconds == 0 && d.nanos == 0) {
                Duration::ZERO
            } else {
                Duration::new(d.seconds as u64, d.nanos as u32)
            }
        }),
        keep_samples: request.keep_samples,
        call_graph: match pb::CallGraph::try_from(request.call_graph) {
            Ok(pb::CallGraph::None) => CallGraphMode::None,
            Ok(pb::CallGraph::Dwarf) => CallGraphMode::Dwarf,
            _ => CallGraphMode::FramePointers,
        },
        dwarf_stack_bytes: request.dwarf_stack_bytes,
        no_jvm_attach: request.no_jvm_attach,
        mode: match vmscope_proto::model::model_profile_mode(request.mode) {
            Some(mode) => ModeRequest::Known(mode),
            None => ModeRequest::Unknown(request.mode),
        },
        // Not positive: every block, as unset.
        min_block: request.min_block.map(|d| {
            if d.seconds < 0 || d.nanos < 0 {
                Duration::ZERO
            } else {
                Duration::new(d.seconds as u64, d.nanos as u32)
            }
        }),
        params: request
            .params
            .into_iter()
            .map(|p| (p.key, p.value))
            .collect(),
        counts: request.counts,
    }
}

/// A session as the API shows it: as the model shows it ([`SessionInfo::to_model`]), carried
/// as the API's.
pub fn session(session: &SessionInfo) -> pb::Session {
    session.to_model().into()
}

/// A histogram request with the API's defaults filled in; a timeout that is not a positive
/// duration is left as zero, which the request's check refuses.
pub fn heap_request(request: &pb::TakeHeapHistogramRequest) -> crate::heap::HistogramRequest {
    crate::heap::HistogramRequest {
        pid: request.pid,
        all: request.all,
        timeout: request.timeout.map_or(crate::heap::DEFAULT_TIMEOUT, |t| {
            Duration::try_from(t).unwrap_or(Duration::ZERO)
        }),
    }
}

/// A structure query with the API's defaults filled in, as [`heap_request`].
pub fn query_request(request: pb::QueryHeapRequest) -> crate::heap::QueryRequest {
    crate::heap::QueryRequest {
        pid: request.pid,
        timeout: request.timeout.map_or(crate::heap::DEFAULT_TIMEOUT, |t| {
            Duration::try_from(t).unwrap_or(Duration::ZERO)
        }),
        query: request.query.unwrap_or_default().into(),
        all: request.all,
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use prost_types::Duration as PbDuration;

    use super::*;
    use crate::session::{
        CallGraph, SessionError, State, TargetInfo,
        request::{FrequencyLimits, validate},
    };

    const LIMITS: FrequencyLimits = FrequencyLimits {
        kernel_hz: 100_000,
        daemon_hz: u32::MAX,
    };

    fn checked(request: pb::StartSessionRequest) -> Result<session::SessionSpec, SessionError> {
        validate(&session_request(request), LIMITS)
    }

    fn pids(pids: &[u32]) -> pb::StartSessionRequest {
        pb::StartSessionRequest {
            pids: pids.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn the_apis_defaults_are_filled_in() {
        let spec = checked(pids(&[5, 7, 5])).unwrap();
        assert_eq!(spec.pids, vec![5, 7]);
        assert_eq!(spec.frequency_hz, DEFAULT_FREQUENCY_HZ);
        assert_eq!(spec.duration, None);
        assert_eq!(spec.call_graph, CallGraph::FramePointers);
        assert!(spec.jvm_attach);
        let unknown = pb::StartSessionRequest {
            call_graph: 99,
            ..pids(&[1])
        };
        assert_eq!(
            checked(unknown).unwrap().call_graph,
            CallGraph::FramePointers
        );
        let dwarf = pb::StartSessionRequest {
            call_graph: pb::CallGraph::Dwarf as i32,
            ..pids(&[1])
        };
        assert_eq!(
            checked(dwarf).unwrap().call_graph,
            CallGraph::Dwarf {
                stack_bytes: vmscope_proto::DEFAULT_DWARF_STACK_BYTES
            }
        );
        let none = pb::StartSessionRequest {
            call_graph: pb::CallGraph::None as i32,
            no_jvm_attach: true,
            ..pids(&[1])
        };
        let none = checked(none).unwrap();
        assert_eq!(none.call_graph, CallGraph::None);
        assert!(!none.jvm_attach);
    }

    #[test]
    fn durations_that_are_not_positive_are_refused_as_before() {
        let with = |seconds, nanos| pb::StartSessionRequest {
            duration: Some(PbDuration { seconds, nanos }),
            ..pids(&[1])
        };
        for (seconds, nanos) in [(0, 0), (-3, 0), (0, -1), (-1, 500)] {
            let err = checked(with(seconds, nanos)).unwrap_err().to_string();
            assert_eq!(err, "duration must be positive");
        }
        assert_eq!(
            checked(with(1, 500_000_000)).unwrap().duration,
            Some(Duration::from_millis(1500))
        );
        let long = checked(with(i64::MAX, 0)).unwrap_err().to_string();
        assert!(long.contains("longer than the 604800s"), "{long}");
        // The checks keep their order: the shape of the targets first.
        let both = pb::StartSessionRequest {
            system_wide: true,
            ..with(-1, 0)
        };
        assert!(checked(both).unwrap_err().to_string().contains("not both"));
    }

    #[test]
    fn a_session_shows_as_before() {
        let info = SessionInfo {
            id: 3,
            state: State::Stopping,
            targets: vec![TargetInfo {
                pid: 7,
                command: "vm".into(),
                executable: "/usr/bin/vm".into(),
                exited: true,
                note: None,
            }],
            system_wide: false,
            frequency_hz: 99,
            started_at: SystemTime::UNIX_EPOCH + Duration::from_secs(5),
            elapsed: Duration::from_millis(1500),
            duration_limit: Some(Duration::from_secs(10)),
            stop_reason: None,
            owner_uid: 1000,
            samples: 42,
            call_graph: CallGraph::Dwarf { stack_bytes: 4096 },
            awaiting_code_map_samples: 1,
            max_stacks: 100,
            stack_limit_samples: 2,
            label_limit_samples: 3,
            mode: vmscope_model::ProfileMode::Wall,
            min_block_ns: 5_000,
            params: vec![("n".into(), "10".into())],
            counts: vec!["libc.so.6:malloc".into()],
        };
        let shown = session(&info);
        assert_eq!(
            shown,
            pb::Session {
                id: 3,
                state: pb::SessionState::Stopping as i32,
                targets: vec![pb::TargetProcess {
                    pid: 7,
                    command: "vm".into(),
                    executable: "/usr/bin/vm".into(),
                    exited: true,
                    note: String::new(),
                }],
                system_wide: false,
                frequency_hz: 99,
                started_at: Some(prost_types::Timestamp {
                    seconds: 5,
                    nanos: 0
                }),
                elapsed: Some(PbDuration {
                    seconds: 1,
                    nanos: 500_000_000
                }),
                duration_limit: Some(PbDuration {
                    seconds: 10,
                    nanos: 0
                }),
                stop_reason: String::new(),
                owner_uid: 1000,
                samples: 42,
                call_graph: pb::CallGraph::Dwarf as i32,
                dwarf_stack_bytes: 4096,
                awaiting_code_map_samples: 1,
                max_stacks: 100,
                stack_limit_samples: 2,
                label_limit_samples: 3,
                mode: pb::ProfileMode::Wall as i32,
                min_block_ns: 5_000,
                params: vec![vmscope_proto::v1::Param {
                    key: "n".into(),
                    value: "10".into()
                }],
                counts: vec!["libc.so.6:malloc".into()],
            }
        );
    }
}
