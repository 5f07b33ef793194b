//! llama.cpp's RPC backend (`ggml-rpc`): a model's layers on other machines' devices.
//!
//! A worker ([`serve_rpc_worker`], `wick rpc-worker`) runs llama.cpp's RPC server for its
//! machine's devices; the main process registers each worker's devices with ggml before it
//! loads a model ([`connect`]) and llama.cpp offloads layers to them as to local GPUs, split by
//! their free memory. The protocol is llama.cpp's own, unauthenticated: trusted networks only.
//!
//! ggml aborts the whole process when a worker it was told about cannot be reached or speaks
//! another protocol version, so every worker is first greeted here ([`probe`]), in safe Rust,
//! with the handshake ggml would send: a wick that cannot use a worker says so and exits
//! cleanly instead.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use wick_backend::{BackendError, LayerPlacement};

use crate::ffi::Device;

/// The RPC protocol version of the vendored llama.cpp (`RPC_PROTO_MAJOR_VERSION` and
/// `RPC_PROTO_MINOR_VERSION` in `ggml/include/ggml-rpc.h` of llama-cpp-sys-2 0.1.161). ggml
/// accepts a worker of the same major version and a minor version up to its own.
const PROTO_MAJOR: u8 = 7;
const PROTO_MINOR: u8 = 0;
/// `RPC_CMD_HELLO` (ggml-rpc.cpp asserts it is 14 in every version).
const CMD_HELLO: u8 = 14;
/// `RPC_CONN_CAPS_SIZE`: the transport capabilities in the greeting (all zero: plain TCP).
const CONN_CAPS: usize = 24;
/// How long a worker may take to accept the connection, and then to answer the greeting.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Greets the RPC worker at `endpoint` (`HOST:PORT`) as ggml would and checks its protocol
/// version; the connection is closed again before ggml opens its own.
///
/// # Errors
///
/// [`BackendError::RpcWorker`] saying why: no such host, nothing listening, no answer (a
/// worker serves one client at a time), not an RPC worker, another protocol version.
pub fn probe(endpoint: &str) -> Result<(), BackendError> {
    let fail = |reason: String| BackendError::RpcWorker {
        endpoint: endpoint.to_owned(),
        reason,
    };
    let addr = endpoint
        .to_socket_addrs()
        .map_err(|e| fail(format!("cannot resolve it ({e})")))?
        .next()
        .ok_or_else(|| fail("the name resolves to no address".into()))?;
    let mut stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(|e| {
        fail(format!(
            "cannot connect ({e}): start `wick rpc-worker --port {}` on that machine first",
            addr.port()
        ))
    })?;
    stream
        .set_read_timeout(Some(ANSWER_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(ANSWER_TIMEOUT)))
        .map_err(|e| fail(e.to_string()))?;
    // | cmd (1 byte) | input size (8 bytes, little-endian) | input: the transport caps |
    let mut hello = vec![CMD_HELLO];
    hello.extend_from_slice(&(CONN_CAPS as u64).to_le_bytes());
    hello.extend_from_slice(&[0; CONN_CAPS]);
    let silent = |e: std::io::Error| {
        fail(format!(
            "it accepted the connection but did not answer the RPC handshake ({e}): is it a \
             llama.cpp RPC worker, and not busy with another client (a worker serves one \
             main process at a time)?"
        ))
    };
    stream.write_all(&hello).map_err(silent)?;
    // | output size (8 bytes) | major, minor, patch, padding, transport caps |
    let mut size = [0u8; 8];
    stream.read_exact(&mut size).map_err(silent)?;
    let size = u64::from_le_bytes(size);
    let expected = 4 + CONN_CAPS as u64;
    if size != expected {
        return Err(fail(format!(
            "it answered the handshake with {size} bytes, not {expected}: it speaks another \
             RPC protocol version than this wick ({PROTO_MAJOR}.{PROTO_MINOR}.x); run the same \
             wick (or llama.cpp) version on every machine"
        )));
    }
    let mut answer = [0u8; 4 + CONN_CAPS];
    stream.read_exact(&mut answer).map_err(silent)?;
    let [major, minor, patch, ..] = answer;
    if major != PROTO_MAJOR || minor > PROTO_MINOR {
        return Err(fail(format!(
            "it speaks RPC protocol {major}.{minor}.{patch}, this wick {PROTO_MAJOR}.{PROTO_MINOR}.x: \
             run the same wick (or llama.cpp) version on every machine"
        )));
    }
    Ok(())
}

/// Checks every worker ([`probe`]) and registers its devices with ggml; the devices a model
/// offloads to, in llama.cpp's order: the workers' (in the order given), then local GPUs.
pub(crate) fn connect(endpoints: &[String]) -> Result<Vec<Device>, BackendError> {
    if !crate::ffi::rpc_available() {
        return Err(BackendError::RpcWorker {
            endpoint: endpoints.join(","),
            reason: "this wick was built without llama.cpp's RPC backend (GGML_RPC=ON)".into(),
        });
    }
    let mut devices = Vec::new();
    for endpoint in endpoints {
        probe(endpoint)?;
        let found =
            crate::ffi::rpc_add_server(endpoint).map_err(|reason| BackendError::RpcWorker {
                endpoint: endpoint.clone(),
                reason,
            })?;
        devices.extend(found);
    }
    devices.extend(crate::ffi::local_gpus());
    Ok(devices)
}

/// Where llama.cpp puts each layer of an `n_layer`-layer model with `n_gpu_layers` offloaded
/// to `devices` (llama-model.cpp, `load_tensors`): the last `n_gpu_layers` layers (the output
/// layer counting as one) go to the devices, split in proportion to their free memory, the
/// rest stay on the CPU.
pub(crate) fn placement(
    devices: &[Device],
    n_layer: u32,
    n_gpu_layers: u32,
    cpu: &str,
) -> Vec<LayerPlacement> {
    let gpu_start = (n_layer + 1).saturating_sub(n_gpu_layers);
    let offloaded = if devices.is_empty() {
        0
    } else {
        n_gpu_layers.min(n_layer + 1)
    };
    #[allow(clippy::cast_precision_loss)] // a proportion: f32, as llama.cpp computes it
    let splits: Vec<f32> = {
        let weights: Vec<f32> = devices.iter().map(|d| d.free.max(1) as f32).collect();
        let total: f32 = weights.iter().sum();
        weights
            .iter()
            .scan(0.0, |sum, w| {
                *sum += w;
                Some(*sum / total)
            })
            .collect()
    };
    let device_of = |layer: u32| -> Option<&Device> {
        if layer < gpu_start || layer - gpu_start >= offloaded {
            return None;
        }
        #[allow(clippy::cast_precision_loss)]
        let at = (layer - gpu_start) as f32 / offloaded as f32;
        // `std::upper_bound`: the first split point above `at`.
        let i = splits.partition_point(|&s| s <= at);
        devices.get(i.min(devices.len() - 1))
    };
    let mut spans: Vec<LayerPlacement> = Vec::new();
    for layer in 0..=n_layer {
        let (name, description) =
            device_of(layer).map_or(("CPU", cpu), |d| (d.name.as_str(), d.description.as_str()));
        let output = layer == n_layer;
        match spans.last_mut() {
            Some(span) if span.device == name => {
                if output {
                    span.output = true;
                } else {
                    span.n_layers += 1;
                }
            }
            _ => spans.push(LayerPlacement {
                device: name.to_owned(),
                description: description.to_owned(),
                first_layer: layer,
                n_layers: u32::from(!output),
                output,
                kv_bytes: 0,
                deterministic: false,
            }),
        }
    }
    spans
}

/// How a worker serves: where, with how many threads and which CPU kernels.
#[derive(Debug, Clone)]
pub struct RpcWorkerConfig {
    /// `HOST:PORT` to listen on.
    pub endpoint: String,
    /// CPU threads for the layers it computes.
    pub n_threads: usize,
    /// ggml's reference (batch-invariant) CPU kernels, as a local model in
    /// [`wick_backend::KernelMode::Deterministic`] uses.
    pub deterministic: bool,
}

/// Runs llama.cpp's RPC server for this machine's devices (its GPUs, else its CPU), serving one
/// main process at a time. It blocks for as long as the server runs: stop the process to stop
/// it.
///
/// # Errors
///
/// [`BackendError::RpcWorker`] when it could not start (the port is taken, no RPC backend in
/// this build) or stopped.
pub fn serve_rpc_worker(config: &RpcWorkerConfig) -> Result<(), BackendError> {
    crate::load::runtime()?;
    let fail = |reason: String| BackendError::RpcWorker {
        endpoint: config.endpoint.clone(),
        reason,
    };
    if !crate::ffi::rpc_available() {
        return Err(fail(
            "this wick was built without llama.cpp's RPC backend (GGML_RPC=ON)".into(),
        ));
    }
    // ggml only prints a bind failure; check the address here to say it plainly.
    drop(
        std::net::TcpListener::bind(&config.endpoint)
            .map_err(|e| fail(format!("cannot listen there ({e})")))?,
    );
    let reason = crate::ffi::rpc_start_server(
        &config.endpoint,
        config.n_threads.max(1),
        config.deterministic,
    );
    Err(fail(reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(name: &str, free: usize) -> Device {
        Device {
            index: 0,
            name: name.into(),
            description: format!("{name}:50052"),
            free,
            total: free,
            kind: "gpu",
        }
    }

    fn spans(p: &[LayerPlacement]) -> Vec<(String, u32, u32, bool)> {
        p.iter()
            .map(|s| (s.device.clone(), s.first_layer, s.n_layers, s.output))
            .collect()
    }

    #[test]
    fn issue_18_no_offload_keeps_every_layer_on_the_cpu() {
        let p = placement(&[], 30, 99, "Xeon");
        assert_eq!(spans(&p), [("CPU".into(), 0, 30, true)]);
        assert_eq!(p[0].description, "Xeon");
        let p = placement(&[device("RPC0", 1)], 30, 0, "Xeon");
        assert_eq!(spans(&p), [("CPU".into(), 0, 30, true)]);
    }

    #[test]
    fn issue_18_the_last_layers_go_to_the_workers_split_by_free_memory() {
        let all = placement(&[device("RPC0", 8)], 30, 99, "cpu");
        assert_eq!(spans(&all), [("RPC0".into(), 0, 30, true)]);
        // 10 offloaded: the output layer and the last 9 repeating ones.
        let some = placement(&[device("RPC0", 8)], 30, 10, "cpu");
        assert_eq!(
            spans(&some),
            [("CPU".into(), 0, 21, false), ("RPC0".into(), 21, 9, true)]
        );
        // Two workers, the second with three times the free memory: a quarter and the rest.
        let two = placement(&[device("RPC0", 1), device("RPC1", 3)], 31, 99, "cpu");
        assert_eq!(
            spans(&two),
            [("RPC0".into(), 0, 8, false), ("RPC1".into(), 8, 23, true)]
        );
    }
}
