//! What a window's export says of a process besides its samples: the container it runs in,
//! the service it is, and its pid in its own pid namespace, read from `/proc` when the window
//! is built (a process gone by then is exported without them).

use std::io::Read as _;

use vmscope_parse::{cgroup, environ, stat};

/// The most of a process's environment read for its service name: the variables that name it
/// are set by whoever starts it, near the front, and an environment may be megabytes.
const ENVIRON_READ: u64 = 256 * 1024;

/// A process's resource attributes beyond its pid and executable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct ProcessFacts {
    /// `container.id`: the container id in its cgroup path.
    pub container_id: Option<String>,
    /// `service.name`: `OTEL_SERVICE_NAME` (or `service.name` in `OTEL_RESOURCE_ATTRIBUTES`)
    /// in its environment, else its systemd service.
    pub service_name: Option<String>,
    /// `process.vpid`: its innermost `NSpid`, when that differs from its host pid.
    pub namespace_pid: Option<u32>,
}

impl ProcessFacts {
    /// Process `pid`'s, from its `/proc` files; what cannot be read is left out.
    pub(super) fn read(pid: u32) -> ProcessFacts {
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        let mut environ = Vec::new();
        if let Ok(file) = std::fs::File::open(format!("/proc/{pid}/environ")) {
            let _ = file.take(ENVIRON_READ).read_to_end(&mut environ);
        }
        let namespace_pid = std::fs::read(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|status| stat::parse_status(&status).ok())
            .and_then(|status| status.nspid)
            .filter(|&nspid| nspid != pid);
        ProcessFacts {
            container_id: cgroup::container_id(&cgroup),
            service_name: environ::service_name(&environ)
                .or_else(|| cgroup::systemd_service(&cgroup)),
            namespace_pid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_read_and_a_gone_one_has_nothing() {
        let me = ProcessFacts::read(std::process::id());
        assert_eq!(
            me.namespace_pid, None,
            "the tests run in the host's pid namespace"
        );
        // The highest pid the kernel hands out is below 2^22.
        assert_eq!(ProcessFacts::read(u32::MAX - 1), ProcessFacts::default());
    }
}
