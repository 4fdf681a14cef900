//! The daemon speaks standard gRPC around its own API: health checks, and server reflection (v1
//! and v1alpha), which is what `grpcurl -plaintext -unix SOCK list` and `describe` use.

use tokio_stream::StreamExt as _;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};
use tonic_reflection::pb::{v1, v1alpha};
use vmscope_tests::{Daemon, channel};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_reflection_answer() {
    let daemon = Daemon::start();
    let channel = channel(&daemon.socket).await.unwrap();

    let mut health = HealthClient::new(channel.clone());
    for service in ["", "vmscope.v1.Profiler"] {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status();
        assert_eq!(status, ServingStatus::Serving, "service {service:?}");
    }

    // `grpcurl list`: v1 first, as current grpcurl does.
    let mut reflection = v1::server_reflection_client::ServerReflectionClient::new(channel.clone());
    let request = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(v1::server_reflection_request::MessageRequest::ListServices(
            String::new(),
        )),
    };
    let mut responses = reflection
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let response = responses.next().await.unwrap().unwrap();
    let Some(v1::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
        response.message_response
    else {
        panic!("not a service list: {response:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for expected in ["vmscope.v1.Profiler", "grpc.health.v1.Health"] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} missing from {names:?}"
        );
    }

    // `grpcurl describe vmscope.v1.Profiler` through the older v1alpha protocol.
    let mut alpha = v1alpha::server_reflection_client::ServerReflectionClient::new(channel);
    let request = v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            v1alpha::server_reflection_request::MessageRequest::FileContainingSymbol(
                "vmscope.v1.Profiler".into(),
            ),
        ),
    };
    let mut responses = alpha
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let response = responses.next().await.unwrap().unwrap();
    let Some(v1alpha::server_reflection_response::MessageResponse::FileDescriptorResponse(files)) =
        response.message_response
    else {
        panic!("no file descriptor: {response:?}");
    };
    let proto = files.file_descriptor_proto.concat();
    let text = String::from_utf8_lossy(&proto);
    for method in ["StartSession", "WatchSession", "GetProfile"] {
        assert!(
            text.contains(method),
            "{method} missing from the descriptor"
        );
    }
}
