//! Session and heap errors as gRPC status codes. The messages are the errors' own: written for a person
//! who has to act on them.

use tonic::Status;

use crate::{heap::HeapError, session::SessionError};

/// The status code and message for a session error.
pub fn to_status(error: SessionError) -> Status {
    let message = error.to_string();
    match error {
        SessionError::InvalidArgument(_) => Status::invalid_argument(message),
        SessionError::NoSuchProcess(_) | SessionError::NoSuchSession(_) => {
            Status::not_found(message)
        }
        SessionError::PermissionDenied(_) => Status::permission_denied(message),
        SessionError::AlreadyStopped(_) => Status::failed_precondition(message),
        SessionError::ResourceExhausted(_) => Status::resource_exhausted(message),
        SessionError::Kernel(_) | SessionError::Internal(_) => Status::internal(message),
        SessionError::ShuttingDown => Status::unavailable(message),
    }
}

/// The gRPC status for a heap histogram that could not be taken or found.
pub fn heap_status(error: HeapError) -> Status {
    let message = error.to_string();
    match error {
        HeapError::InvalidArgument(_) => Status::invalid_argument(message),
        HeapError::NotFound(_) => Status::not_found(message),
        HeapError::PermissionDenied(_) => Status::permission_denied(message),
        HeapError::CannotAnswer(_) => Status::failed_precondition(message),
        HeapError::Timeout(_) => Status::deadline_exceeded(message),
        HeapError::Busy(_) => Status::resource_exhausted(message),
        HeapError::Failed(_) => Status::internal(message),
    }
}

#[cfg(test)]
mod tests {
    use tonic::Code;

    use super::*;

    #[test]
    fn codes_follow_the_error() {
        let cases = [
            (
                SessionError::InvalidArgument("x".into()),
                Code::InvalidArgument,
            ),
            (SessionError::NoSuchProcess(7), Code::NotFound),
            (SessionError::NoSuchSession(7), Code::NotFound),
            (
                SessionError::PermissionDenied("x".into()),
                Code::PermissionDenied,
            ),
            (SessionError::AlreadyStopped(7), Code::FailedPrecondition),
            (
                SessionError::ResourceExhausted("x".into()),
                Code::ResourceExhausted,
            ),
            (SessionError::Internal("x".into()), Code::Internal),
            (SessionError::ShuttingDown, Code::Unavailable),
        ];
        for (error, code) in cases {
            let text = error.to_string();
            let status = to_status(error);
            assert_eq!(status.code(), code, "{text}");
            assert_eq!(status.message(), text);
        }
        assert!(
            to_status(SessionError::NoSuchProcess(42))
                .message()
                .contains("pid 42")
        );
    }
}
