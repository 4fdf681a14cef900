//! `GET /debug/pprof/profile?seconds=N`: Go's `net/http/pprof` CPU profile route, as Parca's
//! scraper, Alloy's `pyroscope.scrape` and `go tool pprof http://HOST/debug/pprof/profile`
//! call it.
//!
//! Each request is a session of its own, root's, of the next N seconds (30 when not given):
//! system-wide, or of one process (`pid=`), or of the processes running an executable
//! (`exe=`, its path or file name, looked up when the request comes). The answer is the
//! session's profile as gzipped pprof (`application/octet-stream`), with stacks by frame
//! pointers and JIT frames named as in every other output. A bad request is a 400 that says
//! what is wrong, in plain text, as Go's handler answers; unlike Go's, a `seconds` that is not a
//! positive number is refused rather than taken for 30.
//!
//! With `retained=1` on a daemon that profiles continuously, the answer is the last N seconds
//! already kept rather than the next N: the windows that end within them, merged, at once and
//! without a session (a scraper that pulls every N seconds then costs no sampling beside the
//! windows'). `exe=` then takes the processes that ran the executable, gone ones included.

use std::time::{Duration, SystemTime};

use axum::{
    extract::{RawQuery, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use percent_encoding::percent_decode_str;
use tonic::Code;

use super::{HttpState, OPERATOR};
use crate::continuous::store::Selection;
use crate::session::{
    CallGraphMode, ManagerHandle, State as SessionState, request::MAX_TARGETS_PER_SESSION,
    request::SessionRequest,
};

/// Seconds profiled when the request does not say, as Go's handler.
pub const DEFAULT_SECONDS: u32 = 30;

/// Longest a profile may take to become final after its seconds are up (its last samples
/// read, its code maps caught up) before the request fails.
const FINAL_WITHIN: Duration = Duration::from_secs(60);

/// What a profile request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileQuery {
    /// How long to profile.
    pub seconds: u32,
    /// Which processes.
    pub target: Target,
    /// The last `seconds` of the kept continuous windows, rather than the next `seconds`.
    pub retained: bool,
}

/// The processes a profile request names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every process.
    SystemWide,
    /// One process (`pid=`).
    Pid(u32),
    /// The processes running an executable (`exe=`): its path, or its file name.
    Executable(String),
}

/// The query string of a profile request, checked: `seconds` (1 to `max_seconds`, 30 when
/// absent), and at most one of `pid` and `exe`. Anything else is refused with the reason, so
/// that a misspelt parameter does not quietly profile the whole host.
pub fn parse_query(query: Option<&str>, max_seconds: u32) -> Result<ProfileQuery, String> {
    let mut seconds = None;
    let mut target = Target::SystemWide;
    let mut retained = false;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = decode(value)?;
        match decode(key)?.as_str() {
            "seconds" => {
                if seconds.is_some() {
                    return Err("seconds is given twice".into());
                }
                let n: u32 = value.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                    format!("seconds must be a positive whole number, not {value:?}")
                })?;
                if n > max_seconds {
                    return Err(format!(
                        "seconds={n} is longer than this daemon's limit of {max_seconds} s \
                         (vmscoped --http-max-seconds)"
                    ));
                }
                seconds = Some(n);
            }
            "pid" => {
                if target != Target::SystemWide {
                    return Err("name one target: pid or exe, once".into());
                }
                let pid: u32 = value
                    .parse()
                    .ok()
                    .filter(|&pid| pid > 0)
                    .ok_or_else(|| format!("pid must be a process id, not {value:?}"))?;
                target = Target::Pid(pid);
            }
            "exe" => {
                if target != Target::SystemWide {
                    return Err("name one target: pid or exe, once".into());
                }
                if value.is_empty() || value.contains('\0') {
                    return Err("exe must name an executable: its path or its file name".into());
                }
                target = Target::Executable(value);
            }
            "retained" => {
                retained = match value.as_str() {
                    "1" | "true" => true,
                    "0" | "false" => false,
                    _ => return Err(format!("retained must be 1 or 0, not {value:?}")),
                };
            }
            other => {
                return Err(format!(
                    "unknown parameter {other:?}: this route takes seconds, pid or exe, and \
                     retained"
                ));
            }
        }
    }
    Ok(ProfileQuery {
        seconds: seconds.unwrap_or(DEFAULT_SECONDS.min(max_seconds)),
        target,
        retained,
    })
}

/// A query component with its `%XX` escapes and `+` (a space in forms) decoded.
fn decode(component: &str) -> Result<String, String> {
    let spaced = component.replace('+', " ");
    percent_decode_str(&spaced)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| format!("{component:?} is not UTF-8 once decoded"))
}

/// The route's handler.
pub async fn profile(State(state): State<HttpState>, RawQuery(query): RawQuery) -> Response {
    use std::sync::atomic::Ordering::Relaxed;
    match serve(&state, query.as_deref()).await {
        Ok(pprof) => {
            state.counters.profiles_served.fetch_add(1, Relaxed);
            (
                [
                    (header::CONTENT_TYPE, "application/octet-stream"),
                    (
                        header::CONTENT_DISPOSITION,
                        "attachment; filename=\"profile\"",
                    ),
                ],
                pprof,
            )
                .into_response()
        }
        Err((code, message)) => {
            if code.is_client_error() {
                state.counters.profiles_refused.fetch_add(1, Relaxed);
            } else {
                state.counters.profiles_failed.fetch_add(1, Relaxed);
            }
            (code, format!("{message}\n")).into_response()
        }
    }
}

/// The profile `query` asks for, as gzipped pprof; or the status and reason why not.
async fn serve(state: &HttpState, query: Option<&str>) -> Result<Vec<u8>, (StatusCode, String)> {
    let query = parse_query(query, state.config.max_seconds)
        .map_err(|reason| (StatusCode::BAD_REQUEST, reason))?;
    let _permit = state.in_flight.try_acquire().map_err(|_| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{} profiles are under way, the most this endpoint runs at once; ask again when \
                 one is done",
                super::MAX_PROFILES_IN_FLIGHT
            ),
        )
    })?;
    if query.retained {
        return retained(state, &query).await;
    }
    let (pids, system_wide) = match &query.target {
        Target::SystemWide => (Vec::new(), true),
        Target::Pid(pid) => (vec![*pid], false),
        Target::Executable(exe) => {
            let name = exe.clone();
            let pids = tokio::task::spawn_blocking(move || processes_running(&name))
                .await
                .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
            match pids.len() {
                0 => {
                    return Err((
                        StatusCode::NOT_FOUND,
                        format!("no process runs an executable named {exe:?}"),
                    ));
                }
                n if n > MAX_TARGETS_PER_SESSION => {
                    return Err((
                        StatusCode::BAD_REQUEST,
                        format!(
                            "{n} processes run {:?}, more than the {MAX_TARGETS_PER_SESSION} a \
                             profile may name: profile system-wide, or name one with pid=",
                            exe
                        ),
                    ));
                }
                _ => (pids, false),
            }
        }
    };
    let seconds = Duration::from_secs(u64::from(query.seconds));
    let request = SessionRequest {
        pids,
        system_wide,
        frequency_hz: state.config.frequency_hz,
        duration: Some(seconds),
        call_graph: CallGraphMode::FramePointers,
        ..SessionRequest::default()
    };
    let manager = state.service.manager().clone();
    let session = manager
        .start(OPERATOR, request)
        .await
        .map_err(|e| http_error(crate::server::status::to_status(e)))?;
    let mut stop = StopOnDrop {
        manager: manager.clone(),
        id: session.id,
        armed: true,
    };
    tokio::time::sleep(seconds).await;
    let deadline = tokio::time::Instant::now() + FINAL_WITHIN;
    loop {
        let info = manager
            .get(OPERATOR, session.id)
            .await
            .map_err(|e| http_error(crate::server::status::to_status(e)))?;
        if info.state == SessionState::Stopped {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err((
                StatusCode::INTERNAL_SERVER_ERROR,
                format!(
                    "the profile was not final {} s after its end",
                    FINAL_WITHIN.as_secs()
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.armed = false;
    let profile = state
        .service
        .profile(OPERATOR, session.id, true)
        .await
        .map_err(http_error)?;
    Ok(profile.pprof)
}

/// The last `query.seconds` of the kept continuous windows, merged, as gzipped pprof.
async fn retained(
    state: &HttpState,
    query: &ProfileQuery,
) -> Result<Vec<u8>, (StatusCode, String)> {
    let since = SystemTime::now() - Duration::from_secs(u64::from(query.seconds));
    let (pid, executable) = match &query.target {
        Target::SystemWide => (None, None),
        Target::Pid(pid) => (Some(*pid), None),
        Target::Executable(exe) => (None, Some(exe.clone())),
    };
    let selection = Selection {
        start: Some(since),
        end: None,
        pid,
        executable,
    };
    let profile = state
        .service
        .continuous_profile(selection, true)
        .await
        .map_err(http_error)?;
    Ok(profile.pprof)
}

/// The HTTP status and reason for a gRPC status of the service's.
fn http_error(status: tonic::Status) -> (StatusCode, String) {
    let code = match status.code() {
        Code::InvalidArgument | Code::FailedPrecondition => StatusCode::BAD_REQUEST,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unavailable | Code::Cancelled => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (code, status.message().to_owned())
}

/// Stops a request's session when the request is dropped before its end (the client went
/// away): its sampling must not outlive the one who asked.
struct StopOnDrop {
    manager: ManagerHandle,
    id: u64,
    armed: bool,
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (manager, id) = (self.manager.clone(), self.id);
        tokio::spawn(async move {
            let _ = manager
                .stop(OPERATOR, id, "the HTTP client went away")
                .await;
        });
    }
}

/// The processes whose executable is `exe`: its path, or (without a `/`) its file name.
/// Processes that go while they are read are skipped.
fn processes_running(exe: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|path| {
                if exe.contains('/') {
                    path.as_os_str() == exe
                } else {
                    path.file_name().is_some_and(|name| name == exe)
                }
            })
        })
        .collect();
    pids.sort_unstable();
    pids
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(query: &str) -> Result<ProfileQuery, String> {
        parse_query(Some(query), 300)
    }

    #[test]
    fn seconds_default_to_go_s_30_and_stay_under_the_limit() {
        assert_eq!(
            parse_query(None, 300),
            Ok(ProfileQuery {
                seconds: 30,
                target: Target::SystemWide,
                retained: false,
            })
        );
        assert_eq!(parse("seconds=2").map(|q| q.seconds), Ok(2));
        assert_eq!(parse("seconds=300").map(|q| q.seconds), Ok(300));
        let long = parse("seconds=301").unwrap_err();
        assert!(long.contains("limit of 300 s"), "{long}");
        // A limit under 30 s is the default too.
        assert_eq!(parse_query(None, 10).map(|q| q.seconds), Ok(10));
        for bad in [
            "seconds=0",
            "seconds=-1",
            "seconds=abc",
            "seconds=",
            "seconds=1e3",
        ] {
            let reason = parse(bad).unwrap_err();
            assert!(reason.contains("positive whole number"), "{bad}: {reason}");
        }
        assert!(parse("seconds=1&seconds=2").is_err());
    }

    #[test]
    fn one_target_by_pid_or_executable() {
        assert_eq!(parse("pid=42").map(|q| q.target), Ok(Target::Pid(42)));
        assert_eq!(
            parse("seconds=5&exe=%2Fusr%2Fbin%2Fpython3").map(|q| q.target),
            Ok(Target::Executable("/usr/bin/python3".into()))
        );
        assert_eq!(
            parse("exe=my+vm").map(|q| q.target),
            Ok(Target::Executable("my vm".into()))
        );
        for bad in [
            "pid=0",
            "pid=x",
            "pid=1&pid=2",
            "pid=1&exe=node",
            "exe=",
            "exe=a%00b",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let unknown = parse("sconds=5").unwrap_err();
        assert!(
            unknown.contains("unknown parameter \"sconds\""),
            "{unknown}"
        );
        assert!(parse("exe=%FF").unwrap_err().contains("not UTF-8"));
    }

    #[test]
    fn retained_asks_for_the_kept_windows() {
        for (query, retained) in [
            ("seconds=60&retained=1", true),
            ("retained=true&pid=7", true),
            ("retained=0", false),
            ("seconds=5", false),
        ] {
            assert_eq!(parse(query).map(|q| q.retained), Ok(retained), "{query}");
        }
        let bad = parse("retained=yes").unwrap_err();
        assert!(bad.contains("retained must be 1 or 0"), "{bad}");
    }

    #[test]
    fn an_executable_is_found_by_path_or_file_name() {
        let me = std::env::current_exe().unwrap();
        let mine = std::process::id();
        assert!(processes_running(me.to_str().unwrap()).contains(&mine));
        let name = me.file_name().unwrap().to_str().unwrap();
        assert!(processes_running(name).contains(&mine));
        assert!(processes_running("no-such-executable-here").is_empty());
    }
}
