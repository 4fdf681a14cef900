//! Connecting to vmscoped over its Unix socket.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};
use vmscope_proto::v1::profiler_client::ProfilerClient;

/// A client of the daemon's `vmscope.v1.Profiler` service.
pub type Client = ProfilerClient<Channel>;

/// Connects to the daemon at `socket`, with an error that says what to do when it is not there.
pub async fn connect(socket: &Path) -> anyhow::Result<Client> {
    let path: PathBuf = socket.to_path_buf();
    // The URI is required by the API but unused: the connector below ignores it.
    let channel = Endpoint::try_from("http://vmscoped.invalid")?
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?))
            }
        }))
        .await
        .with_context(|| {
            format!(
                "cannot reach vmscoped at {}: is the daemon running? Start it as root with \
                 `vmscoped`, or point --socket / VMSCOPE_SOCKET at its socket",
                socket.display()
            )
        })?;
    // Profiles of system-wide sessions can be large.
    Ok(ProfilerClient::new(channel).max_decoding_message_size(256 << 20))
}

/// The daemon went away while vmscope talked to it: killed, stopped, or restarted.
#[derive(Debug, thiserror::Error)]
#[error("vmscoped went away: {0}")]
pub struct DaemonGone(String);

/// Turns a gRPC status into an error whose text is the daemon's message; a connection that
/// broke becomes a [`DaemonGone`] that says so in words.
pub fn status_error(status: tonic::Status) -> anyhow::Error {
    match daemon_gone(&status) {
        Some(gone) => gone.into(),
        None => anyhow::anyhow!("{} ({:?})", status.message(), status.code()),
    }
}

/// Whether `status` says the daemon is gone, rather than answering: the transport failed
/// (the connection closed, the socket vanished), or the daemon said it is shutting down.
fn daemon_gone(status: &tonic::Status) -> Option<DaemonGone> {
    use std::error::Error as _;
    let mut source = status.source();
    let mut transport = false;
    while let Some(e) = source {
        transport |= e.is::<tonic::transport::Error>() || e.is::<std::io::Error>();
        source = e.source();
    }
    match status.code() {
        tonic::Code::Unavailable if status.message().contains("shutting down") => {
            Some(DaemonGone("it is shutting down (SIGTERM or SIGINT)".into()))
        }
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
            if transport || status.message().contains("transport error") =>
        {
            let why = if status.message().contains("No such file") {
                "its socket is gone (the daemon stopped)".to_owned()
            } else if status.message().contains("Connection refused") {
                "nothing listens on its socket any more (the daemon died)".to_owned()
            } else {
                format!("the connection to it closed ({})", status.message())
            };
            Some(DaemonGone(why))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_connection_reads_as_the_daemon_gone() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
        let mut status = tonic::Status::unavailable("No such file or directory (os error 2)");
        status.set_source(std::sync::Arc::new(io));
        let text = status_error(status).to_string();
        assert!(
            text.starts_with("vmscoped went away: its socket is gone"),
            "{text}"
        );
        let text = status_error(tonic::Status::unknown("transport error")).to_string();
        assert!(text.contains("connection to it closed"), "{text}");
        let text =
            status_error(tonic::Status::unavailable("the daemon is shutting down")).to_string();
        assert!(text.contains("shutting down"), "{text}");
        // The daemon's own answers stay its own.
        let text = status_error(tonic::Status::not_found("no session 3")).to_string();
        assert_eq!(text, "no session 3 (NotFound)");
    }
}
