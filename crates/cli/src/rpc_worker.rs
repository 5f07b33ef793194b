//! `wick rpc-worker`: llama.cpp's RPC server, so that `wick serve --rpc` on another machine
//! computes layers of its model on this machine's devices.

use std::net::Ipv4Addr;

use anyhow::{bail, Context, Result};
use clap::Args;

/// Arguments of `wick rpc-worker`.
#[derive(Debug, Args)]
pub(crate) struct RpcWorkerArgs {
    /// The IPv4 address to listen on. Anything but a loopback address needs --allow-remote.
    #[arg(long, default_value = "127.0.0.1", value_name = "HOST")]
    host: String,

    /// The port to listen on.
    #[arg(long, default_value_t = 50052, value_name = "PORT")]
    port: u16,

    /// CPU threads for the layers computed here [default: every core].
    #[arg(long, value_name = "N")]
    threads: Option<usize>,

    /// Listen on a non-loopback address. The RPC protocol has no authentication or
    /// encryption, and llama.cpp's RPC server has had memory-safety bugs: anyone who can
    /// reach the port can use this machine's devices and memory, and may be able to run code.
    /// Use it only on a trusted network (a private LAN or a VPN between your machines).
    #[arg(long)]
    allow_remote: bool,

    /// CPU kernels for the layers computed here: `deterministic` (ggml's batch-invariant
    /// reference kernels, as a local `wick serve` uses by default) or `fast`.
    #[arg(long, default_value = "deterministic", value_name = "MODE", value_parser = ["deterministic", "fast"])]
    kernels: String,
}

pub(crate) fn run(args: &RpcWorkerArgs) -> Result<()> {
    let ip: Ipv4Addr = args.host.parse().with_context(|| {
        format!(
            "--host {}: llama.cpp's RPC server listens on an IPv4 address (such as 127.0.0.1 \
             or 192.168.1.20), not a name or an IPv6 address",
            args.host
        )
    })?;
    if !ip.is_loopback() {
        if !args.allow_remote {
            bail!(
                "refusing to listen on {ip}: the RPC protocol has no authentication or \
                 encryption, and llama.cpp's RPC server has had memory-safety bugs, so anyone \
                 who can reach the port could use (or attack) this machine. Pass \
                 --allow-remote to listen there anyway, only on a trusted network (a private \
                 LAN or a VPN between your machines)"
            );
        }
        eprintln!(
            "wick rpc-worker: warning: listening on {ip} with no authentication: anyone who \
             can reach port {} can use this machine's devices; keep it on a trusted network",
            args.port
        );
    }
    let config = wick::RpcWorkerConfig {
        endpoint: format!("{ip}:{}", args.port),
        n_threads: args.threads.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(4, std::num::NonZeroUsize::get)
        }),
        deterministic: args.kernels == "deterministic",
    };
    eprintln!(
        "wick rpc-worker: serving this machine's devices to `wick serve --rpc {}` (llama.cpp \
         RPC; one main process at a time; Ctrl-C stops)",
        config.endpoint
    );
    // llama.cpp's server blocks in its accept loop for good: it runs on its own thread, and
    // SIGINT/SIGTERM end the process from this one.
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("wick-rpc-worker".into())
        .spawn(move || {
            let _ = ended_tx.send(wick::serve_rpc_worker(&config));
        })
        .context("cannot start the worker thread")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        tokio::select! {
            ended = ended_rx => match ended {
                Ok(Err(e)) => Err(anyhow::Error::new(e)),
                Ok(Ok(())) | Err(_) => bail!("the RPC server stopped"),
            },
            () = stop_signal() => {
                eprintln!("wick rpc-worker: stopped");
                Ok(())
            }
        }
    })
}

/// Resolves on SIGINT or SIGTERM.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
