//! Commands in a pod's container through the API server, as the `cluster`
//! interface's `exec` and `exec-all` run them: output bounded, exit code
//! read from whoever answered (a kubelet, kwok).

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, api::AttachParams};
use tokio::io::AsyncWriteExt;

use crate::bindings::{ClusterError, ExecOutput};

pub(super) async fn exec(
    pods: &Api<Pod>,
    pod: &str,
    container: &str,
    command: Vec<String>,
    stdin: Option<Vec<u8>>,
) -> Result<ExecOutput, ClusterError> {
    let params = AttachParams::default()
        .container(container)
        .stdin(stdin.is_some())
        .stdout(true)
        .stderr(true);
    let mut process = pods
        .exec(pod, command, &params)
        .await
        .map_err(|err| match err {
            kube::Error::Api(status) if status.is_not_found() => {
                ClusterError::NotFound(status.message)
            }
            other => ClusterError::Api(format!("exec in {pod}/{container}: {other}")),
        })?;
    if let (Some(input), Some(mut writer)) = (stdin, process.stdin()) {
        writer.write_all(&input).await.map_err(|e| {
            ClusterError::Api(format!("writing stdin of exec in {pod}/{container}: {e}"))
        })?;
        // Dropping the writer closes stdin, so the command sees end of input.
    }
    let status = process.take_status();
    // Refused by the host, as a call outside the scope is: `denied`.
    let capped = |stream: &str| {
        ClusterError::Denied(format!(
            "exec in pod `{pod}` (container `{container}`): its {stream} passed {} MiB, the most \
             an exec may return; the command was stopped (a file read back that never ends, a \
             link to a device, say)",
            MAX_EXEC_OUTPUT / (1024 * 1024)
        ))
    };
    let (stdout, stderr) = tokio::try_join!(
        read_bounded(process.stdout(), || capped("stdout")),
        read_bounded(process.stderr(), || capped("stderr"))
    )
    .map_err(|e| match e {
        Bounded::Capped(err) => err,
        Bounded::Io(e) => {
            ClusterError::Api(format!("reading output of exec in {pod}/{container}: {e}"))
        }
    })?;
    let status = match status {
        Some(status) => status.await,
        None => None,
    };
    process
        .join()
        .await
        .map_err(|e| ClusterError::Api(format!("exec in {pod}/{container}: {e}")))?;
    Ok(ExecOutput {
        stdout,
        stderr,
        exit_code: exit_code(status.as_ref()),
    })
}

/// The most one exec stream (stdout or stderr) may return: a pod decides
/// what its commands print, and the operator holds every tenant's calls.
pub const MAX_EXEC_OUTPUT: usize = 1024 * 1024;

enum Bounded {
    Capped(ClusterError),
    Io(std::io::Error),
}

/// Reads `reader` to its end, at most [`MAX_EXEC_OUTPUT`] bytes: one more
/// is `capped()` (and the stream is dropped, which ends the exec).
async fn read_bounded(
    reader: Option<impl tokio::io::AsyncRead + Unpin>,
    capped: impl Fn() -> ClusterError,
) -> Result<Vec<u8>, Bounded> {
    use tokio::io::AsyncReadExt;
    let mut buffer = Vec::new();
    if let Some(reader) = reader {
        let limit = u64::try_from(MAX_EXEC_OUTPUT + 1).unwrap_or(u64::MAX);
        reader
            .take(limit)
            .read_to_end(&mut buffer)
            .await
            .map_err(Bounded::Io)?;
    }
    if buffer.len() > MAX_EXEC_OUTPUT {
        return Err(Bounded::Capped(capped()));
    }
    Ok(buffer)
}

/// The exit code from the API server's exec status: `Success`, or a
/// `NonZeroExitCode` failure whose `ExitCode` cause carries the number (a
/// kubelet), or a failure whose message ends in `exit status N` (kwok, which
/// passes on its process error as text). -1 when none of these says.
fn exit_code(status: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Status>) -> i32 {
    let Some(status) = status else { return -1 };
    if status.status.as_deref() == Some("Success") {
        return 0;
    }
    let from_cause = status
        .details
        .as_ref()
        .and_then(|d| d.causes.as_ref())
        .and_then(|causes| {
            causes
                .iter()
                .find(|c| c.reason.as_deref() == Some("ExitCode"))
        })
        .and_then(|c| c.message.as_deref())
        .and_then(|m| m.trim().parse().ok());
    let from_message = || {
        status
            .message
            .as_deref()
            .and_then(|m| m.trim_end().rsplit_once("exit status "))
            .and_then(|(_, code)| code.parse().ok())
    };
    from_cause.or_else(from_message).unwrap_or(-1)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusCause, StatusDetails};

    use super::{Bounded, MAX_EXEC_OUTPUT, exit_code, read_bounded};
    use crate::bindings::ClusterError;

    fn capped() -> ClusterError {
        ClusterError::Denied("capped".into())
    }

    #[tokio::test]
    async fn a_stream_is_read_whole_up_to_the_cap_and_refused_one_byte_past_it() {
        let at_cap = vec![b'a'; MAX_EXEC_OUTPUT];
        let read = read_bounded(Some(&at_cap[..]), capped).await;
        assert!(matches!(read, Ok(ref bytes) if bytes.len() == MAX_EXEC_OUTPUT));

        let past = vec![b'a'; MAX_EXEC_OUTPUT + 1];
        let read = read_bounded(Some(&past[..]), capped).await;
        assert!(matches!(read, Err(Bounded::Capped(ClusterError::Denied(ref m))) if m == "capped"));

        // A stream that never ends is read only to one byte past the cap.
        let endless = tokio::io::repeat(b'y');
        let read = read_bounded(Some(endless), capped).await;
        assert!(matches!(read, Err(Bounded::Capped(_))));

        // No stream asked for: nothing.
        let none: Option<&[u8]> = None;
        assert!(matches!(read_bounded(none, capped).await, Ok(ref b) if b.is_empty()));
    }

    #[test]
    fn exit_codes_from_a_kubelet_from_kwok_and_from_nowhere() {
        let success = Status {
            status: Some("Success".into()),
            ..Default::default()
        };
        assert_eq!(exit_code(Some(&success)), 0);

        let kubelet = Status {
            status: Some("Failure".into()),
            reason: Some("NonZeroExitCode".into()),
            details: Some(StatusDetails {
                causes: Some(vec![StatusCause {
                    reason: Some("ExitCode".into()),
                    message: Some("3".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(exit_code(Some(&kubelet)), 3);

        let kwok = Status {
            status: Some("Failure".into()),
            message: Some(
                "error executing command in container: cmd wait: sh -c exit 7: exit status 7"
                    .into(),
            ),
            ..Default::default()
        };
        assert_eq!(exit_code(Some(&kwok)), 7);

        let unknown = Status {
            status: Some("Failure".into()),
            message: Some("boom".into()),
            ..Default::default()
        };
        assert_eq!(exit_code(Some(&unknown)), -1);
        assert_eq!(exit_code(None), -1);
    }
}
