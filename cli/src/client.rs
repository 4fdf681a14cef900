//! Connecting to vmscoped over its Unix socket.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};
use vmscope_proto::v1::profiler_client::ProfilerClient;

use crate::refusal;

/// A client of the daemon's `vmscope.v1.Profiler` service.
pub type Client = ProfilerClient<Channel>;

/// Connects to the daemon at `socket`, with an error that says what to do when it is not there,
/// or why the daemon refused the connection.
pub async fn connect(socket: &Path) -> anyhow::Result<Client> {
    let path: PathBuf = socket.to_path_buf();
    // The URI is required by the API but unused: the connector below ignores it.
    let channel = Endpoint::try_from("http://vmscoped.invalid")?
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(refusal::Watched::new(stream)))
            }
        }))
        .await;
    let channel = match channel {
        Ok(channel) => channel,
        Err(e) => {
            if let Some(why) = refusal::seen() {
                return Err(Refused(why.to_owned()).into());
            }
            return Err(e).with_context(|| {
                format!(
                    "cannot reach vmscoped at {}: is the daemon running? Start it as root with \
                     `vmscoped`, or point --socket / VMSCOPE_SOCKET at its socket",
                    socket.display()
                )
            });
        }
    };
    // Profiles of system-wide sessions can be large.
    Ok(ProfilerClient::new(channel).max_decoding_message_size(256 << 20))
}

/// The daemon refused the connection, and said why (its share of connections for this user
/// is full, say).
#[derive(Debug, thiserror::Error)]
#[error("vmscoped refused the connection: {0}")]
pub struct Refused(String);

/// The daemon went away while vmscope talked to it: killed, stopped, or restarted.
#[derive(Debug, thiserror::Error)]
#[error("vmscoped went away: {0}")]
pub struct DaemonGone(String);

/// Turns a gRPC status into an error whose text is the daemon's message; a connection that
/// broke becomes a [`Refused`] when the daemon had refused it, else a [`DaemonGone`] that says
/// so in words.
pub fn status_error(status: tonic::Status) -> anyhow::Error {
    if let Some(why) = refusal::seen()
        && broke(&status)
    {
        return Refused(why.to_owned()).into();
    }
    match daemon_gone(&status) {
        Some(gone) => gone.into(),
        None => anyhow::anyhow!("{} ({:?})", status.message(), status.code()),
    }
}

/// Whether `status` is the connection failing rather than an answer of the daemon's: tonic made
/// it from an error of the transport (h2, hyper, the socket), which it keeps as the source;
/// a status the daemon sent has none.
fn broke(status: &tonic::Status) -> bool {
    use std::error::Error as _;
    status.source().is_some() || status.message().contains("transport error")
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
