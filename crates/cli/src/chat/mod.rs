//! `wick chat`: an interactive chat on a local model, or with a running server (`--url`).

mod input;
mod interrupt;
mod local;
mod output;
mod remote;

use std::io::{IsTerminal, Write};

use anyhow::Result;
use clap::Args;
use wick::{Message, Role};

use crate::flags::{LoadArgs, SamplingArgs, TemplateArgs};
use input::Input;
use interrupt::Interrupt;
use local::Local;
use output::Printer;
use remote::Remote;

/// The commands, for `/help` and `wick chat --help`.
const COMMANDS: &str = "\
Commands (a line that starts with `/`):
  /reset         clear the conversation (the system prompt stays)
  /system TEXT   set the system prompt and clear the conversation (`/system` alone removes it)
  /image FILE    attach an image to your next message (the model needs --mmproj)
  /help          list the commands
  /exit          leave (so does Ctrl-D)";

const MORE_HELP: &str = "\
Every other line is a message; the answer streams as it is generated. Reasoning (from models
that think before answering) is shown dimmed, or framed as `[reasoning] ...` when standard
output is not a terminal, and is not kept in the conversation. Tool calls are shown as
`tool call NAME(ARGS)`. Status lines such as `(conversation reset)` go to standard error.

Ctrl-C while an answer streams stops that answer (what was shown stays in the conversation);
Ctrl-C at the prompt leaves, like Ctrl-D and /exit.

On a terminal, lines are edited with rustyline (arrows, Ctrl-R search) and the history is kept
in $WICK_HOME/chat_history. When standard input is not a terminal each line is one turn, so a
chat can be scripted: printf 'Hi\\n/system Be brief\\nWhat is 2+2?\\n' | wick chat

With --url, the chat goes to an OpenAI-compatible server (POST URL/v1/chat/completions,
streamed); --max-tokens, --temperature (or --greedy), --top-p and --seed (when given) are sent
with every request, and the other model and sampling flags apply to local models only.";

/// Arguments of `wick chat`.
#[derive(Debug, Args)]
#[command(after_long_help = format!("{COMMANDS}\n\n{MORE_HELP}"))]
pub(crate) struct ChatArgs {
    /// The model: locally, a GGUF file, an http(s):// URL, hf:owner/repo/file.gguf,
    /// owner/repo[:QUANT] or a name from `wick ls` [default: the default model in wick's
    /// cache directory]; with --url, the model name sent to the server [default: the first
    /// model the server lists].
    #[arg(short, long, value_name = "REF")]
    model: Option<String>,

    /// The system prompt (change it in the chat with `/system TEXT`).
    #[arg(short, long, value_name = "TEXT")]
    system: Option<String>,

    /// Chat with a running OpenAI-compatible server at this URL (e.g. `http://127.0.0.1:8080`)
    /// instead of loading a model.
    #[arg(long, value_name = "URL")]
    url: Option<String>,

    /// The server's API key, sent as a bearer token (with --url).
    #[arg(long, value_name = "KEY", env = "WICK_API_KEY", hide_env_values = true)]
    api_key: Option<String>,

    /// Format chats with this llama.cpp template name (`chatml`, `llama3`, …) or inline Jinja
    /// instead of the model's own template [default: the model's] (without --url).
    #[arg(long, value_name = "NAME|JINJA", conflicts_with = "url")]
    chat_template: Option<String>,

    /// Most tokens in one answer.
    #[arg(short = 'n', long, default_value_t = 512, value_name = "N")]
    max_tokens: u32,

    #[command(flatten)]
    sampling: SamplingArgs,

    #[command(flatten)]
    load: LoadArgs,

    #[command(flatten)]
    template: TemplateArgs,
}

/// The conversation so far: the system prompt and the user and assistant messages.
#[derive(Debug, Clone, Default, PartialEq)]
struct Conversation {
    system: Option<String>,
    messages: Vec<Message>,
}

/// What an answer added to the conversation.
#[derive(Debug, Clone, Default, PartialEq)]
struct Answer {
    /// The answer's content (without reasoning and tool calls).
    content: String,
}

/// Something that answers a conversation: a local model or a server.
trait Responder {
    /// Streams the answer to the conversation's last message into `out`, stopping early when
    /// `interrupt` says Ctrl-C was pressed.
    fn answer<W: Write>(
        &mut self,
        conversation: &Conversation,
        out: &mut Printer<W>,
        interrupt: &Interrupt,
    ) -> Result<Answer>;
}

/// One line of input.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Line {
    Blank,
    Say(String),
    Reset,
    System(Option<String>),
    Image(String),
    Help,
    Exit,
    Unknown(String),
}

impl Line {
    fn parse(line: &str) -> Line {
        let line = line.trim();
        if line.is_empty() {
            return Line::Blank;
        }
        let Some(command) = line.strip_prefix('/') else {
            return Line::Say(line.to_owned());
        };
        let (name, rest) = command
            .split_once(char::is_whitespace)
            .map_or((command, ""), |(n, r)| (n, r.trim()));
        match name {
            "reset" | "clear" => Line::Reset,
            "system" => Line::System(Some(rest.to_owned()).filter(|s| !s.is_empty())),
            "image" => Line::Image(rest.to_owned()),
            "help" | "?" => Line::Help,
            "exit" | "quit" | "bye" => Line::Exit,
            _ => Line::Unknown(format!("/{name}")),
        }
    }
}

pub(crate) fn run(args: &ChatArgs) -> Result<()> {
    let interactive = std::io::stdin().is_terminal();
    let interrupt = Interrupt::install()?;
    let conversation = Conversation {
        system: args.system.clone(),
        messages: Vec::new(),
    };
    let mut session = Session {
        conversation,
        input: Input::open(interactive)?,
        printer: Printer::new(std::io::stdout(), std::io::stdout().is_terminal()),
        interrupt,
        turns: 0,
        failed: 0,
        pending: Vec::new(),
    };
    if let Some(url) = &args.url {
        let mut remote = Remote::connect(url, args)?;
        banner(interactive, &remote.name());
        session.run(&mut remote)
    } else {
        let mut local = Local::load(args)?;
        // The model as the user named it, not the GGUF's internal name.
        let name = args.model.as_deref().unwrap_or("the default model");
        banner(interactive, name);
        session.run(&mut local)
    }
}

/// Greets a person at a terminal.
fn banner(interactive: bool, name: &str) {
    if interactive {
        eprintln!("wick chat with {name}: /help lists the commands, Ctrl-D leaves.");
    }
}

/// The read-answer loop.
#[derive(Debug)]
struct Session {
    conversation: Conversation,
    input: Input,
    printer: Printer<std::io::Stdout>,
    interrupt: Interrupt,
    /// Turns sent, and those that failed (the exit status says so).
    turns: usize,
    failed: usize,
    /// Images `/image` attached to the next message.
    pending: Vec<wick::Media>,
}

impl Session {
    fn run(&mut self, responder: &mut impl Responder) -> Result<()> {
        while let Some(line) = self.input.next_line()? {
            match Line::parse(&line) {
                Line::Blank => {}
                Line::Say(text) => self.turn(responder, text)?,
                Line::Reset => {
                    self.conversation.messages.clear();
                    eprintln!("(conversation reset)");
                }
                Line::System(text) => {
                    let what = if text.is_some() { "set" } else { "removed" };
                    self.conversation.system = text;
                    self.conversation.messages.clear();
                    eprintln!("(system prompt {what}, conversation reset)");
                }
                Line::Image(path) if path.is_empty() => {
                    eprintln!("(/image needs a file: /image photo.png)");
                }
                Line::Image(path) => match crate::flags::read_image(std::path::Path::new(&path)) {
                    Ok(image) => {
                        self.pending.push(image);
                        eprintln!("(image {path} goes with your next message)");
                    }
                    Err(e) => eprintln!("error: {e:#}"),
                },
                Line::Help => outln!("{COMMANDS}")?,
                Line::Exit => break,
                Line::Unknown(name) => {
                    eprintln!("(unknown command {name}: /help lists the commands)");
                }
            }
        }
        if self.failed > 0 {
            anyhow::bail!("{} of {} turns failed", self.failed, self.turns);
        }
        Ok(())
    }

    /// Sends `text` and streams the answer. A failed turn is reported and taken back out of
    /// the conversation; the chat goes on.
    fn turn(&mut self, responder: &mut impl Responder, text: String) -> Result<()> {
        let mut message = Message::new(Role::User, text);
        for image in self.pending.drain(..) {
            message.push_media(image);
        }
        self.conversation.messages.push(message);
        self.interrupt.begin();
        self.turns += 1;
        let result = responder.answer(&self.conversation, &mut self.printer, &self.interrupt);
        let stopped = self.interrupt.end();
        self.printer.finish()?;
        match result {
            Ok(answer) => {
                if stopped {
                    eprintln!("(answer stopped)");
                }
                self.conversation
                    .messages
                    .push(Message::new(Role::Assistant, answer.content));
            }
            Err(e) => {
                eprintln!("error: {e:#}");
                self.failed += 1;
                self.conversation.messages.pop();
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_into_messages_and_commands() {
        assert_eq!(Line::parse("  "), Line::Blank);
        assert_eq!(Line::parse(" Hi there "), Line::Say("Hi there".into()));
        assert_eq!(Line::parse("/reset"), Line::Reset);
        assert_eq!(
            Line::parse("/system  Be brief. "),
            Line::System(Some("Be brief.".into()))
        );
        assert_eq!(Line::parse("/system"), Line::System(None));
        assert_eq!(Line::parse("/exit"), Line::Exit);
        assert_eq!(Line::parse("/help"), Line::Help);
        assert_eq!(
            Line::parse("/image  a b.png "),
            Line::Image("a b.png".into())
        );
        assert_eq!(Line::parse("/nope x"), Line::Unknown("/nope".into()));
    }
}
