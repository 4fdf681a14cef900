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

/// Turns a gRPC status into an error whose text is the daemon's message.
pub fn status_error(status: tonic::Status) -> anyhow::Error {
    anyhow::anyhow!("{} ({:?})", status.message(), status.code())
}
