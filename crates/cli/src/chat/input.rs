//! Where the user's lines come from: a line editor with history on a terminal, plain lines
//! from standard input otherwise (one turn per line, so chats can be scripted).

use std::io::BufRead;
use std::path::PathBuf;

use anyhow::{Context, Result};
use rustyline::error::ReadlineError;
use rustyline::DefaultEditor;

const PROMPT: &str = ">>> ";

/// A source of user lines.
pub(super) enum Input {
    /// rustyline, with its history saved to `history` after each line.
    Editor {
        editor: Box<DefaultEditor>,
        history: PathBuf,
    },
    /// Standard input, line by line, without editing or echo.
    Plain(std::io::StdinLock<'static>),
}

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Input::Editor { history, .. } => {
                f.debug_struct("Editor").field("history", history).finish()
            }
            Input::Plain(_) => f.write_str("Plain"),
        }
    }
}

impl Input {
    /// The line editor when standard input is a terminal, plain lines otherwise.
    pub(super) fn open(interactive: bool) -> Result<Self> {
        if !interactive {
            return Ok(Input::Plain(std::io::stdin().lock()));
        }
        let mut editor = Box::new(DefaultEditor::new().context("starting the line editor")?);
        let history = wick_models::wick_home().join("chat_history");
        // A missing history file is the normal first run; an unreadable one is not worth failing.
        let _ = editor.load_history(&history);
        Ok(Input::Editor { editor, history })
    }

    /// The next line, without its line break; `None` at the end of input (Ctrl-D), or when
    /// Ctrl-C is pressed at the prompt (wick chat then exits).
    pub(super) fn next_line(&mut self) -> Result<Option<String>> {
        match self {
            Input::Editor { editor, history } => match editor.readline(PROMPT) {
                Ok(line) => {
                    if !line.trim().is_empty() {
                        let _ = editor.add_history_entry(line.as_str());
                        save_history(editor, history);
                    }
                    Ok(Some(line))
                }
                Err(ReadlineError::Eof | ReadlineError::Interrupted) => Ok(None),
                Err(e) => Err(e).context("reading a line"),
            },
            Input::Plain(stdin) => {
                let mut line = String::new();
                if stdin
                    .read_line(&mut line)
                    .context("reading standard input")?
                    == 0
                {
                    return Ok(None);
                }
                let len = line.trim_end_matches(['\n', '\r']).len();
                line.truncate(len);
                Ok(Some(line))
            }
        }
    }
}

fn save_history(editor: &mut DefaultEditor, history: &PathBuf) {
    if let Some(dir) = history.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Err(e) = editor.save_history(history) {
        eprintln!("(could not save the history to {}: {e})", history.display());
    }
}
