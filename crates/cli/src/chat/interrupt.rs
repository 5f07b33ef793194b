//! Ctrl-C: during an answer it stops that answer; anywhere else it ends wick.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};

const IDLE: u8 = 0;
const ANSWERING: u8 = 1;
const STOPPED: u8 = 2;

/// Shared with the Ctrl-C handler: whether an answer is streaming, and whether it was stopped.
#[derive(Debug, Clone)]
pub(super) struct Interrupt {
    state: Arc<AtomicU8>,
}

impl Interrupt {
    /// Installs the Ctrl-C handler. A Ctrl-C while an answer streams marks it stopped; a
    /// Ctrl-C at any other time, or a second one while the answer is stopping, exits
    /// (status 130). On a terminal, rustyline reads Ctrl-C at the prompt as a key, not a signal.
    pub(super) fn install() -> Result<Self> {
        let interrupt = Interrupt {
            state: Arc::new(AtomicU8::new(IDLE)),
        };
        let state = Arc::clone(&interrupt.state);
        ctrlc::set_handler(move || {
            let stopped =
                state.compare_exchange(ANSWERING, STOPPED, Ordering::SeqCst, Ordering::SeqCst);
            if stopped.is_err() {
                eprintln!();
                std::process::exit(130);
            }
        })
        .context("installing the Ctrl-C handler")?;
        Ok(interrupt)
    }

    /// An answer starts streaming.
    pub(super) fn begin(&self) {
        self.state.store(ANSWERING, Ordering::SeqCst);
    }

    /// Whether Ctrl-C stopped the current answer.
    pub(super) fn stopped(&self) -> bool {
        self.state.load(Ordering::SeqCst) == STOPPED
    }

    /// The answer is over; returns whether Ctrl-C stopped it.
    pub(super) fn end(&self) -> bool {
        self.state.swap(IDLE, Ordering::SeqCst) == STOPPED
    }
}
