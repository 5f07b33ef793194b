//! Starting and stopping the two servers under test as real processes.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::client::Client;

/// Which server a measurement ran against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Side {
    Wick,
    LlamaCpp,
}

impl Side {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Side::Wick => "wick",
            Side::LlamaCpp => "llama.cpp",
        }
    }
}

/// How a server is started: the same model, threads and per-sequence context on both sides.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    pub(crate) model: PathBuf,
    pub(crate) threads: u32,
    /// Tokens of context per sequence.
    pub(crate) ctx: u32,
    pub(crate) parallel: u32,
    /// wick's `$WICK_HOME` (its disk prompt cache lives there).
    pub(crate) wick_home: PathBuf,
    pub(crate) llama_server: PathBuf,
    /// A Jinja chat template both servers use instead of the model's.
    pub(crate) chat_template_file: Option<PathBuf>,
    /// More arguments for `wick serve` (`--kv-cache-size 0`, `--kernels fast`).
    pub(crate) wick_args: Vec<String>,
    /// More arguments for `llama-server`.
    pub(crate) llama_args: Vec<String>,
    /// Layers both offload to the GPU.
    pub(crate) gpu_layers: u32,
}

/// A running server; stopped (SIGTERM, then SIGKILL) when dropped.
#[derive(Debug)]
pub(crate) struct Running {
    child: Child,
    pub(crate) client: Client,
    pub(crate) side: Side,
}

/// A free port on 127.0.0.1.
fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

impl Launch {
    /// Starts `side` and waits until its `/health` answers 200.
    pub(crate) async fn start(&self, side: Side) -> Result<Running> {
        let port = free_port()?;
        let log = self.wick_home.join(format!("{}-{port}.log", side.label()));
        std::fs::create_dir_all(&self.wick_home)?;
        let log_file = std::fs::File::create(&log)?;
        let mut command = match side {
            Side::Wick => {
                let mut c = Command::new(std::env::current_exe()?);
                c.arg("serve")
                    .arg("-m")
                    .arg(&self.model)
                    .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                    .args(["--parallel", &self.parallel.to_string()])
                    .args(["-c", &self.ctx.to_string()])
                    .args(["--threads", &self.threads.to_string()])
                    .args(["--gpu-layers", &self.gpu_layers.to_string()])
                    .args(&self.wick_args)
                    .env("WICK_HOME", &self.wick_home);
                c
            }
            Side::LlamaCpp => {
                let mut c = Command::new(&self.llama_server);
                let total = self.ctx * self.parallel;
                c.arg("-m")
                    .arg(&self.model)
                    .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                    .args(["-np", &self.parallel.to_string()])
                    .args(["-c", &total.to_string()])
                    .args(["-t", &self.threads.to_string()])
                    .args(["-tb", &self.threads.to_string()])
                    .args(["--jinja", "--no-webui"])
                    .args(["-ngl", &self.gpu_layers.to_string()])
                    .args(&self.llama_args);
                c
            }
        };
        if let Some(file) = &self.chat_template_file {
            command.arg("--chat-template-file").arg(file);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .spawn()
            .with_context(|| format!("starting the {} server", side.label()))?;
        let mut running = Running {
            child,
            client: Client::new(&format!("http://127.0.0.1:{port}"))?,
            side,
        };
        running.wait_ready(&log).await?;
        Ok(running)
    }
}

impl Running {
    async fn wait_ready(&mut self, log: &Path) -> Result<()> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "the {} server exited ({status}) while starting; its log: {}",
                    self.side.label(),
                    log.display()
                );
            }
            if self.client.status("/health").await == 200 {
                return Ok(());
            }
            if started.elapsed() > Duration::from_secs(300) {
                bail!(
                    "the {} server did not become ready in 5 minutes; its log: {}",
                    self.side.label(),
                    log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// CPU time (user + system) the server process has used so far, when the OS says.
    pub(crate) fn cpu_time(&self) -> Option<Duration> {
        cpu_time(self.child.id())
    }

    /// Stops the server: SIGTERM, up to 30 s for a clean exit, then SIGKILL.
    pub(crate) async fn stop(mut self) {
        terminate(&mut self.child).await;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn terminate(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// utime + stime of `pid` from `/proc/<pid>/stat` (Linux; `None` elsewhere).
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = parse_stat_ticks(&stat)?;
    // The kernel's USER_HZ is 100 on every Linux wick runs on.
    Some(Duration::from_millis(ticks * 10))
}

/// utime + stime, in clock ticks, from the text of `/proc/<pid>/stat`.
fn parse_stat_ticks(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces and parentheses: fields resume after the
    // last ')'. utime and stime are fields 14 and 15, so 12th and 13th after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cpu_ticks_past_a_command_with_spaces() {
        let stat = "42 (llama (server) x) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9";
        assert_eq!(parse_stat_ticks(stat), Some(325));
        assert_eq!(parse_stat_ticks("garbage"), None);
    }

    #[test]
    fn this_process_has_a_cpu_time() {
        if cfg!(target_os = "linux") {
            assert!(cpu_time(std::process::id()).is_some());
        }
    }
}
