//! The container a process runs in, from its `/proc/PID/cgroup`: the id container runtimes
//! put in the cgroup path, as the OpenTelemetry eBPF profiler reads `container.id`; and the
//! systemd service it runs under, a name for it where it declares none of its own.
//!
//! Docker (`/docker/ID`, `docker-ID.scope`), containerd and CRI-O under Kubernetes
//! (`cri-containerd-ID.scope`, `crio-ID.scope`, `/kubepods/.../ID`) and Podman
//! (`libpod-ID.scope`) all name the container by a 64-hex-digit id in the last segment of the
//! path that has one.

/// Length of a container id: 32 bytes in hex.
const ID_LEN: usize = 64;

/// The container id in a `/proc/PID/cgroup` file, if a cgroup path holds one; the path of the
/// unified hierarchy (`0::`) first, then the others in order.
pub fn container_id(cgroup: &str) -> Option<String> {
    let paths = cgroup.lines().filter_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (id, _, path) = (fields.next()?, fields.next()?, fields.next()?);
        Some((id == "0", path))
    });
    let mut paths: Vec<(bool, &str)> = paths.collect();
    // The unified hierarchy's path first: stable sort keeps the rest in file order.
    paths.sort_by_key(|&(unified, _)| !unified);
    paths
        .into_iter()
        .find_map(|(_, path)| path.rsplit('/').find_map(id_in))
}

/// The systemd service a process runs under (`nginx` for `/system.slice/nginx.service`), from
/// the unified hierarchy's path: its innermost `.service` segment, the per-user service
/// manager's (`user@1000.service`, which holds a user's every process) excepted.
pub fn systemd_service(cgroup: &str) -> Option<String> {
    let path = cgroup.lines().find_map(|line| line.strip_prefix("0::"))?;
    path.rsplit('/')
        .filter_map(|segment| segment.strip_suffix(".service"))
        .find(|name| !name.is_empty() && !name.starts_with("user@"))
        .map(str::to_owned)
}

/// The 64-hex-digit run of a path segment (`docker-ID.scope`, `ID`), if it has one.
fn id_in(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut start = 0;
    while start + ID_LEN <= bytes.len() {
        let run = bytes[start..]
            .iter()
            .take_while(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            .count();
        if run == ID_LEN {
            return Some(segment[start..start + ID_LEN].to_owned());
        }
        start += run.max(1);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f2b8e4c9d1a7b6e5f4c3d2b1a0e9f8d7c6b5a4e3d2c1b0a9f8e7d6c5b4a3f2e";

    #[test]
    fn runtimes_name_their_containers_in_the_path() {
        for cgroup in [
            format!("0::/system.slice/docker-{ID}.scope\n"),
            format!("12:memory:/docker/{ID}\n0::/\n"),
            format!("0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-{ID}.scope\n"),
            format!("0::/machine.slice/libpod-{ID}.scope/container\n"),
            format!("0::/kubepods/besteffort/pod7/{ID}\n"),
        ] {
            assert_eq!(container_id(&cgroup).as_deref(), Some(ID), "{cgroup}");
        }
    }

    #[test]
    fn a_service_is_its_innermost_unit() {
        for (cgroup, service) in [
            ("0::/system.slice/nginx.service\n", Some("nginx")),
            (
                "0::/system.slice/system-getty.slice/getty@tty1.service\n",
                Some("getty@tty1"),
            ),
            (
                "0::/user.slice/user-1000.slice/user@1000.service/app.slice/foo.service\n",
                Some("foo"),
            ),
            (
                "0::/user.slice/user-1000.slice/user@1000.service/init.scope\n",
                None,
            ),
            ("0::/user.slice/user-1000.slice/session-2.scope\n", None),
            // Only the unified hierarchy says the unit; v1 lines are not read.
            ("1:name=systemd:/system.slice/cron.service\n0::/\n", None),
            ("0::/system.slice/.service\n", None),
            ("", None),
        ] {
            assert_eq!(systemd_service(cgroup).as_deref(), service, "{cgroup}");
        }
    }

    #[test]
    fn a_host_process_has_none() {
        for cgroup in [
            "0::/user.slice/user-1000.slice/session-2.scope\n",
            "4:memory:/process_api/14b344d95d94e874229b681e0e085fbb\n0::/\n",
            "",
            "garbage",
            // 63 and 65 digits are not ids; uppercase is not how runtimes write them.
            &format!("0::/docker/{}\n", &ID[1..]),
            &format!("0::/docker/{ID}0\n"),
            &format!("0::/docker/{}\n", ID.to_uppercase()),
        ] {
            assert_eq!(container_id(cgroup), None, "{cgroup}");
        }
    }
}
