//! What a process says of itself in its environment (`/proc/PID/environ`, NUL-separated
//! `KEY=VALUE` entries as it was started): the service name an OpenTelemetry SDK would give
//! it, so that its profiles and its traces name the same service.

/// The longest service name taken, in bytes: a process writes its own environment, and its
/// name goes into every window exported from it.
pub const MAX_SERVICE_NAME: usize = 255;

/// The service name the process declares, as OpenTelemetry SDKs read it: `OTEL_SERVICE_NAME`,
/// else `service.name` in `OTEL_RESOURCE_ATTRIBUTES` (comma-separated `key=value`, values
/// percent-encoded). An empty value declares none, and so does one longer than
/// [`MAX_SERVICE_NAME`]; a value that is not UTF-8 is read lossily.
pub fn service_name(environ: &[u8]) -> Option<String> {
    declared_service_name(environ).filter(|name| name.len() <= MAX_SERVICE_NAME)
}

fn declared_service_name(environ: &[u8]) -> Option<String> {
    let variable = |name: &[u8]| {
        environ
            .split(|&b| b == 0)
            .find_map(|entry| entry.strip_prefix(name)?.strip_prefix(b"="))
    };
    if let Some(name) = variable(b"OTEL_SERVICE_NAME").filter(|v| !v.is_empty()) {
        return Some(String::from_utf8_lossy(name).into_owned());
    }
    variable(b"OTEL_RESOURCE_ATTRIBUTES")?
        .split(|&b| b == b',')
        .filter_map(|pair| {
            let at = pair.iter().position(|&b| b == b'=')?;
            let (key, value) = (pair[..at].trim_ascii(), pair[at + 1..].trim_ascii());
            (key == b"service.name" && !value.is_empty()).then_some(value)
        })
        .next_back()
        .map(|value| String::from_utf8_lossy(&percent_decoded(value)).into_owned())
}

/// `value` with its `%XX` escapes decoded; a `%` not followed by two hex digits stays as is.
fn percent_decoded(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len());
    let mut i = 0;
    while i < value.len() {
        let escaped = (value[i] == b'%')
            .then(|| value.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(value[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_name_variable_comes_first() {
        let environ = b"PATH=/bin\0OTEL_RESOURCE_ATTRIBUTES=service.name=other\0\
                        OTEL_SERVICE_NAME=checkout\0HOME=/\0";
        assert_eq!(service_name(environ).as_deref(), Some("checkout"));
    }

    #[test]
    fn a_name_past_the_limit_declares_none() {
        let mut environ = b"OTEL_SERVICE_NAME=".to_vec();
        environ.extend(std::iter::repeat_n(b'x', MAX_SERVICE_NAME));
        assert_eq!(
            service_name(&environ).map(|n| n.len()),
            Some(MAX_SERVICE_NAME)
        );
        environ.push(b'x');
        assert_eq!(service_name(&environ), None);
    }

    #[test]
    fn resource_attributes_name_it_otherwise_decoded() {
        for (environ, name) in [
            (
                &b"OTEL_RESOURCE_ATTRIBUTES=deployment.environment=prod,service.name=cart%20api\0"
                    [..],
                Some("cart api"),
            ),
            (
                b"OTEL_RESOURCE_ATTRIBUTES= service.name = billing \0",
                Some("billing"),
            ),
            (
                b"OTEL_SERVICE_NAME=\0OTEL_RESOURCE_ATTRIBUTES=service.name=b\0",
                Some("b"),
            ),
            (
                b"OTEL_RESOURCE_ATTRIBUTES=service.name=100%\0",
                Some("100%"),
            ),
            (b"OTEL_RESOURCE_ATTRIBUTES=service.namespace=shop\0", None),
            (b"XOTEL_SERVICE_NAME=no\0OTEL_SERVICE_NAMES=no\0", None),
            (b"", None),
            (b"\0\0=\0", None),
        ] {
            assert_eq!(
                service_name(environ).as_deref(),
                name,
                "{}",
                String::from_utf8_lossy(environ)
            );
        }
    }
}
